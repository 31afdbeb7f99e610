#!/usr/bin/env python3
"""A linear reference for the IMDB classifiers: TF-IDF (sublinear tf, words seen in at least
two training reviews) and logistic regression, with unigrams and with uni+bigrams, validated
on 10% of the training reviews held out at random and by movie (as imdb_study's
--val-split random|movie), and tested on aclImdb's test split. Needs scikit-learn (an optional
tool, like PyTorch for bench/pytorch; nothing in the build uses it).

    python3 scripts/experiments/bow_baseline.py --data /path/to/aclImdb

With --wordpiece VOCAB the features are the reference BERT WordPiece tokens (the transformers
package's tokenizer) instead of words, and with --keep-tail T a review longer than n - 2 tokens
keeps its first n - 2 - T and last T tokens, as imdb_study --keep-tail does.
"""
import argparse
import os
import random
import re

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression

BR = re.compile(r"<br\s*/?>", re.IGNORECASE)


def load(data, split):
    """Texts, labels and movie ids (the line of urls_<label>.txt, one numbering per split)."""
    texts, labels, movies = [], [], []
    for label, name in ((0, "neg"), (1, "pos")):
        folder = os.path.join(data, split, name)
        urls_path = os.path.join(data, split, "urls_%s.txt" % name)
        urls = open(urls_path).read().split("\n") if os.path.exists(urls_path) else None
        files = sorted(os.listdir(folder), key=lambda f: int(f.split("_")[0]))
        for f in files:
            with open(os.path.join(folder, f), encoding="utf-8", errors="replace") as fh:
                texts.append(BR.sub(" ", fh.read()))
            labels.append(label)
            movies.append(urls[int(f.split("_")[0])] if urls else None)
    return texts, np.array(labels), movies


def wordpieces(texts, vocab, n, keep_tail):
    """Each text as its WordPiece tokens joined by spaces, head + tail truncated to n - 2 when
    keep_tail >= 0 (the first n - 2 when 0)."""
    from transformers import BertTokenizerFast

    tok = BertTokenizerFast(vocab, do_lower_case=True)
    room, out = n - 2, []
    for ids in tok(texts, add_special_tokens=False)["input_ids"]:
        if keep_tail >= 0 and len(ids) > room:
            tail = min(keep_tail, room)
            ids = ids[: room - tail] + (ids[len(ids) - tail:] if tail else [])
        out.append(" ".join(tok.convert_ids_to_tokens(ids)))
    return out


def val_split(n, movies, by_movie, fraction, seed):
    rng = random.Random(seed)
    if not by_movie:
        idx = list(range(n))
        rng.shuffle(idx)
        return set(idx[: round(fraction * n)])
    films = sorted(set(movies))
    rng.shuffle(films)
    val, taken, count = set(), 0, {}
    for m in movies:
        count[m] = count.get(m, 0) + 1
    for m in films:
        if taken >= fraction * n:
            break
        val.add(m)
        taken += count[m]
    return {i for i in range(n) if movies[i] in val}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="the aclImdb directory")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--C", type=float, default=1.0, help="inverse L2 strength")
    ap.add_argument("--max-ngram", type=int, default=2, choices=(1, 2))
    ap.add_argument("--wordpiece", metavar="VOCAB", help="WordPiece tokens of this vocab file")
    ap.add_argument("--n", type=int, default=512, help="sequence length, with --keep-tail")
    ap.add_argument("--keep-tail", type=int, default=-1, metavar="T",
                    help="with --wordpiece: truncate to n - 2 tokens, the last T kept")
    a = ap.parse_args()
    xtr, ytr, mtr = load(a.data, "train")
    xte, yte, _ = load(a.data, "test")
    pattern = r"(?u)\b\w\w+\b"
    if a.wordpiece:
        xtr = wordpieces(xtr, a.wordpiece, a.n, a.keep_tail)
        xte = wordpieces(xte, a.wordpiece, a.n, a.keep_tail)
        pattern = r"\S+"
    print("| features | validation | val acc | test acc |")
    print("|---|---|---:|---:|")
    for ngrams in ((1, 1), (1, 2))[: a.max_ngram]:
        for by_movie in (False, True):
            val = val_split(len(xtr), mtr, by_movie, 0.1, a.seed)
            tr = [i for i in range(len(xtr)) if i not in val]
            va = sorted(val)
            vec = TfidfVectorizer(ngram_range=ngrams, min_df=2, sublinear_tf=True,
                                  token_pattern=pattern)
            model = LogisticRegression(C=a.C, max_iter=2000)
            model.fit(vec.fit_transform([xtr[i] for i in tr]), ytr[tr])
            acc_va = (model.predict(vec.transform([xtr[i] for i in va])) == ytr[va]).mean()
            acc_te = (model.predict(vec.transform(xte)) == yte).mean()
            name = "unigrams" if ngrams == (1, 1) else "uni+bigrams"
            print("| %s | %s | %.4f | %.4f |"
                  % (name, "movie" if by_movie else "random", acc_va, acc_te), flush=True)


if __name__ == "__main__":
    main()
