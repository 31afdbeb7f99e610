"""Check docs/pytorch.md against cformer: run the page's Python and compare.

The Python blocks of docs/pytorch.md are one program; this script compiles each
block, runs them in order in one namespace, then uses what they define:

- models: dump_logits (a cformer build's check program) saves small models of
  every option (attention kinds, sharing modes, norms, activations, positions,
  poolings, the MLM head, ...) with their logits and hidden states for four rows
  (no padding, some, one real token, none); load_model must load each checkpoint
  and give the same logits and hidden states;
- text: model_input over byte_ids must give cformer-tokenize --byte --n N
  --keep-tail K's ids, and cformer's WordPiece the ids the page gives for
  "<br />" (wordpiece_ids too, where the transformers package is installed);
- AdamW: dump_adamw saves a classifier after a few steps (weights, AdamW state)
  and the next step (its gradients, the weights after it); AdamW set up by
  adamw_from_checkpoint must make that step from those gradients, with the
  learning rate cformer_lr gives, and continue_training must make it from the
  batch itself.

Run from a cformer build directory after `make check` built its check programs
(tests/test_pytorch_doc.sh does this):

    ~/venv-torch/bin/python ../bench/pytorch/check_doc.py --build . \\
        --doc ../docs/pytorch.md

Exit status 0 when everything agrees, 1 otherwise; standard library and torch.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))

# preset, sharing, n, k, T, config fields (FIELD=VALUE, task=mlm): the models compared
MODELS = [
    ("transformer:2", "headwise", 32, 8, 20, []),
    ("linformer:2", "headwise", 32, 8, 32, []),
    ("linformer:2", "none", 32, 8, 20, []),
    ("LC", "kv", 32, 8, 22, []),
    ("LL", "layerwise", 32, 8, 22, []),
    ("CC", "layerwise", 32, 8, 22, ["conv_dense=true"]),
    ("MX", "headwise", 32, 8, 22, []),
    ("RL", "none", 32, 8, 20, []),
    ("RC", "headwise", 32, 8, 32, []),
    ("LC", "headwise", 32, 8, 22, ["shared_kv_head=true"]),
    ("LC", "none", 32, 8, 22, ["shared_kv_head=true", "conv_dense=true"]),
    ("LC", "headwise", 32, 8, 22, ["conv_dense=true"]),
    ("LL", "headwise", 32, 8, 22, ["mask_empty_slots=true"]),
    ("LC", "headwise", 32, 8, 22, ["k_schedule=linear", "k_first=8", "k_last=4"]),
    ("SL", "headwise", 32, 8, 22, ["pre_norm=false"]),
    ("LC", "headwise", 32, 8, 22, ["rms_norm=true", "swiglu=true"]),
    ("SC", "headwise", 32, 8, 22, ["activation=gelu_tanh", "final_norm=false"]),
    ("LS", "headwise", 32, 8, 22, ["activation=relu", "pooling=max"]),
    ("SL", "headwise", 32, 8, 22, ["positions=sinusoidal", "position_kernel=3", "pooling=cls"]),
    ("LC", "headwise", 32, 8, 22, ["positions=none", "position_kernel=5", "pooling=attention"]),
    ("LC", "headwise", 32, 8, 22, ["pad_id=-1", "activation=silu"]),
    ("LC", "headwise", 32, 8, 22, ["task=mlm"]),
    ("SL", "kv", 32, 8, 22, ["task=mlm", "tie_embeddings=false", "rms_norm=true"]),
]


def run_blocks(doc):
    """The page's ```python blocks, compiled one by one and run in order -> namespace."""
    with open(doc) as f:
        text = f.read()
    ns = {"__name__": "pytorch_doc"}
    blocks = list(re.finditer(r"^```python\n(.*?)^```", text, re.S | re.M))
    if not blocks:
        raise SystemExit(f"{doc}: no python blocks")
    for m in blocks:
        line = text.count("\n", 0, m.start()) + 2
        code = compile(m.group(1), f"{doc}:block at line {line}", "exec")
        exec(code, ns)  # noqa: S102 (the page's own code)
    print(f"ok   {len(blocks)} python blocks of {os.path.basename(doc)} compile and run")
    return ns


def tool(build, name):
    for path in (os.path.join(build, name), os.path.join(build, "bench", "pytorch", name)):
        if os.access(path, os.X_OK):
            return path
    raise SystemExit(f"{name} not found in {build} (run make check there first)")


def maxdiff(a, b):
    return (a.double() - b.double()).abs().max().item()


def check_models(ns, build, tmp, tol):
    dump = tool(build, "dump_logits")
    ok = True
    for i, (preset, sharing, n, k, t, fields) in enumerate(MODELS):
        st, js = os.path.join(tmp, f"m{i}.safetensors"), os.path.join(tmp, f"m{i}.json")
        subprocess.run([dump, preset, sharing, str(n), str(k), str(t), st, js] + fields, check=True)
        with open(js) as f:
            ref = json.load(f)
        ids = torch.tensor(ref["ids"]).reshape(ref["shape"])
        mask = torch.tensor(ref["mask"]).reshape(ref["shape"])
        model = ns["load_model"](st)
        with torch.no_grad():
            logits, hidden = model(ids, mask), model.encode(ids, mask)
        want_l = torch.tensor(ref["logits"]).reshape(ref["logits_shape"])
        want_h = torch.tensor(ref["hidden"]).reshape(ref["hidden_shape"])
        # relative to the largest value: a tied MLM decoder's logits reach tens
        dl = maxdiff(logits, want_l) / max(1.0, want_l.abs().max().item())
        dh = maxdiff(hidden, want_h) / max(1.0, want_h.abs().max().item())
        good = logits.shape == want_l.shape and dl <= tol and dh <= tol
        ok &= good
        label = f"{preset} {sharing} n {n} k {k} T {t} {' '.join(fields)}".strip()
        print(f"{'ok  ' if good else 'FAIL'} {label}: logits {tuple(logits.shape)} max|diff| "
              f"{dl:.1e}, hidden {dh:.1e} (relative to max(1, the largest))")
    return ok


def tokenize(build, args):
    out = subprocess.run([tool(build, "cformer-tokenize")] + args, check=True,
                         capture_output=True, text=True).stdout
    return [[int(x) for x in line.split()] for line in out.splitlines()]


def check_text(ns, build, vocab):
    ok = True
    texts = ["", "short", "x" * 30, "0123456789" * 4, "caf\u00e9 <br />na\u00efve"]
    for n, keep in [(8, 0), (8, 3), (8, 6), (8, 100), (40, 5), (48, 0)]:
        want = tokenize(build, ["--byte", "--n", str(n), "--keep-tail", str(keep), "--"] + texts)
        got = [ns["model_input"](ns["byte_ids"](s), n, 2, 3, 0, keep)[0] for s in texts]
        good = got == want
        ok &= good
        print(f"{'ok  ' if good else 'FAIL'} model_input(byte_ids) n {n} keep-tail {keep}")
    want = tokenize(build, ["--vocab", vocab, "--", "<br />", "a<BR/>b"])
    good = want == [[1026, 7987, 1013, 1028], [1037, 1026, 7987, 1013, 1028, 1038]]
    ok &= good
    print(f"{'ok  ' if good else 'FAIL'} WordPiece reads <br /> as < br / > (1026 7987 1013 1028)")
    br = ns["imdb_review_text"]("a<br />b<BR>c<br  />d<br/>e<br / >f")
    good = br == "a b c d e<br / >f"
    ok &= good
    print(f"{'ok  ' if good else 'FAIL'} imdb_review_text")
    try:
        import transformers  # noqa: F401
    except ImportError:
        print("skip wordpiece_ids: no transformers package")
        return ok
    sample = "Great.<br /><br />Caf\u00e9 NA\u00cfVE, it's [MASK] 10/10!"
    good = ns["wordpiece_ids"](sample, vocab) == tokenize(build, ["--vocab", vocab, "--", sample])[0]
    ok &= good
    print(f"{'ok  ' if good else 'FAIL'} wordpiece_ids matches cformer's WordPiece")
    return ok


def check_adamw(ns, build, tmp, decay_all):
    d = os.path.join(tmp, f"adamw{decay_all}")
    os.makedirs(d)
    subprocess.run([tool(build, "dump_adamw"), "3", str(decay_all), d], check=True)
    before, after = os.path.join(d, "before.safetensors"), os.path.join(d, "after.safetensors")
    tensors, meta = ns["read_checkpoint"](before)
    want, want_meta = ns["read_checkpoint"](after)
    grads, _ = ns["read_checkpoint"](os.path.join(d, "grads.safetensors"))
    with open(os.path.join(d, "batch.json")) as f:
        b = json.load(f)
    sc = b["schedule"]
    warmup = ns["warmup_steps"](sc["warmup_ratio"], sc["total"])
    lr_of = lambda s: ns["cformer_lr"](s, sc["base_lr"], sc["total"], warmup, sc["min_lr"], sc["kind"])
    step = int(meta["step"])
    ok = abs(lr_of(step - 1) - float(meta["optimizer_lr"])) <= 1e-15
    print(f"{'ok  ' if ok else 'FAIL'} decay_all {decay_all}: optimizer_lr {meta['optimizer_lr']} "
          f"= cformer_lr(step - 1 = {step - 1}); next lr {lr_of(step)}")

    def compare(label, model, opt, tol):
        named = dict(model.named_parameters())
        dp = max(maxdiff(p.detach(), want[n]) for n, p in named.items())
        moved = max(maxdiff(p.detach(), tensors[n]) for n, p in named.items())
        dm = max(max(maxdiff(opt.state[p]["exp_avg"], want["optimizer.m." + n]),
                     maxdiff(opt.state[p]["exp_avg_sq"], want["optimizer.v." + n]))
                 for n, p in named.items() if p.requires_grad)
        steps = {int(opt.state[p]["step"].item()) for p in named.values() if p.requires_grad}
        good = dp <= tol and dm <= tol and moved > 100 * tol and steps == {int(want_meta["optimizer_step"])}
        print(f"{'ok  ' if good else 'FAIL'} decay_all {decay_all}: {label}: weights max|diff| "
              f"{dp:.1e} (the step moved them by up to {moved:.1e}), moments {dm:.1e}, "
              f"steps {sorted(steps)}")
        return good

    # the step from cformer's own gradients
    model = ns["load_model"](before).train()
    opt = ns["adamw_from_checkpoint"](model, tensors, meta)
    for group in opt.param_groups:
        group["lr"] = lr_of(step)
    for n, p in model.named_parameters():
        p.grad = grads[n].clone() if p.requires_grad else None
    opt.step()
    ok &= compare("AdamW step from cformer's gradients", model, opt, 1e-6)
    # the step from the batch: forward, loss, backward and clipping in PyTorch
    ids = torch.tensor(b["ids"]).reshape(b["shape"])
    mask = torch.tensor(b["mask"]).reshape(b["shape"])
    labels = torch.tensor(b["labels"])
    model, opt = ns["continue_training"](before, [(ids, mask, labels)], sc["base_lr"], sc["total"],
                                         warmup, sc["min_lr"], sc["kind"], b["clip"])
    ok &= compare("continue_training on the batch", model, opt, 1e-5)
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=".", help="cformer build directory (default .)")
    ap.add_argument("--doc", default=os.path.join(HERE, "..", "..", "docs", "pytorch.md"),
                    help="the page (default: the source tree's docs/pytorch.md)")
    ap.add_argument("--vocab", default=os.path.join(HERE, "..", "..", "tests", "data", "tokenizer",
                                                    "bert-base-uncased-vocab.txt"),
                    help="bert-base-uncased's vocab.txt (default: the source tree's test copy)")
    ap.add_argument("--tol", type=float, default=1e-5,
                    help="largest max|diff| of logits and hidden states accepted, relative to "
                         "max(1, the largest value) (default 1e-5)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    ns = run_blocks(a.doc)
    with tempfile.TemporaryDirectory() as tmp:
        ok = check_models(ns, a.build, tmp, a.tol)
        ok &= check_text(ns, a.build, a.vocab)
        ok &= check_adamw(ns, a.build, tmp, 0)
        ok &= check_adamw(ns, a.build, tmp, 1)
    print("all agree" if ok else "FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
