#!/usr/bin/env python3
"""compare.py: joins a cformer CSV and a PyTorch CSV of the same benchmark
(train_throughput or linformer_table, told apart by their columns) and prints
one markdown table with cformer, every PyTorch row of the configuration (the
CSV's "variant" column: "fast f32", "fast bf16", "fast f32 compiled", "twin
f32"; a CSV without it is one row, "pytorch") and the ratios against the
strongest PyTorch row of that configuration, named in the table: cformer /
PyTorch for speed, PyTorch / cformer for time and memory, so that > 1 always
means cformer is better. A PyTorch row that failed (torch.compile, say) shows
as "failed" and is never the strongest. Standard library only.

usage: compare.py CFORMER.csv PYTORCH.csv
"""

import csv
import sys


def load(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def num(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def ratio(a, b):
    return f"{a / b:.2f}x" if a and b else "-"


def fmt(v, spec, unit=""):
    return format(v, spec) + unit if v is not None else "-"


def mib(v):
    return v / (1 << 20) if v is not None else None


def pct(v):
    return 100 * v if v is not None else None


def variants(pt, key):
    """{key: {variant: row}} and the variants in the order of the CSV."""
    by, order = {}, []
    for r in pt:
        v = r.get("variant") or "pytorch"
        if v not in order:
            order.append(v)
        by.setdefault(key(r), {})[v] = r
    return by, order


def good(r, field):
    return r.get("status", "ok") == "ok" and num(r.get(field)) is not None


def train(cf, pt):
    key = lambda r: (r["model"], r["n"], r["k"])  # noqa: E731
    by, order = variants(pt, key)
    cols = [f"PyTorch {v} tokens/s" for v in order]
    name = cf[0]["impl"] if cf else "cformer"  # "cformer" or "cformer bf16"
    print(f"| model | n | k | {name} tokens/s | " + " | ".join(cols) + " | strongest PyTorch | cformer / strongest "
          "| cformer MFU | strongest's MFU | cformer RSS MiB | strongest's RSS MiB | memory ratio "
          "| cformer allocator peak MiB |")
    print("|---|---:|---:|---:|" + "---:|" * len(cols) + "---|---:|---:|---:|---:|---:|---:|---:|")
    failed = []
    for r in cf:
        rows = by.get(key(r), {})
        cells = []
        for v in order:
            p = rows.get(v)
            if p is None:
                cells.append("-")
            elif good(p, "tokens_per_s"):
                cells.append(fmt(num(p["tokens_per_s"]), ".0f"))
            else:
                cells.append("failed")
                failed.append(f"{r['model']} n {r['n']} PyTorch {v}: {p.get('status', '')}")
        ok = [(num(p["tokens_per_s"]), v) for v, p in rows.items() if good(p, "tokens_per_s")]
        tc, mc = num(r.get("tokens_per_s")), num(r.get("mfu"))
        rc, ac = num(r.get("rss_peak_bytes")), num(r.get("peak_bytes"))
        if ok:
            tp, best = max(ok)
            p = rows[best]
            mp, rp = num(p.get("mfu")), num(p.get("peak_bytes"))
        else:
            tp = best = mp = rp = None
        print(f"| {r['model']} | {r['n']} | {r['k'] or '-'} | {fmt(tc, '.0f')} | " + " | ".join(cells)
              + f" | {best or '-'} | {ratio(tc, tp)} | {fmt(pct(mc), '.1f', '%')} | {fmt(pct(mp), '.1f', '%')} "
              f"| {fmt(mib(rc), '.0f')} | {fmt(mib(rp), '.0f')} | {ratio(rp, rc)} | {fmt(mib(ac), '.0f')} |")
    print("\nstrongest = the PyTorch row with the most tokens/s for that configuration; cformer / strongest = "
          "the speed-up over it; memory ratio = its resident-set growth / cformer's (both the VmHWM growth "
          "from before the model was built; a compiled row's includes the compiler's memory). MFU: each "
          "side's model FLOPs (the matmuls it executes) over its own GEMM rate: f32 sgemm, bf16 GEMM for bf16 rows.")
    for line in failed:
        print(f"note: {line}")


def table(cf, pt):
    def key(r):
        return (r["model"], r["n"], r["k"], "1" if r["batch"] == "1" else "max")

    by, order = variants(pt, key)
    cols = [f"PyTorch {v} ms/seq" for v in order]
    name = cf[0]["impl"] if cf else "cformer"
    print(f"| model | n | k | batch (cformer / PyTorch) | {name} ms/seq | " + " | ".join(cols)
          + " | strongest PyTorch | strongest / cformer time | cformer GFLOP/s | ceiling |")
    print("|---|---:|---:|---|---:|" + "---:|" * len(cols) + "---|---:|---:|---:|")
    failed = []
    for r in cf:
        if r["status"] != "ok":
            continue
        rows = by.get(key(r), {})
        cells = []
        for v in order:
            p = rows.get(v)
            if p is None:
                cells.append("-")
            elif good(p, "seconds_per_seq"):
                cells.append(fmt(1e3 * num(p["seconds_per_seq"]), ".2f"))
            else:
                cells.append(p.get("status") or "-")
                if p.get("status", "").startswith("failed"):
                    failed.append(f"{r['model']} n {r['n']} PyTorch {v}: {p.get('note') or p['status']}")
        ok = [(num(p["seconds_per_seq"]), v) for v, p in rows.items() if good(p, "seconds_per_seq")]
        sp, best = min(ok) if ok else (None, None)
        sc = num(r["seconds_per_seq"])
        # the ratio cformer would reach with every matmul at its sgemm rate
        gf, sg = num(r.get("gflop_per_seq")), num(r.get("sgemm_gflops"))
        floor = gf / sg if gf is not None and sg else None
        pb = rows[best]["batch"] if best else "-"
        print(f"| {r['model']} | {r['n']} | {r['k'] or '-'} | {r['batch']} / {pb} "
              f"| {fmt(1e3 * sc if sc is not None else None, '.2f')} | " + " | ".join(cells)
              + f" | {best or '-'} | {ratio(sp, sc)} | {fmt(num(r.get('gflops')), '.1f')} | {ratio(sp, floor)} |")
    print("\nstrongest = the fastest PyTorch row for that configuration; ceiling = its time / (cformer's "
          "forward matmul FLOPs / cformer's sgemm rate): the most cformer's ratio could be with every matmul "
          "at the sgemm rate and nothing else costing time.")
    for line in failed:
        print(f"note: {line}")


def main(argv):
    if len(argv) != 3:
        sys.exit(__doc__.strip().splitlines()[-1])
    cf, pt = load(argv[1]), load(argv[2])
    if not cf or not pt:
        sys.exit("compare.py: a CSV has no rows")
    if "tokens_per_s" in cf[0] and "tokens_per_s" in pt[0]:
        train(cf, pt)
    elif "seconds_per_seq" in cf[0] and "seconds_per_seq" in pt[0]:
        table(cf, pt)
    else:
        sys.exit("compare.py: the two CSVs are not of the same benchmark")


if __name__ == "__main__":
    main(sys.argv)
