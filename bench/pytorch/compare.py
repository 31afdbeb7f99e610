#!/usr/bin/env python3
"""compare.py: joins a cformer CSV and a PyTorch CSV of the same benchmark
(train_throughput or linformer_table, told apart by their columns) and prints
one markdown table with both sides and the ratios cformer / PyTorch (speed) or
PyTorch / cformer (time and memory), so that > 1 always means cformer is
better. Standard library only.

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


def train(cf, pt):
    key = lambda r: (r["model"], r["n"], r["k"])  # noqa: E731
    torch = {key(r): r for r in pt}
    print("| model | n | k | cformer tokens/s | PyTorch tokens/s | speed-up | cformer MFU | PyTorch MFU "
          "| cformer RSS MiB | PyTorch RSS MiB | memory ratio | cformer allocator peak MiB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in cf:
        p = torch.get(key(r), {})
        tc, tp = num(r.get("tokens_per_s")), num(p.get("tokens_per_s"))
        mc, mp = num(r.get("mfu")), num(p.get("mfu"))
        rc, rp = num(r.get("rss_peak_bytes")), num(p.get("peak_bytes"))
        ac = num(r.get("peak_bytes"))
        mib = lambda v: v / (1 << 20) if v is not None else None  # noqa: E731
        pct = lambda v: 100 * v if v is not None else None  # noqa: E731
        print(f"| {r['model']} | {r['n']} | {r['k'] or '-'} | {fmt(tc, '.0f')} | {fmt(tp, '.0f')} "
              f"| {ratio(tc, tp)} | {fmt(pct(mc), '.1f', '%')} | {fmt(pct(mp), '.1f', '%')} "
              f"| {fmt(mib(rc), '.0f')} | {fmt(mib(rp), '.0f')} | {ratio(rp, rc)} | {fmt(mib(ac), '.0f')} |")
    print("\nspeed-up = cformer / PyTorch tokens/s; memory ratio = PyTorch / cformer resident-set "
          "growth (both measured as the VmHWM growth from before the model was built).")


def table(cf, pt):
    def key(r):
        return (r["model"], r["n"], r["k"], "1" if r["batch"] == "1" else "max")

    torch = {key(r): r for r in pt if r["status"] == "ok"}
    print("| model | n | k | batch (cformer / PyTorch) | cformer ms/seq | PyTorch ms/seq "
          "| PyTorch / cformer time | cformer GFLOP/s | ceiling |")
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|")
    for r in cf:
        if r["status"] != "ok":
            continue
        p = torch.get(key(r))
        sc = num(r["seconds_per_seq"])
        sp = num(p["seconds_per_seq"]) if p else None
        ms = lambda v: 1e3 * v if v is not None else None  # noqa: E731
        # the ratio cformer would reach with every matmul at its sgemm rate
        gf, sg = num(r.get("gflop_per_seq")), num(r.get("sgemm_gflops"))
        floor = gf / sg if gf is not None and sg else None
        print(f"| {r['model']} | {r['n']} | {r['k'] or '-'} | {r['batch']} / {p['batch'] if p else '-'} "
              f"| {fmt(ms(sc), '.2f')} | {fmt(ms(sp), '.2f')} | {ratio(sp, sc)} "
              f"| {fmt(num(r.get('gflops')), '.1f')} | {ratio(sp, floor)} |")
    print("\nceiling = PyTorch time / (cformer's forward matmul FLOPs / its sgemm rate): the most "
          "cformer's ratio could be with every matmul at the sgemm rate and nothing else costing time.")


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
