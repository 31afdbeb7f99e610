"""The same encoders as models.py, written the way one writes fast PyTorch.

models.py is the *twin*: a line-by-line mirror of cformer's modules, kept as is
because check_equivalence.py proves, against cformer's own logits, that it is
cformer's function. This file computes that same function (check_fast.py
proves it against the twin, weights mapped one to one) with what a PyTorch
user would do for speed, and with the matmul FLOPs cformer executes:

- one Linear producing q, k and v ("layers.i.attn.qkv", weight [3 dim, dim],
  the rows of q_proj, k_proj and v_proj stacked), so the parameter count is
  the twin's;
- Linformer layers (learned E, F [k, n] shared by the heads; also kv and
  layerwise sharing) in the sequence-first order that cformer's nn_linformer
  takes: [E; F] x as ONE GEMM over the flattened layout ([B dim, T] x [T, 2k]
  as torch.matmul folds it), then the k and v weights on the k projected rows
  only: E (x W_k^T + 1 b_k^T) = (E x) W_k^T + (E 1) b_k^T. Where E = F the
  projected rows are shared and k, v come from one GEMM;
- Conv-Linformer layers (kernel = stride = n/k, one conv per layer shared by
  the heads) folded into the k and v weights as cformer folds them: the conv
  of each window of (x W_k^T + b_k) is one GEMM of the window of x, a free
  view [B k, (n/k) dim], with G [(n/k) dim, dim] built from W_k and the conv
  weight each step (autograd reaches both); k and v together in one GEMM;
- torch.nn.functional.scaled_dot_product_attention or the explicit softmax,
  forced or chosen by the precision ("auto", auto_impl: measured);
- exact GELU, pre-norm LayerNorm, learned positions, masked mean pooling and
  cformer's two-layer classifier head, as the twin.

Sharing "none" (a different E per head) is not implemented here: the
benchmarks do not use it, and per-head E has no sequence-first order that
saves FLOPs (cformer falls back to the paper's order for it too).
"""

import math
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

import models as M

# attention_impl "auto": SDPA in float32, the explicit softmax under bf16 autocast. Measured on
# the project's 2-core Zen 5 guest (attention alone, forward and backward, B 16, 4 heads,
# n 512, dh 64, against 512 and 128 keys, 1 and 2 threads, a busy machine: the order held in
# every run): f32 SDPA 1.1x to 3x faster than the explicit softmax; under bf16 autocast SDPA
# 1.3x to 3x slower (its bf16 CPU kernel against two bf16 GEMMs).
def auto_impl(impl: str) -> str:
    if impl != "auto":
        return impl
    return "math" if torch.is_autocast_enabled("cpu") else "sdpa"


def _attend(impl, q, k, v, key_mask, p_drop, training):
    """softmax(q k^T / sqrt(dh)) v, [B, H, T|S, dh]; key_mask [B, S] True = visible
    or None; a row with no visible key gives zeros (cformer's rule)."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    p = p_drop if training else 0.0
    if impl == "sdpa":
        am = key_mask[:, None, None, :] if key_mask is not None else None
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=am, dropout_p=p, scale=scale)
    else:
        s = torch.matmul(q * scale, k.transpose(-2, -1))
        if key_mask is not None:
            s = s.masked_fill(~key_mask[:, None, None, :], M.MASKED_SCORE)
        a = torch.softmax(s, dim=-1)
        if p > 0:
            a = F.dropout(a, p)
        out = torch.matmul(a, v)
    if key_mask is not None:
        out = out.masked_fill(~key_mask.any(dim=1)[:, None, None, None], 0.0)
    return out


class FastAttention(nn.Module, M.Projections):
    def __init__(self, cfg: M.Config, kind: str, shared: Optional[M.SeqProj], impl: str):
        super().__init__()
        d, h = cfg.dim, cfg.heads
        self.cfg, self.kind, self.heads, self.dim = cfg, kind, h, d
        # nn.Linear's default init depends on fan_in only: as the twin's three Linear(d, d)
        self.qkv = nn.Linear(d, 3 * d)
        self.out_proj = nn.Linear(d, d)
        if impl not in ("math", "sdpa", "auto"):
            raise ValueError(f"attention '{impl}': expected math, sdpa or auto")
        self.impl = impl  # math, sdpa or auto (auto_impl)
        if cfg.sharing == "none" and kind == "linear":
            raise ValueError("fast_models: sharing 'none' (E per head) is not implemented")
        self._init_projections(cfg, kind, shared, False)

    def _heads(self, y):
        """[B, S, d] -> [B, H, S, dh] (a view)."""
        b, s, _ = y.shape
        return y.view(b, s, self.heads, self.dim // self.heads).transpose(1, 2)

    def forward(self, x, mask):
        b, t, d = x.shape
        w, bias = self.qkv.weight, self.qkv.bias
        key_mask = mask
        if self.kind == "standard":
            q, k, v = F.linear(x, w, bias).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        else:
            q = self._heads(F.linear(x, w[:d], bias[:d]))
            e, f = self._projections()
            if self.kind == "linear":
                k, v = self._linear_kv(x, mask, e, f)
                key_mask = None  # masked positions were zeroed before projecting
            else:
                k, v = self._conv_kv(x, mask, e, f)
                key_mask = M.Attention._slot_mask(self, mask, b, t)
            k, v = self._heads(k), self._heads(v)
        o = _attend(auto_impl(self.impl), q, k, v, key_mask, self.cfg.attn_dropout, self.training)
        return self.out_proj(o.transpose(1, 2).reshape(b, t, d))

    def _linear_kv(self, x, mask, e, f):
        """keys and values [B, k, d]: (E x) W_k^T + (E 1) b_k^T and (F x) W_v^T + (F 1) b_v^T,
        masked positions zeroed before projecting (both the x and the bias term)."""
        d, t = self.dim, x.shape[1]
        wkv, bkv = self.qkv.weight[d:], self.qkv.bias[d:]
        if mask is not None:
            keep = mask.to(x.dtype)
            x = x * keep[:, :, None]
        one = e is f
        p = e.weight[:, :t] if one else torch.cat([e.weight[:, :t], f.weight[:, :t]])  # [k or 2k, T]
        # one GEMM: torch.matmul folds [k', T] x [B, T, d] into [B d, T] x [T, k']
        y = torch.matmul(p.to(x.dtype), x)  # [B, k', d]
        # the bias term: E 1 (or E keep), [k'] or [B, k']
        s = p.sum(dim=1) if mask is None else torch.matmul(keep, p.t())
        kk = self.cfg.k
        if one:
            kv = F.linear(y, wkv) + s[..., :, None] * bkv  # [B, k, 2d]: k and v in one GEMM
            return kv[..., :d], kv[..., d:]
        sk, sv = (s[:kk], s[kk:]) if mask is None else (s[:, :kk], s[:, kk:])
        k = F.linear(y[:, :kk], wkv[:d]) + sk[..., :, None] * bkv[:d]
        v = F.linear(y[:, kk:], wkv[d:]) + sv[..., :, None] * bkv[d:]
        return k, v

    def _conv_kv(self, x, mask, e, f):
        """keys and values [B, k, d] of the per-head conv (kernel = stride = n/k) over
        (x W^T + b), zero-padded to n, folded: one GEMM of the windows of x."""
        b, t, d = x.shape
        n, kk, h = self.cfg.max_len, self.cfg.k, self.heads
        dh, win = d // h, n // kk
        keep = None
        if mask is not None or t < n:
            keep = mask.to(x.dtype) if mask is not None else x.new_ones(b, t)
            x = x * keep[:, :, None] if mask is not None else x
            if t < n:
                x = F.pad(x, (0, 0, 0, n - t))
                keep = F.pad(keep, (0, n - t))
        gs, cs, cbs = [], [], []
        for conv, rows in ((e, slice(d, 2 * d)), (f, slice(2 * d, 3 * d))):
            wp = self.qkv.weight[rows].view(h, dh, d).to(x.dtype)  # [H, c, d_in]
            bp = self.qkv.bias[rows].view(h, dh).to(x.dtype)
            cw = conv.weight.to(x.dtype)  # [o, c, j]
            # G[(h, o), (j, d_in)] = sum_c cw[o, c, j] wp[h, c, d_in]
            gs.append(torch.einsum("ocj,hcx->hojx", cw, wp).reshape(d, win * d))
            # the bias of k per window offset: sum_c cw[o, c, j] bp[h, c] -> [j, (h, o)]
            cs.append(torch.einsum("ocj,hc->jho", cw, bp).reshape(win, d))
            cbs.append(conv.bias.to(x.dtype).repeat(h))
        g = torch.cat(gs)  # [2d, win d]
        xw = x.reshape(b, kk, win * d)  # the windows: a free view
        kv = F.linear(xw, g, torch.cat(cbs))  # [B, k, 2d]: k and v in one GEMM
        c = torch.cat(cs, dim=1)  # [win, 2d]
        if keep is None:
            kv = kv + c.sum(dim=0)
        else:
            kv = kv + torch.matmul(keep.view(b, kk, win), c)
        return kv[..., :d], kv[..., d:]


class FastLayer(nn.Module):
    def __init__(self, cfg, kind, shared, impl):
        super().__init__()
        self.norm1 = nn.LayerNorm(cfg.dim, eps=M.NORM_EPS)
        self.attn = FastAttention(cfg, kind, shared, impl)
        self.norm2 = nn.LayerNorm(cfg.dim, eps=M.NORM_EPS)
        self.ff = M.FeedForward(cfg)
        self.p = cfg.dropout

    def forward(self, x, mask):
        a = self.attn(self.norm1(x), mask)
        x = x + (F.dropout(a, self.p, self.training) if self.p > 0 else a)
        f = self.ff(self.norm2(x))
        return x + (F.dropout(f, self.p, self.training) if self.p > 0 else f)


class FastEncoder(nn.Module):
    """ids [B, T] (T <= n), mask [B, T] or None -> [B, T, dim]; the twin's names but
    layers.i.attn.qkv for q_proj, k_proj, v_proj. attention: math, sdpa or auto (SDPA in
    f32, the explicit softmax under bf16 autocast); None: cfg.attention_impl."""

    def __init__(self, cfg: M.Config, attention: Optional[str] = None):
        super().__init__()
        cfg.check()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.dim, padding_idx=cfg.pad_id)
        self.pos = M.Position(cfg.max_len, cfg.dim)
        kinds = [a for a in cfg.attention if a != "standard"]
        self.proj = None
        if cfg.sharing == "layerwise" and kinds:
            self.proj = M.SeqProj(kinds[0], cfg.max_len, cfg.k, cfg.heads, cfg.dim // cfg.heads, False,
                                  cfg.xavier_projections)
        self.layers = nn.ModuleList(FastLayer(cfg, a, self.proj, attention or cfg.attention_impl) for a in cfg.attention)
        self.norm = nn.LayerNorm(cfg.dim, eps=M.NORM_EPS)

    def encode(self, ids, mask=None):
        if ids.shape[1] > self.cfg.max_len:
            raise ValueError(f"T {ids.shape[1]} is longer than max_len {self.cfg.max_len}")
        if mask is not None:
            mask = mask != 0
        x = self.embed(ids) + self.pos.weight[: ids.shape[1]]
        if self.cfg.dropout > 0:
            x = F.dropout(x, self.cfg.dropout, self.training)
        for layer in self.layers:
            x = layer(x, mask)
        return self.norm(x)

    def forward(self, ids, mask=None):
        return self.encode(ids, mask)


class FastClassifier(FastEncoder):
    """FastEncoder, masked mean pooling, head.fc1, gelu, dropout, head.fc2."""

    def __init__(self, cfg: M.Config, attention: Optional[str] = None):
        super().__init__(cfg, attention)
        self.head = nn.Module()
        self.head.fc1 = nn.Linear(cfg.dim, cfg.head_hidden)
        self.head.fc2 = nn.Linear(cfg.head_hidden, cfg.num_classes)

    def forward(self, ids, mask=None):
        h = self.encode(ids, mask)
        if mask is None:
            pooled = h.mean(dim=1)
        else:
            w = (mask != 0).to(h.dtype)
            pooled = (h * w[:, :, None]).sum(dim=1) / w.sum(dim=1, keepdim=True).clamp(min=1)
        z = F.gelu(self.head.fc1(pooled))
        if self.cfg.dropout > 0:
            z = F.dropout(z, self.cfg.dropout, self.training)
        return self.head.fc2(z)


# ---- weights: twin <-> fast ----------------------------------------------------------------


def twin_to_fast_state(sd):
    """The twin's state dict with each layer's q_proj, k_proj, v_proj stacked into qkv."""
    out = {}
    for name, t in sd.items():
        if ".attn.q_proj." in name:
            stem, what = name.split(".attn.q_proj.")
            parts = [sd[f"{stem}.attn.{p}_proj.{what}"] for p in "qkv"]
            out[f"{stem}.attn.qkv.{what}"] = torch.cat(parts)
        elif ".attn.k_proj." in name or ".attn.v_proj." in name:
            continue
        else:
            out[name] = t
    return out


def fast_to_twin_state(sd):
    """The inverse of twin_to_fast_state."""
    out = {}
    for name, t in sd.items():
        if ".attn.qkv." in name:
            stem, what = name.split(".attn.qkv.")
            for p, part in zip("qkv", t.chunk(3)):
                out[f"{stem}.attn.{p}_proj.{what}"] = part
        else:
            out[name] = t
    return out


def from_twin(twin, attention=None):
    """A fast model with the twin's weights (copied)."""
    cls = FastClassifier if isinstance(twin, M.Classifier) else FastEncoder
    fast = cls(twin.cfg, attention).to(next(twin.parameters()).dtype)
    fast.load_state_dict(twin_to_fast_state(twin.state_dict()), strict=True)
    return fast


def forward_flops(cfg: M.Config, with_classifier: bool) -> float:
    """Matmul FLOPs of one forward pass per token that this implementation executes:
    cformer's bench_forward_flops_per_token (sequence-first Linformer, folded conv),
    times n (per sequence), so that it reads as models.forward_flops."""
    n, d, h, f = cfg.max_len, cfg.dim, cfg.heads, cfg.ff_hidden
    total = 0.0
    for a in cfg.attention:
        k = cfg.k
        total += 4 * 2 * d * d + 2 * 2 * d * f  # q, k, v, out; fc1, fc2
        if a == "standard":
            total += 2 * 2 * n * d
        elif a == "linear":
            one = cfg.sharing != "headwise"
            total += -2 * 2 * d * d + (1 if one else 2) * 2 * k * d + 2 * 2 * (k / n) * d * d
            total += 2 * 2 * k * d
        else:
            total += 2 * 2 * k * d  # the folded conv costs what the k, v projections did
    if with_classifier:
        total += (2 * d * cfg.head_hidden + 2 * cfg.head_hidden * cfg.num_classes) / n
    return total * n
