#!/usr/bin/env python3
"""train_cuda.py: the PyTorch side of `train_throughput --device cuda`: training
tokens/s (forward, cross-entropy, backward, AdamW; steady state after warm-up
steps) and peak GPU memory of the IMDB classifier (vocab 30522, dim 256,
4 heads, 4 layers, ff 1024, batch 16; Transformer, Linformer and
Conv-Linformer, headwise sharing, k = 128, dropout 0) in each --precision
(f32 with TF32 off, as torch's default and cformer's; tf32; bf16 autocast),
with MFU against the measured matmul rate of the same GPU in that precision.
PyTorch runs at its strongest setup: fast_models.py (the query, key and value
projections as one GEMM, the Linformer's projection in cformer's sequence-first
order, so the same matmul FLOPs), fused AdamW, each configuration timed with
both the explicit softmax attention and scaled_dot_product_attention (SDPA)
and in each --compile mode (none: eager; default, max-autotune,
reduce-overhead: torch.compile's modes, the last with CUDA graphs), the
fastest reported and named. Peak memory is
torch.cuda.max_memory_allocated: tensor bytes, parameters, gradients and
AdamW state included, as cformer's allocator peak. Prints a markdown table;
--csv writes impl,model,n,k,batch,tokens_per_s,step_seconds,peak_bytes,
flops_per_token,gflops,sgemm_gflops,mfu,attention,precision,compile.
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as B  # noqa: E402

HEADER = ["impl", "model", "n", "k", "batch", "tokens_per_s", "step_seconds", "peak_bytes",
          "flops_per_token", "gflops", "sgemm_gflops", "mfu", "attention", "precision", "compile"]
MODELS = ("transformer", "linformer", "conv-linformer")
PRECISIONS = ("f32", "tf32", "bf16")
COMPILES = ("none", "default", "max-autotune", "reduce-overhead")


def parse_flags(argv):
    p = B.Parser(prog="train_cuda.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=B.int_list, default=[512, 2048, 4096], metavar="N1,N2,..",
                   help="sequence lengths (default 512,2048,4096)")
    p.add_argument("--k", type=int, default=128, metavar="K", help="projected length (default 128)")
    p.add_argument("--models", type=B.name_list(MODELS), default=list(MODELS), metavar="M1,M2,..")
    p.add_argument("--batch", type=B.positive(int), default=16, metavar="B", help="batch (default 16)")
    p.add_argument("--dim", type=B.positive(int), default=256, metavar="D")
    p.add_argument("--heads", type=B.positive(int), default=4, metavar="H")
    p.add_argument("--layers", type=B.positive(int), default=4, metavar="L")
    p.add_argument("--ff", type=B.positive(int), default=1024, metavar="F")
    p.add_argument("--vocab", type=B.positive(int), default=30522, metavar="V")
    p.add_argument("--warmup", type=B.positive(int), default=3, metavar="W")
    p.add_argument("--reps", type=B.positive(int), default=10, metavar="R")
    p.add_argument("--sgemm", type=B.positive(int), default=8192, metavar="S",
                   help="the S^3 f32 matmul timed for the MFU (default 8192)")
    p.add_argument("--precision", type=B.name_list(PRECISIONS), default=["f32"], metavar="P1,P2,..",
                   help="f32 (TF32 off), tf32, bf16 (autocast) (default f32)")
    p.add_argument("--compile", type=B.name_list(COMPILES), default=["none"], metavar="C1,C2,..",
                   help="none (eager) and torch.compile modes: default, max-autotune, "
                   "reduce-overhead (default none)")
    p.add_argument("--device", default="cuda", help="torch device (default cuda; cpu to try the script)")
    p.add_argument("--csv", metavar="FILE")
    return p.parse_args(argv)


def set_precision(torch, precision):
    """TF32 on for tf32 only; bf16 runs under autocast (train)."""
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    torch.backends.cudnn.allow_tf32 = precision == "tf32"


def sgemm_rate(torch, dev, s, precision="f32"):
    """GFLOP/s of an s^3 matmul in the precision (bf16 operands for bf16)."""
    dt = torch.bfloat16 if precision == "bf16" else torch.float32
    x, y = torch.randn(s, s, device=dev, dtype=dt), torch.randn(s, s, device=dev, dtype=dt)
    best = float("inf")
    for _ in range(6):
        sync(torch, dev)
        t0 = time.perf_counter()
        torch.matmul(x, y)
        sync(torch, dev)
        best = min(best, time.perf_counter() - t0)
    return 2 * s**3 / best / 1e9


def sync(torch, dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def train(torch, a, dev, model_name, n, impl, precision="f32", mode="none"):
    """(step seconds, peak bytes, flops per token) of one configuration: attention impl,
    precision (bf16: autocast around forward and loss) and compile mode."""
    import fast_models as FM
    import models as M

    cfg = M.preset(model_name, a.vocab, n, layers=a.layers, k=min(a.k, n), dim=a.dim, heads=a.heads,
                   ff_hidden=a.ff, head_hidden=a.dim, dropout=0.0, attn_dropout=0.0, attention_impl=impl)
    if dev.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    model = FM.FastClassifier(cfg, impl).to(dev).train()
    named = list(model.named_parameters())
    fwd = model if mode == "none" else torch.compile(model, mode=mode)
    autocast = torch.autocast(dev.type, dtype=torch.bfloat16, enabled=precision == "bf16")
    groups = [{"params": [p for nm, p in named if not M.no_decay(nm, p)], "weight_decay": 0.01},
              {"params": [p for nm, p in named if M.no_decay(nm, p)], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=1e-4, betas=(0.9, 0.999), eps=1e-8,
                            fused=dev.type == "cuda")
    ids = torch.randint(1, a.vocab, (a.batch, n), device=dev)
    labels = torch.randint(0, 2, (a.batch,), device=dev)

    def step():
        opt.zero_grad()
        with autocast:
            loss = torch.nn.functional.cross_entropy(fwd(ids), labels)
        loss.backward()
        opt.step()

    for _ in range(a.warmup):
        step()
    sync(torch, dev)
    t0 = time.perf_counter()
    for _ in range(a.reps):
        step()
    sync(torch, dev)
    step_s = (time.perf_counter() - t0) / a.reps
    peak = torch.cuda.max_memory_allocated() if dev.type == "cuda" else -1
    del model, fwd, opt
    return step_s, peak, 3 * FM.forward_flops(cfg, True) / n


def main(argv):
    a = parse_flags(argv)
    import torch

    dev = torch.device(a.device)
    name = torch.cuda.get_device_name() if dev.type == "cuda" else "cpu"
    rows, md, rates = [], [], {}
    for precision in a.precision:
        set_precision(torch, precision)
        rates[precision] = sgemm = sgemm_rate(torch, dev, a.sgemm, precision)
        for model_name in a.models:
            for n in a.n:
                best = None
                for mode in a.compile:
                    for impl in ("math", "sdpa"):
                        try:
                            r = train(torch, a, dev, model_name, n, impl, precision, mode)
                        except torch.cuda.OutOfMemoryError:
                            print(f"note: {model_name} n {n} {precision} {mode} {impl}: out of memory",
                                  file=sys.stderr)
                            continue
                        print(f"note: {model_name} n {n} {precision} {mode} {impl}: "
                              f"{r[0] * 1e3:.2f} ms/step", file=sys.stderr)
                        if best is None or r[0] < best[0][0]:
                            best = (r, impl, mode)
                if best is None:
                    continue
                (step_s, peak, fpt), impl, mode = best
                tps = a.batch * n / step_s
                gflops = fpt * tps / 1e9
                k = "" if model_name == "transformer" else min(a.k, n)
                rows.append(["pytorch", model_name, n, k, a.batch, f"{tps:.1f}", f"{step_s:.6g}", peak,
                             f"{fpt:.6g}", f"{gflops:.2f}", f"{sgemm:.2f}", f"{gflops / sgemm:.4f}", impl,
                             precision, mode])
                md.append([model_name, n, k or "-", a.batch, precision, f"{tps:.0f}", f"{step_s * 1e3:.2f}",
                           f"{peak / (1 << 20):.1f}" if peak >= 0 else "-", f"{fpt / 1e6:.2f}",
                           f"{gflops:.1f}", f"{100 * gflops / sgemm:.1f}%", impl, mode])
    rate = ", ".join(f"{p} {r:.1f}" for p, r in rates.items())
    print(f"torch {torch.__version__} on {name}; fast_models (fused QKV, cformer's projection order), fused AdamW; "
          f"matmul {a.sgemm}^3 GFLOP/s: {rate}; dim {a.dim}, heads {a.heads}, layers {a.layers}, "
          f"ff {a.ff}, vocab {a.vocab}, batch {a.batch}; {a.warmup} warm-up then the mean of {a.reps} steps; "
          f"the fastest of compile modes {','.join(a.compile)}")
    print()
    print(B.markdown(["model", "n", "k", "batch", "precision", "tokens/s", "ms/step", "peak MiB",
                      "MFLOP/token (train)", "GFLOP/s", "MFU", "attention", "compile"], md))
    if a.csv:
        B.write_csv(a.csv, HEADER, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
