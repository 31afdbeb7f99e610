#!/usr/bin/env python3
"""Generate the WordPiece tokenizer fixtures in this folder with the reference
tokenizer (Hugging Face transformers' slow Python BertTokenizer, uncased).

Not run by `make check`; run it by hand to regenerate the fixtures:

    python3.12 -m venv venv && venv/bin/pip install 'transformers<5'
    venv/bin/python tests/data/tokenizer/make_fixtures.py \
        --imdb ../shared/data/aclImdb

To compare a built cformer-tokenize with the reference on every code point:

    venv/bin/python tests/data/tokenizer/make_fixtures.py --check-cli build/cformer-tokenize

Use a Python whose unicodedata has the same Unicode version as the utf8proc
the library is built with (Python 3.12 and utf8proc 2.8: Unicode 15.0): the
reference drops code points its Unicode version does not know (category Cn).

The reference pipeline is BertTokenizer.tokenize() less its special-token
handling: the per-character str.lower() pre-pass of
PreTrainedTokenizer.tokenize (do_lower_case), then BasicTokenizer
(clean text, CJK spacing, NFC, whitespace split, lower, NFD + drop Mn,
punctuation split) with never_split empty, then WordpieceTokenizer. So
"[MASK]" in the input text is text ("[", "mask", "]"), never the special
token. Every case is cross-checked against the full BertTokenizer.tokenize()
where the text contains no special-token string, and against
BertTokenizerFast; disagreements are printed (and fail the script for the
slow tokenizer).

Byte cases (bytes.tsv) hold byte strings that are not valid UTF-8 or contain
NUL: their expected ids are the reference's ids for
bytes.decode("utf-8", errors="replace"); each ill-formed subsequence becomes
U+FFFD, which the reference's cleaning drops.

Files written (one case a line, tab-separated, UTF-8, LF):
  cases.tsv    name, text as a JSON string, ids, tokens (space-separated)
  bytes.tsv    name, input as hex bytes, ids, tokens
  unicode.tsv  name, text as a JSON string, ids (code point sweep: "a<c>B")
"""
import argparse
import json
import os
import random
import re
import sys
import unicodedata

from transformers import BertTokenizer, BertTokenizerFast
from transformers.models.bert.tokenization_bert import BasicTokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
VOCAB = os.path.join(HERE, "bert-base-uncased-vocab.txt")
SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")

slow = BertTokenizer(VOCAB, do_lower_case=True)
fast = BertTokenizerFast(VOCAB, do_lower_case=True)
basic = BasicTokenizer(do_lower_case=True, never_split=None, tokenize_chinese_chars=True,
                       strip_accents=None)


def ref_tokens(text):
    text = "".join(c.lower() for c in text)  # the pre-pass of PreTrainedTokenizer.tokenize
    out = []
    for word in basic.tokenize(text):
        out += slow.wordpiece_tokenizer.tokenize(word)
    return out


mismatch = {"slow": 0, "fast": 0, "fast_cn": 0}


def expected(name, text):
    toks = ref_tokens(text)
    if not any(s.lower() in text.lower() for s in SPECIALS):
        full = slow.tokenize(text)
        if full != toks:
            mismatch["slow"] += 1
            print(f"slow BertTokenizer differs on {name}: {full} vs {toks}", file=sys.stderr)
    ftoks = fast.tokenize(text, split_special_tokens=True)
    if ftoks != toks:
        # The Rust tokenizer keeps unassigned code points (category Cn),
        # which the Python reference drops as control characters.
        assigned = "".join(c for c in text if unicodedata.category(c) != "Cn")
        if fast.tokenize(assigned, split_special_tokens=True) == toks:
            mismatch["fast_cn"] += 1
        else:
            mismatch["fast"] += 1
            print(f"BertTokenizerFast differs on {name}: {ftoks} vs {toks}"[:300],
                  file=sys.stderr)
    return slow.convert_tokens_to_ids(toks), toks


def esc(text):
    """JSON string, readable: escapes only what would be invisible or
    ambiguous (controls, format, separators, marks, unassigned, private use)."""
    out = []
    for c in text:
        cat = unicodedata.category(c)
        if c in '"\\':
            out.append("\\" + c)
        elif cat[0] in "CM" or cat in ("Zl", "Zp") or (cat == "Zs" and c != " "):
            cp = ord(c)
            if cp > 0xFFFF:
                cp -= 0x10000
                out.append("\\u%04x\\u%04x" % (0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF)))
            else:
                out.append("\\u%04x" % cp)
        else:
            out.append(c)
    s = '"' + "".join(out) + '"'
    assert json.loads(s) == text
    return s


def row(name, shown, ids, toks=None):
    assert "\t" not in name and "\n" not in name
    cols = [name, shown, " ".join(map(str, ids))]
    if toks is not None:
        assert all(not re.search(r"\s", t) for t in toks)
        cols.append(" ".join(toks))
    return "\t".join(cols) + "\n"


HAND = [
    # accents and case
    ("accent-cafe", "Café"), ("accent-naive", "naïve"), ("accent-angstrom", "Ångström"),
    ("accent-eszett", "Straße ß ẞ"), ("accent-creme", "Crème Brûlée résumé"),
    ("accent-spanish", "¿Qué pasó, señor Muñoz?"), ("accent-polish", "Łódź Gdańsk Źródło"),
    ("accent-nordic", "Øresund Æble Þórr"), ("accent-turkish", "İstanbul ıslak ĞÜŞ"),
    ("accent-vietnamese", "Tiếng Việt có dấu"), ("accent-digraph", "ǄǅǆǇǈǉ"),
    ("accent-ligature", "ﬁne ﬂow œuvre Œ"), ("accent-decomposed", "Cafe\u0301 A\u030angstro\u0308m"),
    ("accent-signs", "\u212b \u2126 \u212a"), ("case-upper", "HELLO WORLD"),
    ("case-mixed", "McDonald's iPhone eBay"), ("greek", "ΟΔΥΣΣΕΥΣ σας Ελληνικά"),
    ("cyrillic", "Привет, мир! ЁЖИК"), ("fullwidth", "ＡＢＣ １２３ ｆｕｌｌ"),
    # CJK and other scripts
    ("cjk-chinese", "中文字符"), ("cjk-japanese", "日本語のテキスト、ひらがな。"),
    ("cjk-korean", "한국어 텍스트"), ("cjk-mixed", "BERT模型很好用"),
    ("cjk-compat", "\uf900\uf901 \ufa0e"), ("cjk-ext-b", "\U00020000\U0002a6df\U0002b740"),
    ("cjk-radicals", "⺀ ⼀ ㄅ"), ("cjk-punct", "「引用」『二重』【括弧】〜"),
    ("hangul-jamo", "\u1100\u1161\u11a8 ᄀ"), ("mixed-scripts", "Hello мир 世界 عالم שלום नमस्ते"),
    ("arabic-harakat", "مَرْحَبًا بِكُمْ"), ("hebrew-niqqud", "שָׁלוֹם"),
    ("thai", "ภาษาไทยไม่มีช่องว่าง"), ("devanagari", "हिन्दी क्\u200dष"),
    ("tamil", "தமிழ்"), ("runes", "ᚠᛇᚻ᛫ᛒᛦᚦ"), ("math-fraktur", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝐁𝐨𝐥𝐝"),
    # punctuation
    ("punct-ascii", "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"),
    ("punct-words", "a!b\"c#d$e%f&g'h(i)j*k+l,m-n.o/p:q;r<s=t>u?v@w[x\\y]z^_`{|}~end"),
    ("punct-quotes", "“double” ‘single’ «guillemets» ‹angle› „low“"),
    ("punct-dashes", "em—dash en–dash ‐hyphen ‒figure ―bar −minus"),
    ("punct-inverted", "¿Verdad? ¡Hola!"), ("punct-ellipsis", "Wait… what…?!"),
    ("punct-misc", "§1 ¶2 †‡ • · ‼ ⁇ ‽ ※ ⸮ ⁂"),
    ("symbols", "€5 £3 ¥9 ©2011 ®™ 30° ±2 2×3 6÷2 ∞ √2 ≠ ≤"),
    ("apostrophes", "don't it’s rock 'n' roll"), ("special-strings", "[CLS] [SEP] [MASK] [UNK] [PAD] [unused0]"),
    # emoji
    ("emoji", "I loved it 😀😂👍 !!!"), ("emoji-skin", "👍🏽 👋🏿"),
    ("emoji-zwj", "👨\u200d👩\u200d👧 family"), ("emoji-flags", "🇺🇸 🇫🇷"),
    ("emoji-keycap", "1\ufe0f\u20e3 #\ufe0f\u20e3"), ("emoji-vs", "☺\ufe0f ❤\ufe0f ♥"),
    # long and unknown words
    ("long-100", "a" * 100), ("long-101", "a" * 101), ("long-101-accent", "é" * 101),
    ("long-combining-200", "e\u0301" * 100), ("long-mixed", "x" * 150 + " ok " + "y" * 99 + "z"),
    ("long-punct-breaks", ("ab" * 60 + ".") * 2),
    ("long-real", "supercalifragilisticexpialidocious antidisestablishmentarianism "
                  "pneumonoultramicroscopicsilicovolcanoconiosis"),
    ("unknown-words", "xyzzyq qapla' zxqvj ᚠᛇ ⟁⟁"), ("unaffable", "unaffable unbelievable"),
    # whitespace
    ("ws-ascii", "a\tb\nc\rd\r\ne  f"), ("ws-nbsp", "a\u00a0b\u00a0 c"),
    ("ws-ideographic", "a\u3000b　c"), ("ws-separators", "a\u2028b\u2029c"),
    ("ws-unicode", "a\u1680b\u2000c\u2003d\u2009e\u200af\u202fg\u205fh"),
    ("ws-vt-ff", "a\x0bb\x0cc"), ("ws-edges", "   padded   text   "),
    ("ws-only", " \t\r\n\u00a0\u3000 "), ("empty", ""),
    # controls and zero-width
    ("ctrl-ascii", "a\x01b\x07c\x1b[31md\x7fe"), ("ctrl-c1", "a\x80b\x85c\x9fd"),
    ("ctrl-info-sep", "a\x1cb\x1dc\x1ed\x1fe"), ("ctrl-nul", "a\x00b \x00 c"),
    ("zero-width", "zero\u200bwidth\u200cjoin\u200dnon\u2060word"), ("bom", "\ufeffhello"),
    ("soft-hyphen", "co\u00adoperate"), ("bidi", "abc\u202edef\u202c \u200eg\u200fh"),
    ("tags", "flag\U000e0067\U000e0062tag"), ("replacement-char", "a\ufffdb \ufffd c"),
    ("private-use", "a\ue000b \U000f0000 c"), ("nonchars", "a\ufffeb\uffffc\U0010ffffd\ufdd0e"),
    ("unassigned", "a\u0378b \U000e0080 c"), ("variation-sel", "a\ufe0fb\U000e0100c"),
    # combining sequences
    ("comb-stacked", "a\u0301\u0302\u0303b \u0316\u0301x"), ("comb-alone", "x \u0301 y \u20dd z"),
    ("comb-after-punct", ".\u0301 !\u0308"), ("comb-enclosing", "a\u20ddb \u20e0"),
    ("comb-spacing", "\u0915\u093e \u0915\u094d\u0937"), ("comb-reorder", "x\U0001d16d\U0001d165y \U0001d165\U0001d16d\u0301\U0001d166z"),
    ("comb-viramas", "\u1b05\u1b44\u1b44 \ua9c0\ua9c0"), ("comb-cgj", "a\u0301\u034f\u0302b"),
    ("comb-hangul-decomposed", "\u1112\u1161\u11ab\u1100\u116e\u11a8"),
    # numbers, urls, html
    ("numbers", "3.14159 1,000,000 2nd 10% $5.99 -42 1e10"), ("numbers-unicode", "١٢٣ ½ ² ⅷ ①"),
    ("url", "https://www.imdb.com/title/tt0111161/?ref_=nv_sr_1#top"),
    ("email", "mail me at user.name+tag@example.co.uk"),
    ("html-br", "Great movie.<br /><br />Would watch again."),
    ("html-entities", "Tom &amp; Jerry &lt;3 &quot;quoted&quot; &#39;"),
    ("html-tags", "<i>italic</i> <a href=\"x.html\">link</a>"),
    ("imdb-style", "This movie was 10/10!!! SO GOOD... (spoilers) -- a \"must-see\"."),
]

BYTES = [
    ("lone-cont", b"\x80"), ("lone-cont-mid", b"a\x80b"), ("lone-cont-run", b"x\x80\x81\x82\xbfy"),
    ("trunc-2", b"\xc3"), ("trunc-2-word", b"caf\xc3 ok"), ("trunc-3", b"\xe2\x82x"),
    ("trunc-4", b"\xf0\x9f\x98!"), ("trunc-then-valid", b"\xe4\xb8\xe4\xb8\xad"),
    ("trunc-end", b"abc\xe2\x82"), ("overlong-slash", b"a\xc0\xafb"), ("overlong-c1", b"\xc1\xbf"),
    ("overlong-3", b"\xe0\x80\xaf"), ("overlong-4", b"\xf0\x80\x80\xaf"), ("overlong-nul", b"a\xc0\x80b"),
    ("surrogate-high", b"a\xed\xa0\x80b"), ("surrogate-low", b"\xed\xbf\xbf"),
    ("surrogate-pair-cesu", b"x\xed\xa0\xbd\xed\xb8\x80y"), ("above-max", b"\xf4\x90\x80\x80z"),
    ("lead-f5", b"\xf5\x80\x80\x80"), ("byte-fe", b"a\xfeb"), ("byte-ff", b"a\xffb"),
    ("bom-utf16", b"\xfe\xffhi"), ("five-byte", b"\xf8\x88\x80\x80\x80!"),
    ("six-byte", b"\xfc\x84\x80\x80\x80\x80?"), ("bad-cont-paren", b"\xc3\x28"),
    ("bad-cont-3", b"\xe2\x28\xa1"), ("bad-cont-4", b"\xf0\x28\x8c\xbc"), ("in-word", b"h\xc3llo w\xf6rld"),
    ("latin1-text", "Café naïve Ångström".encode("latin-1")), ("nul-bytes", b"a\x00b\x00\x00 c"),
    ("all-high-bytes", bytes(range(0x80, 0x100))), ("encoded-fffd", b"a\xef\xbf\xbdb"),
    ("valid-mixed", "ok 中文 😀".encode() + b"\xff" + "é".encode()),
]


def imdb_cases(imdb, rng, count=200, nonascii=60):
    files = []
    for split in ("train", "test"):
        for label in ("neg", "pos"):
            d = os.path.join(imdb, split, label)
            files += [os.path.join(split, label, f) for f in sorted(os.listdir(d))]
    rng.shuffle(files)
    picked, with_unicode = [], []
    for f in files:
        if len(picked) >= count - nonascii and len(with_unicode) >= nonascii:
            break
        text = open(os.path.join(imdb, f), encoding="utf-8").read()
        if any(ord(c) > 127 for c in text):
            if len(with_unicode) < nonascii:
                with_unicode.append((f, text))
        elif len(picked) < count - nonascii:
            picked.append((f, text))
    out = []
    for i, (f, text) in enumerate(picked + with_unicode):
        if i < 5:  # a few whole reviews
            start, end = 0, len(text)
        else:
            start = 0
            if len(text) > 240:
                nonascii_at = next((k for k, c in enumerate(text) if ord(c) > 127), None)
                if nonascii_at is not None and nonascii_at > 120:
                    start = text.rfind(" ", 0, nonascii_at - 100) + 1
                elif nonascii_at is None:
                    start = text.rfind(" ", 0, rng.randrange(0, len(text) - 200)) + 1
            end = min(len(text), start + 240)
        out.append((f"imdb:{f}[{start}:{end}]", text[start:end]))
    return out


def unicode_sweep():
    cps = list(range(0x80, 0x500)) + list(range(0x2000, 0x2070)) + list(range(0x3000, 0x3040))
    cps += list(range(0xFF00, 0xFF66)) + list(range(0x500, 0x110000, 499))
    cps = sorted(c for c in set(cps) if not 0xD800 <= c <= 0xDFFF)
    for i in range(0, len(cps), 32):
        chunk = cps[i:i + 32]
        yield f"U+{chunk[0]:04X}..U+{chunk[-1]:04X}", " ".join(f"a{chr(c)}B" for c in chunk)


def check_cli(cli):
    """Compare cformer-tokenize with the reference on every code point (but
    U+000A, which ends a line there, and the surrogates) as "x<c>y <c>Q"."""
    import subprocess
    texts = [f"x{chr(c)}y {chr(c)}Q" for c in range(0x110000)
             if c != 10 and not 0xD800 <= c <= 0xDFFF]
    got = subprocess.run([cli, "--vocab", VOCAB], input="\n".join(texts).encode() + b"\n",
                         capture_output=True, check=True).stdout.decode().split("\n")
    bad = 0
    for text, line in zip(texts, got):
        want = " ".join(map(str, slow.convert_tokens_to_ids(ref_tokens(text))))
        if line != want:
            bad += 1
            if bad <= 20:
                print(f"U+{ord(text[1]):04X}: got [{line}], want [{want}]", file=sys.stderr)
    print(f"{len(texts)} code points, {bad} differ", file=sys.stderr)
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--imdb", help="the aclImdb folder (writes the fixtures)")
    ap.add_argument("--check-cli", metavar="CFORMER_TOKENIZE",
                    help="instead, compare this cformer-tokenize with the reference on "
                         "every code point (about a minute)")
    args = ap.parse_args()
    if args.check_cli:
        return check_cli(args.check_cli)
    if not args.imdb:
        ap.error("--imdb is required")
    rng = random.Random(20240601)
    print(f"Python {sys.version.split()[0]}, unicodedata {unicodedata.unidata_version}",
          file=sys.stderr)

    with open(os.path.join(HERE, "cases.tsv"), "w", encoding="utf-8", newline="\n") as f:
        for name, text in HAND + imdb_cases(args.imdb, rng):
            ids, toks = expected(name, text)
            f.write(row(name, esc(text), ids, toks))
    with open(os.path.join(HERE, "bytes.tsv"), "w", encoding="utf-8", newline="\n") as f:
        rand = [(f"random-{k}", bytes(rng.randrange(256) for _ in range(48))) for k in range(6)]
        for name, data in BYTES + rand:
            ids, toks = expected(name, data.decode("utf-8", errors="replace"))
            f.write(row(name, data.hex(), ids, toks))
    with open(os.path.join(HERE, "unicode.tsv"), "w", encoding="utf-8", newline="\n") as f:
        for name, text in unicode_sweep():
            ids, _ = expected(name, text)
            f.write(row(name, esc(text), ids))
    print(f"disagreements: slow BertTokenizer {mismatch['slow']}, BertTokenizerFast "
          f"{mismatch['fast']} (and {mismatch['fast_cn']} only on unassigned code points)",
          file=sys.stderr)
    return 1 if mismatch["slow"] else 0


if __name__ == "__main__":
    sys.exit(main())
