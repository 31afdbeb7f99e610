#!/usr/bin/env python3
"""train_throughput.py: the PyTorch side of bench/train_throughput: training
tokens/s (forward, cross-entropy, backward, AdamW step; steady state after
warm-up steps) and peak memory of the IMDB classifier (vocab 30522, dim 256,
4 heads, 4 layers, ff 1024, batch 16; Transformer, Linformer and
Conv-Linformer with headwise sharing, k = 128; dropout 0), with the model FLOPs
per token, the achieved GFLOP/s and their fraction of this process's measured
sgemm rate (MFU). Prints a markdown table and writes the CSV
impl,model,n,k,batch,tokens_per_s,step_seconds,peak_bytes,flops_per_token,gflops,sgemm_gflops,mfu,
variant,torch_impl,precision,compiled,attention,optimizer,status
(impl = pytorch; the first twelve columns are bench/train_throughput's; variant
names the PyTorch row, "fast f32", "fast bf16", "fast f32 compiled" or "twin
f32"; status "ok" or "failed: why", a failed row has no figures). Every
configuration runs in a fresh process; memory is the resident-set high-water
mark growth over model creation and every step (see benchlib.py).

--impl fast (default) runs fast_models.py, the twin's function written for
speed, with torch.optim.AdamW(fused=True) (foreach where this torch has no
fused CPU AdamW); --impl twin runs models.py with PyTorch's default AdamW, as
this script did before. --precision bf16 puts the forward and the loss under
torch.autocast("cpu", dtype=torch.bfloat16) (f32 weights, gradients and
AdamW); its MFU is against the rate of a bf16 S^3 matmul (the sgemm_gflops
column then holds that rate). --compile wraps the model
in torch.compile; compilation runs in the warm-up steps (their time is in the
notes) and its memory is part of the resident peak. FLOPs per token are those
the chosen implementation executes: the fast model's are cformer's
(sequence-first Linformer, folded conv), the twin's the paper's order. Run
with --help for the flags.
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as B  # noqa: E402

HEADER = ["impl", "model", "n", "k", "batch", "tokens_per_s", "step_seconds", "peak_bytes",
          "flops_per_token", "gflops", "sgemm_gflops", "mfu", "variant", "torch_impl", "precision",
          "compiled", "attention", "optimizer", "status"]
MODELS = ("transformer", "linformer", "conv-linformer")
GIB = 1 << 30


def parse_flags(argv):
    p = B.Parser(prog="train_throughput.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=B.int_list, default=[128, 512, 2048], metavar="N1,N2,..",
                   help="sequence lengths (default 128,512,2048)")
    p.add_argument("--k", type=B.int_list, default=[128], metavar="K1,K2,..",
                   help="projected lengths of the Linformer models (default 128; k > n is left out)")
    p.add_argument("--models", type=B.name_list(MODELS), default=list(MODELS), metavar="M1,M2,..",
                   help="transformer,linformer,conv-linformer (default all)")
    p.add_argument("--batch", type=B.positive(int), default=16, metavar="B", help="batch (default 16)")
    B.add_model_flags(p)
    p.add_argument("--warmup", type=B.positive(int), default=2, metavar="W",
                   help="training steps before timing (default 2)")
    p.add_argument("--reps", type=B.positive(int), default=5, metavar="R", help="timed training steps (default 5)")
    p.add_argument("--sgemm", type=B.positive(int), default=2048, metavar="S",
                   help="the S^3 matmul timed for the sgemm rate (default 2048)")
    return B.parse_model_flags(p, argv)


# ---- children -----------------------------------------------------------------------------


def child_sgemm(c):
    """GFLOP/s of an S^3 matmul, best of 5 after a warm-up: f32, or bf16 inputs and output
    (what autocast's GEMMs run) for --precision bf16."""
    torch = B.child_torch(c["threads"])
    s = c["size"]
    dt = torch.bfloat16 if c.get("precision") == "bf16" else torch.float32
    x, y = torch.randn(s, s, dtype=dt), torch.randn(s, s, dtype=dt)
    out = torch.empty(s, s, dtype=dt)
    best = float("inf")
    for _ in range(6):
        t0 = time.perf_counter()
        torch.matmul(x, y, out=out)
        best = min(best, time.perf_counter() - t0)
    return {"gflops": 2 * s**3 / best / 1e9, "torch": torch.__version__, "threads": torch.get_num_threads()}


def make_adamw(torch, groups, want_fused=True):
    """torch.optim.AdamW with fused=True where this torch has it on the CPU, else
    foreach=True; -> (optimizer, "fused" | "foreach")."""
    kw = dict(lr=1e-4, betas=(0.9, 0.999), eps=1e-8)
    if want_fused:
        try:
            return torch.optim.AdamW(groups, fused=True, **kw), "fused"
        except (RuntimeError, TypeError, ValueError):
            pass
    return torch.optim.AdamW(groups, foreach=True, **kw), "foreach"


def child_train(c):
    """Builds the classifier and AdamW, runs warm-up and timed steps."""
    torch = B.child_torch(c["threads"])
    import models as M

    fast = c["impl"] == "fast"

    def build(n, k):
        impl = c["attention"] if c["attention"] != "auto" else "math"  # the twin's Config knows no auto
        cfg = M.preset(c["model"], c["vocab"], n, layers=c["layers"], k=k, dim=c["dim"], heads=c["heads"],
                       ff_hidden=c["ff"], head_hidden=c["dim"], dropout=0.0, attn_dropout=0.0,
                       attention_impl=impl)
        model = B.build_model(c, M, cfg, True).train()
        named = list(model.named_parameters())
        groups = [{"params": [p for nm, p in named if not M.no_decay(nm, p)], "weight_decay": 0.01},
                  {"params": [p for nm, p in named if M.no_decay(nm, p)], "weight_decay": 0.0}]
        # the twin keeps PyTorch's default AdamW (foreach on the CPU), as it always ran
        opt, kind = make_adamw(torch, groups, fast) if fast else (torch.optim.AdamW(
            groups, lr=1e-4, betas=(0.9, 0.999), eps=1e-8), "default")
        return cfg, model, opt, kind

    def step(model, opt, ids, labels):
        opt.zero_grad(set_to_none=True)
        with B.autocast(torch, c["precision"]):
            loss = torch.nn.functional.cross_entropy(model(ids), labels)
        loss.backward()
        opt.step()

    def batch(n, b):
        return torch.randint(1, c["vocab"], (b, n)), torch.randint(0, 2, (b,))

    # page in the kernels (forward, backward, AdamW) with a tiny model of the same kind, eager
    n0 = min(c["n"], 64)
    _, tiny, topt, _ = build(n0, min(c["k"], n0))
    step(tiny, topt, *batch(n0, 2))
    del tiny, topt
    base = B.rss_bytes()
    reset_ok = B.reset_hwm()

    cfg, model, opt, opt_kind = build(c["n"], c["k"])
    run = torch.compile(model) if c["compile"] else model
    ids, labels = batch(c["n"], c["batch"])
    t0 = time.perf_counter()
    try:
        for _ in range(c["warmup"]):
            step(run, opt, ids, labels)
    except Exception as e:  # noqa: BLE001 -- compilation fails in the first step
        if not c["compile"]:
            raise
        return {"error": "torch.compile: " + B.short_error(e)}
    warmup_s = time.perf_counter() - t0
    if c["compile"]:  # leave the compilation's transient peak out (what it keeps stays in)
        B.reset_hwm()
    times = []
    for _ in range(c["reps"]):
        t0 = time.perf_counter()
        step(run, opt, ids, labels)
        times.append(time.perf_counter() - t0)
    return {"times": times, "warmup_s": warmup_s, "peak": B.hwm_bytes() - base, "reset_hwm": reset_ok,
            "params": M.count_params(model), "formula": M.formula_params(cfg, True),
            "flops_per_token": 3 * B.flops(c, M, cfg, True) / c["n"], "optimizer": opt_kind}


# ---- parent -------------------------------------------------------------------------------


def estimate(a, model, n, k):
    """A rough upper estimate of the training peak (f32): parameters x 4
    (weights, gradients, AdamW's two moments) and the activations autograd
    saves, ~(16 dim + 3 ff) per token and layer plus 3 scores per head
    (n or k slots) with --attention math."""
    params = a.vocab * a.dim + n * a.dim + a.layers * (4 * a.dim * a.dim + 2 * a.dim * a.ff + 2 * k * n)
    slots = n if model == "transformer" else k
    scores = 3 * a.heads * n * slots if a.attention == "math" else 0
    act = a.batch * a.layers * (16 * n * a.dim + 3 * n * a.ff + scores)
    return 4 * (4 * params + act)


def run_config(a, model, n, k, sgemm, note):
    """One CSV row; a configuration that failed (torch.compile, say) gets a row with status
    "failed: why" and no figures; None when it was not run."""
    est = estimate(a, model, n, k or min(128, n))
    if est > 0.8 * B.mem_available():
        note.append(f"{model} n {n}: estimated at {est / GIB:.2f} GiB, more than 80% of the free memory: not run")
        return None
    params = {"model": model, "n": n, "k": k or min(128, n), "batch": a.batch, "threads": a.threads,
              "vocab": a.vocab, "dim": a.dim, "heads": a.heads, "layers": a.layers, "ff": a.ff,
              "attention": a.attention, "warmup": a.warmup, "reps": a.reps, "kind": "train",
              "impl": a.impl, "precision": a.precision, "compile": a.compile}
    r = B.run_child(os.path.abspath(__file__), params, a.threads, 3600)
    extra = [B.variant(a), a.impl, a.precision, int(a.compile), a.attention]
    if "error" in r:
        note.append(f"{model} n {n} ({B.variant(a)}): FAILED: {r['error']}")
        return ["pytorch", model, n, k, a.batch] + [None] * 7 + extra + ["", B.csv_text("failed: " + r["error"])]
    same = "= the formula" if r["params"] == r["formula"] else f"!= the formula {r['formula']}"
    note.append(f"{model} n {n} k {k or '-'}: {r['params']} parameters ({same}); AdamW {r['optimizer']}; "
                f"warm-up {r['warmup_s']:.1f} s")
    step_s = sum(r["times"]) / len(r["times"])
    tps = a.batch * n / step_s
    gflops = r["flops_per_token"] * tps / 1e9
    return ["pytorch", model, n, k, a.batch, f"{tps:.1f}", f"{step_s:.6g}", r["peak"],
            f"{r['flops_per_token']:.6g}", f"{gflops:.2f}", f"{sgemm:.2f}", f"{gflops / sgemm:.4f}"] + extra + \
        [r["optimizer"], "ok"]


def main(argv):
    a = parse_flags(argv)
    s = B.run_child(os.path.abspath(__file__), {"kind": "sgemm", "size": a.sgemm, "threads": a.threads,
                                                 "precision": a.precision}, a.threads, 600)
    if "error" in s:
        print(f"train_throughput.py: the sgemm measurement failed: {s['error']}", file=sys.stderr)
        return 1
    rows, note = [], []
    for model in a.models:
        for k in ([None] if model == "transformer" else a.k):
            for n in a.n:
                if k and k > n:
                    continue
                if model == "conv-linformer" and k and n % k:
                    note.append(f"conv-linformer n {n}: k {k} does not divide n: left out")
                    continue
                row = run_config(a, model, n, k, s["gflops"], note)
                if row:
                    rows.append(row)
                    print(",".join("" if v is None else str(v) for v in row), file=sys.stderr, flush=True)
    print(f"torch {s['torch']}, {s['threads']} threads (OpenMP wait policy {B.wait_policy()}), "
          f"PyTorch {B.variant(a)} (attention {a.attention}); {'bf16 GEMM' if a.precision == 'bf16' else 'sgemm'} {a.sgemm}^3: "
          f"{s['gflops']:.1f} GFLOP/s; dim {a.dim}, heads {a.heads}, layers {a.layers}, ff {a.ff}, "
          f"vocab {a.vocab}, batch {a.batch}; AdamW, dropout 0; peak = RSS high-water mark growth")
    print()
    md = [[r[12], r[1], r[2], r[3] or "-", r[4], f"{float(r[5]):.0f}", f"{float(r[6]) * 1e3:.1f}",
           f"{r[7] / (1 << 20):.1f}", f"{float(r[8]) / 1e6:.2f}", r[9], f"{100 * float(r[11]):.1f}%"]
          if r[18] == "ok" else [r[12], r[1], r[2], r[3] or "-", r[4], "failed", "-", "-", "-", "-", "-"]
          for r in rows]
    print(B.markdown(["PyTorch", "model", "n", "k", "batch", "tokens/s", "ms/step", "peak MiB", "MFLOP/token",
                      "GFLOP/s", "MFU"], md))
    for line in note:
        print(f"note: {line}")
    if a.csv:
        B.write_csv(a.csv, HEADER, rows)
    return 0


if __name__ == "__main__":
    c = B.child_params()
    if c is not None:
        import json

        print(json.dumps(child_sgemm(c) if c["kind"] == "sgemm" else child_train(c)))
    else:
        sys.exit(main(sys.argv[1:]))
