#!/usr/bin/env python3
"""check_fast.py: proves that fast_models.py computes the twin's function.

models.py (the twin) is proven equal to cformer by check_equivalence.py; this
script proves fast_models.py equal to the twin. For each configuration it
builds the twin from a seed, adds noise to every parameter (so that norms and
biases are not left at 1 and 0), copies the weights into the fast model
(q_proj, k_proj, v_proj stacked into qkv; every other name the same) and checks
in float32:

- logits and cross-entropy loss: max |fast - twin| / max |twin| <= --tol-rel
  (default 1e-5), for ids of full length n and of length T < n, without and
  with a padding mask (padding over the last quarter; one row with a single
  real token), with the fast model's attention as explicit softmax and as SDPA;
- one training step (cross-entropy, backward, AdamW with lr 1e-3 and weight
  decay 0.01 on the twin's decayed groups; the twin with PyTorch's default
  AdamW, the fast model with the fused AdamW the benchmark uses): the
  gradients in f32 (max relative difference per tensor, within 1e-4); AdamW on
  the same (the twin's) gradients in f32; and the whole step, each side with
  its own gradients, in f64; the parameters after both within --tol-step
  (default 1e-6, absolute). The whole step is not compared in f32: Adam's
  first step moves each weight by about lr x sign(gradient), so a gradient
  that is zero in exact arithmetic (the key bias under softmax, q . b_k being
  the same for every key) and rounding noise on both sides moves by up to
  2 lr on one side and not the other (measured: up to 1e-5 at lr 1e-3).

Prints one line per check and exits 1 if any fails. Also run as
`check_fast.py --bench` for the benchmark's own shape (vocab 30522, dim 256,
4 heads, 4 layers, n 128, batch 2), which takes a few seconds more.
"""

import argparse
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fast_models as FM  # noqa: E402
import models as M  # noqa: E402


def make_optimizer(model, fused):
    named = list(model.named_parameters())
    groups = [{"params": [p for nm, p in named if not M.no_decay(nm, p)], "weight_decay": 0.01},
              {"params": [p for nm, p in named if M.no_decay(nm, p)], "weight_decay": 0.0}]
    kw = {"fused": True} if fused else {}
    return torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, **kw)


def rel(a, b):
    return ((a - b).abs().max() / b.abs().max().clamp(min=1e-30)).item()


def inputs(cfg, batch, t, masked, gen):
    ids = torch.randint(1, cfg.vocab_size, (batch, t), generator=gen)
    labels = torch.randint(0, cfg.num_classes, (batch,), generator=gen)
    mask = None
    if masked:
        mask = torch.ones(batch, t, dtype=torch.int64)
        mask[0, t - max(1, t // 4):] = 0  # padding over the last quarter
        mask[-1, 1:] = 0  # a single real token
        ids = ids * mask  # pad id 0
    return ids, mask, labels


def check(name, cfg, batch, tol_rel, tol_step, seed=1):
    ok = True
    torch.manual_seed(seed)
    twin = M.Classifier(cfg)
    with torch.no_grad():
        for p in twin.parameters():
            p.add_(0.05 * torch.randn_like(p))
    gen = torch.Generator().manual_seed(seed + 1)
    lengths = sorted({cfg.max_len, max(2, 3 * cfg.max_len // 4)}, reverse=True)
    for impl in ("math", "sdpa"):
        fast = FM.from_twin(twin, impl)
        twin.eval(), fast.eval()
        worst_l = worst_s = 0.0
        for t in lengths:
            for masked in (False, True):
                ids, mask, labels = inputs(cfg, batch, t, masked, gen)
                with torch.no_grad():
                    lt, lf = twin(ids, mask), fast(ids, mask)
                    st, sf = F.cross_entropy(lt, labels), F.cross_entropy(lf, labels)
                worst_l, worst_s = max(worst_l, rel(lf, lt)), max(worst_s, rel(sf, st))
        good = worst_l <= tol_rel and worst_s <= tol_rel
        ok &= good
        print(f"{'ok  ' if good else 'FAIL'} {name} fast/{impl}: logits max rel diff {worst_l:.2e}, "
              f"loss {worst_s:.2e} (T in {lengths}, with and without padding)")
    # one training step on each side: gradients in f32, AdamW on the same gradients in f32,
    # and the whole step (each side's own gradients) in f64
    ok &= step_check(name, twin, batch, gen, tol_step)
    return ok


def train_step(model, opt, ids, mask, labels):
    opt.zero_grad()
    F.cross_entropy(model(ids, mask), labels).backward()
    opt.step()


def step_check(name, twin, batch, gen, tol_step):
    """Gradients (f32), AdamW on identical gradients (f32), a whole step (f64)."""
    ids, mask, labels = inputs(twin.cfg, batch, twin.cfg.max_len, True, gen)
    fast = FM.from_twin(twin)
    twin.train(), fast.train()
    for model in (twin, fast):
        model.zero_grad()
        F.cross_entropy(model(ids, mask), labels).backward()
    gt = FM.twin_to_fast_state({nm: p.grad for nm, p in twin.named_parameters()})
    top = max(g.abs().max().item() for g in gt.values())
    # a gradient that is zero in exact arithmetic (the key bias under softmax: q . b_k is the
    # same for every key) is rounding noise on both sides; its relative difference says nothing
    live = {nm: g for nm, g in gt.items() if g.abs().max().item() > 1e-5 * top}
    gdiff = {nm: rel(p.grad, live[nm]) for nm, p in fast.named_parameters() if nm in live}
    gworst = max(gdiff, key=gdiff.get)
    noise = sorted(set(gt) - set(live))
    # AdamW (twin: PyTorch's default; fast: fused) on the twin's gradients, f32
    for nm, p in fast.named_parameters():
        p.grad = gt[nm].clone()
    ot, of = make_optimizer(twin, False), make_optimizer(fast, True)
    ot.step(), of.step()
    d32 = max_param_diff(twin, fast)
    # the whole step in f64, each side with its own forward and backward
    t64 = M.Classifier(twin.cfg).double()
    t64.load_state_dict({nm: p.double() for nm, p in twin.state_dict().items()})
    f64 = FM.from_twin(t64)
    t64.train(), f64.train()
    train_step(t64, make_optimizer(t64, False), ids, mask, labels)
    train_step(f64, make_optimizer(f64, True), ids, mask, labels)
    d64 = max_param_diff(t64, f64)
    good = gdiff[gworst] <= 1e-4 and d32[0] <= tol_step and d64[0] <= tol_step
    print(f"{'ok  ' if good else 'FAIL'} {name} step: gradients (f32) max rel diff {gdiff[gworst]:.2e} "
          f"({gworst}{'; rounding noise only, zero in exact arithmetic: ' + ', '.join(noise) if noise else ''}); "
          f"AdamW (default vs fused) on the same gradients, f32: parameters max abs diff {d32[0]:.2e}; "
          f"whole step in f64: {d64[0]:.2e}")
    return good


def max_param_diff(twin, fast):
    after = FM.fast_to_twin_state(fast.state_dict())
    diffs = {nm: (after[nm] - p).abs().max().item() for nm, p in twin.state_dict().items()}
    worst = max(diffs, key=diffs.get)
    return diffs[worst], worst


def configs(bench):
    small = dict(dim=32, heads=2, ff_hidden=64, num_classes=3, head_hidden=32, dropout=0.0, attn_dropout=0.0)
    if bench:
        big = dict(dim=256, heads=4, ff_hidden=1024, head_hidden=256, dropout=0.0, attn_dropout=0.0)
        return [(f"{m} n 128 (benchmark shape)", M.preset(m, 30522, 128, layers=4, **big), 2)
                for m in ("transformer", "linformer", "conv-linformer")]
    out = [("transformer:2 n 32", M.preset("transformer", 50, 32, layers=2, **small), 3)]
    for sharing in ("headwise", "kv", "layerwise"):
        out.append((f"linformer:2 {sharing} n 32 k 8", M.preset("linformer", 50, 32, layers=2, k=8,
                                                                 sharing=sharing, **small), 3))
    for sharing in ("headwise", "kv"):
        out.append((f"conv-linformer:2 {sharing} n 32 k 8",
                    M.preset("conv-linformer", 50, 32, layers=2, k=8, sharing=sharing, **small), 3))
    out.append(("conv:2 layerwise n 32 k 8", M.Config(vocab_size=50, max_len=32, attention=["conv", "conv"],
                                                        k=8, sharing="layerwise", **small), 3))
    out.append(("linformer:2 headwise n 48 k 48 (k = n)",
                M.preset("linformer", 50, 48, layers=2, k=48, **small), 3))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tol-rel", type=float, default=1e-5)
    ap.add_argument("--tol-step", type=float, default=1e-6)
    ap.add_argument("--bench", action="store_true", help="also the benchmark's shape at n 128")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    ok = True
    for name, cfg, batch in configs(False) + (configs(True) if a.bench else []):
        ok &= check(name, cfg, batch, a.tol_rel, a.tol_step)
    print("all agree" if ok else "some checks FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
