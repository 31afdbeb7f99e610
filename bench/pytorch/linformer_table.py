#!/usr/bin/env python3
"""linformer_table.py: the PyTorch side of bench/linformer_table (the
Linformer paper's inference table): a full encoder forward pass without
gradients (torch.inference_mode), Transformer vs Linformer with layerwise
sharing (one E = F [k, n] for every layer, head, keys and values), for each n
and k, at batch 1 or the largest batch within --budget-gib. Prints a markdown
table and writes the CSV impl,model,n,k,batch,seconds_per_seq,peak_bytes,status,
variant,note (impl = pytorch; variant "fast f32", "fast bf16", "fast f32
compiled" or "twin f32" as --impl, --precision and --compile choose, see
train_throughput.py; status "failed" with the reason in note where a run
failed, torch.compile say). Every configuration runs in a fresh process; memory is the
resident-set high-water mark growth (see benchlib.py for the method and its
caveats). Run with --help for the flags.
"""

import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as B  # noqa: E402

HEADER = ["impl", "model", "n", "k", "batch", "seconds_per_seq", "peak_bytes", "status", "variant", "note"]
MODELS = ("transformer", "linformer")
GIB = 1 << 30


def parse_flags(argv):
    p = B.Parser(prog="linformer_table.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=B.int_list, default=[512, 1024, 2048, 4096, 8192, 16384, 32768, 65536],
                   metavar="N1,N2,..", help="sequence lengths (default 512..65536, powers of two)")
    p.add_argument("--k", type=B.int_list, default=[128, 256], metavar="K1,K2,..",
                   help="Linformer projected lengths (default 128,256; k > n is left out)")
    p.add_argument("--models", type=B.name_list(MODELS), default=list(MODELS), metavar="M1,M2",
                   help="transformer,linformer (default both)")
    p.add_argument("--batch", choices=["1", "max"], default="1",
                   help="1, or max: the largest batch within --budget-gib (default 1)")
    p.add_argument("--budget-gib", type=B.positive(float), default=16.0, metavar="G",
                   help="memory budget in GiB (default 16, the paper's V100)")
    B.add_model_flags(p)
    p.add_argument("--reps", type=B.positive(int), default=3, metavar="R",
                   help="timed forward passes after one warm-up; the best is reported (default 3)")
    p.add_argument("--max-seconds", type=B.positive(float), default=60.0, metavar="S",
                   help="once a configuration's forward pass takes longer than S seconds, larger n "
                        "of that model and k are skipped (default 60)")
    return B.parse_model_flags(p, argv)


# ---- child: one configuration -------------------------------------------------------------


def child(c):
    """Builds the encoder, runs the forward passes, returns times and peak."""
    torch = B.child_torch(c["threads"])
    import models as M

    def build(n, k):
        impl = c["attention"] if c["attention"] != "auto" else "math"  # the twin's Config knows no auto
        cfg = M.preset(c["model"], c["vocab"], n, layers=c["layers"], k=k, dim=c["dim"], heads=c["heads"],
                       ff_hidden=c["ff"], sharing="layerwise", dropout=0.0, attn_dropout=0.0,
                       attention_impl=impl)
        return cfg, B.build_model(c, M, cfg, False).eval()

    def forward(model, ids):
        with torch.inference_mode(), B.autocast(torch, c["precision"]):
            return model(ids)

    # page in the kernels and thread pools with a tiny model of the same kind
    n0 = min(c["n"], 64)
    _, tiny = build(n0, min(c["k"] or n0, n0))
    forward(tiny, torch.randint(1, c["vocab"], (1, n0)))
    del tiny
    base = B.rss_bytes()
    reset_ok = B.reset_hwm()

    cfg, model = build(c["n"], c["k"] or min(128, c["n"]))
    run = torch.compile(model) if c["compile"] else model
    ids = torch.randint(1, c["vocab"], (c["batch"], c["n"]))
    times = []
    for r in range(c["reps"] + 1):  # the first is the warm-up
        t0 = time.perf_counter()
        try:
            out = forward(run, ids)
        except Exception as e:  # noqa: BLE001 -- compilation fails in the first pass
            if not c["compile"]:
                raise
            return {"error": "torch.compile: " + B.short_error(e)}
        times.append(time.perf_counter() - t0)
        del out
        if r == 0 and c["compile"]:  # leave the compilation's transient peak out (what it keeps stays in)
            B.reset_hwm()
    return {"times": times[1:], "warmup": times[0], "peak": B.hwm_bytes() - base, "reset_hwm": reset_ok,
            "params": M.count_params(model), "formula": M.formula_params(cfg, False),
            "torch": torch.__version__, "threads": torch.get_num_threads()}


# ---- parent -------------------------------------------------------------------------------


def estimate(a, model, n, k, batch):
    """A rough upper estimate of the forward's peak bytes (f32), from the
    dominant terms: the parameters, the attention scores and probabilities
    of one layer (all heads at once with --attention math), the feed-forward
    hidden, a few [B, n, dim] activations."""
    params = a.vocab * a.dim + n * a.dim + a.layers * (4 * a.dim * a.dim + 2 * a.dim * a.ff)
    params += k * n if model == "linformer" else 0
    slots = k if model == "linformer" else n
    scores = 2 * a.heads * n * slots if a.attention == "math" else 0
    act = scores + 2 * n * a.ff + 10 * n * a.dim
    return 4 * (params + batch * act)


def measure(a, model, n, k, batch, reps):
    params = {"model": model, "n": n, "k": k, "batch": batch, "reps": reps, "threads": a.threads,
              "vocab": a.vocab, "dim": a.dim, "heads": a.heads, "layers": a.layers, "ff": a.ff,
              "attention": a.attention, "impl": a.impl, "precision": a.precision, "compile": a.compile}
    timeout = max(600.0, 20 * a.max_seconds * (reps + 1))
    return B.run_child(os.path.abspath(__file__), params, a.threads, timeout)


def guard(a, est):
    """None if a run of estimated peak est may start, else why not."""
    if est > a.budget_gib * GIB:
        return "over_budget"
    if est > 0.8 * B.mem_available():
        return "not_run"
    return None


def max_batch_run(a, model, n, k, note):
    """--batch max: peaks at batch 1 and 2, extrapolated linearly to the
    largest batch within the budget, which is then run if it fits."""
    p = [None, None]
    for b in (1, 2):
        r = measure(a, model, n, k, b, 1)
        if "error" in r:
            note.append(f"{model} n {n}: batch {b}: {r['error']}")
            return 1, r
        p[b - 1] = r["peak"]
    per_seq = max(p[1] - p[0], 1)
    base = p[0] - per_seq
    bmax = int((a.budget_gib * GIB - base) // per_seq)
    if bmax < 1:
        return 1, {"status": "over_budget"}
    est = base + bmax * per_seq
    if est > 0.8 * B.mem_available():
        note.append(f"{model} n {n}: batch {bmax} needs ~{est / GIB:.2f} GiB, more than 80% of the free memory")
        return bmax, {"status": "not_run"}
    return bmax, measure(a, model, n, k, bmax, a.reps)


def run_config(a, model, n, k, note):
    """One row: [impl, model, n, k, batch, seconds_per_seq, peak_bytes, status]."""
    batch = 1
    why = guard(a, estimate(a, model, n, k, 1))
    if why:
        note.append(f"{model} n {n}: batch 1 estimated at {estimate(a, model, n, k, 1) / GIB:.2f} GiB ({why})")
        return ["pytorch", model, n, k, batch, None, None, why], None
    if a.batch == "max":
        batch, r = max_batch_run(a, model, n, k, note)
    else:
        r = measure(a, model, n, k, 1, a.reps)
    if "status" in r:
        return ["pytorch", model, n, k, batch, None, None, r["status"]], None
    if "error" in r:
        note.append(f"{model} n {n} ({B.variant(a)}): FAILED: {r['error']}")
        return ["pytorch", model, n, k, batch, None, None, "failed", B.variant(a), B.csv_text(r["error"])], None
    sps = min(r["times"]) / batch
    return ["pytorch", model, n, k, batch, f"{sps:.6g}", r["peak"], "ok"], r


def table_rows(rows):
    """Markdown rows with the Transformer/Linformer ratios of time and memory."""
    ref = {r[2]: r for r in rows if r[1] == "transformer" and r[7] == "ok"}
    out = []
    for r in rows:
        t = ref.get(r[2])
        ratio_t = ratio_m = ""
        if r[1] == "linformer" and r[7] == "ok" and t:
            ratio_t = f"{float(t[5]) / float(r[5]):.2f}"
            ratio_m = f"{t[6] / r[6]:.2f}"
        sps = f"{float(r[5]) * 1e3:.3f}" if r[5] else "-"
        mib = f"{r[6] / (1 << 20):.1f}" if r[6] is not None else "-"
        out.append([r[1], r[2], r[3] or "-", r[4], sps, mib, r[7], ratio_t, ratio_m])
    return out


def main(argv):
    a = parse_flags(argv)
    rows, note, info = [], [], None
    for model in a.models:
        for k in ([None] if model == "transformer" else a.k):
            slow = False
            for n in a.n:
                if k and k > n:
                    continue
                if slow:
                    rows.append(["pytorch", model, n, k, 1, None, None, "skipped_time", B.variant(a), ""])
                    continue
                row, r = run_config(a, model, n, k, note)
                if len(row) == 8:  # a failed row already names its variant and why
                    row += [B.variant(a), ""]
                rows.append(row)
                print(",".join("" if v is None else str(v) for v in row), file=sys.stderr, flush=True)
                if r:
                    info = info or r
                    same = "= the formula" if r["params"] == r["formula"] else f"!= the formula {r['formula']}"
                    note.append(f"{model} n {n} k {k or '-'}: {r['params']} parameters ({same})")
                    slow = max(r["times"]) > a.max_seconds
    if info:
        print(f"torch {info['torch']}, {info['threads']} threads (OpenMP wait policy {B.wait_policy()}), "
              f"PyTorch {B.variant(a)} (attention {a.attention}); "
              f"dim {a.dim}, heads {a.heads}, layers {a.layers}, ff {a.ff}, vocab {a.vocab}; "
              f"Linformer: layerwise sharing; peak = RSS high-water mark growth"
              f"{'' if info['reset_hwm'] else ' (VmHWM could not be reset: includes the warm-up)'}")
    print()
    print(B.markdown(["model", "n", "k", "batch", "ms/seq", "peak MiB", "status", "T/L time", "T/L mem"],
                     table_rows(rows)))
    for line in note:
        print(f"note: {line}")
    if a.csv:
        B.write_csv(a.csv, HEADER, rows)
    return 0


if __name__ == "__main__":
    c = B.child_params()
    if c is not None:
        import json

        print(json.dumps(child(c)))
    else:
        sys.exit(main(sys.argv[1:]))
