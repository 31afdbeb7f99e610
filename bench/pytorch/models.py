"""PyTorch reference implementations of cformer's three encoders.

An independent re-implementation, for benchmarking only, of the Transformer,
Linformer and Conv-Linformer of cformer (models/encoder.c, models/heads.c,
nn/attention.c, nn/linformer.c; formulas in docs/models.md). The module tree
gives the same parameter names and shapes as cformer ("embed.weight",
"layers.3.attn.q_proj.weight", "layers.0.attn.E.weight", "proj.weight", ...),
so the parameter counts agree exactly:

    ids [B,T] -> embed + learned positions -> dropout -> L x layer
              -> final LayerNorm -> hidden [B,T,dim]
    pre-norm layer: x = x + drop(attn(norm1(x))); x = x + drop(ff(norm2(x)))
    ff: fc2(drop(gelu(fc1 x)))  (exact erf gelu, biases)
    classifier: masked mean pooling -> head.fc1 -> gelu -> dropout -> head.fc2

Attention kinds: "standard" (n x n softmax attention), "linear" (Linformer:
keys and values projected along the sequence by learned E, F [k, n]) and "conv"
(kernel = stride = n/k convolution along the sequence per head, channels = the
head dim, weight [dh, dh, n/k] and bias [dh]). Sharing of E/F: "none" (per
head [H, k, n]; conv: as headwise), "headwise" (E and F per layer), "kv" (E = F
per layer) and "layerwise" (one "proj.weight" for the whole model, E = F).

Only what the benchmarks need is here: LayerNorm, gelu, pre-norm, learned
positions, mean pooling (cformer's defaults). Padding masks are supported as
cformer handles them (padded keys/values zeroed before the projection, E sliced
to T, conv slots covering only padding masked).
"""

import math
from dataclasses import dataclass, field
from typing import List, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

MASKED_SCORE = -1e30  # cformer's score for masked keys (finite: no NaN rows)
NORM_EPS = 1e-5
PROJ_INIT_NOISE = 0.1  # cformer's MODEL_PROJ_INIT_NOISE
KINDS = ("standard", "linear", "conv")
SHARINGS = ("none", "headwise", "kv", "layerwise")
MAX_LAYERS = 64  # cformer's MODEL_MAX_LAYERS


@dataclass
class Config:
    """The subset of cformer's struct model_config the benchmarks use: its fields
    keep cformer's names and defaults (models/model_config_fields.h; check_fields.py
    checks), but k (one k for every projected layer: cformer's k_first) and
    attention_impl (this side's own)."""

    vocab_size: int
    max_len: int  # n
    dim: int = 256
    heads: int = 4
    ff_hidden: int = 1024
    attention: List[str] = field(default_factory=lambda: ["standard"] * 4)
    k: int = 128
    sharing: str = "headwise"
    dropout: float = 0.1
    attn_dropout: float = 0.1
    pad_id: int = 0
    num_classes: int = 2
    head_hidden: int = 256
    xavier_projections: bool = False  # learned E, F: xavier noise only, not window means
    attention_impl: str = "math"  # "math" (explicit softmax) or "sdpa"

    @property
    def layers(self) -> int:
        return len(self.attention)

    def check(self) -> None:
        """Raises ValueError as cformer's model_config_resolve would."""
        n, k = self.max_len, self.k
        if self.dim < 1 or self.heads < 1 or self.dim % self.heads:
            raise ValueError(f"heads {self.heads} must divide dim {self.dim}")
        if not 1 <= self.layers <= MAX_LAYERS:
            raise ValueError(f"layers {self.layers} not in [1, {MAX_LAYERS}]")
        if self.sharing not in SHARINGS:
            raise ValueError(f"sharing '{self.sharing}': expected one of {SHARINGS}")
        if self.attention_impl not in ("math", "sdpa"):
            raise ValueError(f"attention_impl '{self.attention_impl}': expected math|sdpa")
        projected = {a for a in self.attention if a != "standard"}
        for a in self.attention:
            if a not in KINDS:
                raise ValueError(f"attention kind '{a}': expected one of {KINDS}")
        if projected and not 1 <= k <= n:
            raise ValueError(f"k {k} must be in [1, n = {n}]")
        if "conv" in projected and n % k:
            raise ValueError(f"conv projection needs n {n} divisible by k {k}")
        if self.sharing == "layerwise" and len(projected) > 1:
            raise ValueError("layerwise sharing needs one projection kind")


def preset(name: str, vocab_size: int, max_len: int, layers: int = 4, **kw) -> Config:
    """cformer's model_config_preset: "transformer" (all standard),
    "linformer" (all learned projections), "conv-linformer" (first half,
    rounded up, learned; the rest conv). Keyword arguments set other fields."""
    name = name.lower()
    if name == "transformer":
        kinds = ["standard"] * layers
    elif name == "linformer":
        kinds = ["linear"] * layers
    elif name == "conv-linformer":
        half = (layers + 1) // 2
        kinds = ["linear"] * half + ["conv"] * (layers - half)
    else:
        raise ValueError(f"unknown model '{name}': expected transformer, linformer, conv-linformer")
    kw.setdefault("k", min(128, max_len))
    cfg = Config(vocab_size=vocab_size, max_len=max_len, attention=kinds, **kw)
    cfg.check()
    return cfg


def _dropout(p: float) -> nn.Module:
    # p = 0 (the benchmarks) costs nothing, as cformer's dropout with p 0
    return nn.Dropout(p) if p > 0 else nn.Identity()


class Position(nn.Module):
    """Learned positions "pos.weight" [n, dim], N(0, 0.02) as cformer."""

    def __init__(self, n: int, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, dim) * 0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.weight[: x.shape[1]]


class SeqProj(nn.Module):
    """One sequence projection n -> k of keys or values [B, H, T, dh].

    linear: weight [k, n] ([H, k, n] per head), the first T columns used; as
    cformer, the window means (row r averages the positions j with j k / n = r)
    plus PROJ_INIT_NOISE x N(0, 2 / (n + k)), or that xavier draw alone with
    xavier_projections. conv: weight [dh, dh, n/k], bias [dh] (PyTorch's Conv1d
    default init, as cformer), over the sequence zero-padded to n, each head
    alike (the heads share the channels)."""

    def __init__(self, kind: str, n: int, k: int, heads: int, dh: int, per_head: bool,
                 xavier: bool = False):
        super().__init__()
        self.kind, self.n, self.k = kind, n, k
        if kind == "linear":
            shape = (heads, k, n) if per_head else (k, n)
            w = torch.randn(*shape) * math.sqrt(2.0 / (n + k))
            if not xavier:  # nn_seq_proj_init_windows
                window = torch.arange(n) * k // n  # the row each position averages into
                onehot = F.one_hot(window, k).T.float()  # [k, n]
                w = PROJ_INIT_NOISE * w + onehot / onehot.sum(dim=1, keepdim=True)
            self.weight = nn.Parameter(w)
            self.bias = None
        else:
            conv = nn.Conv1d(dh, dh, n // k, stride=n // k)
            self.weight, self.bias = conv.weight, conv.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, h, t, dh = x.shape
        if self.kind == "linear":
            e = self.weight[..., :t]
            return torch.matmul(e, x)  # [k, T] or [H, k, T] x [B, H, T, dh]
        if t < self.n:
            x = F.pad(x, (0, 0, 0, self.n - t))
        y = F.conv1d(x.reshape(b * h, self.n, dh).transpose(1, 2), self.weight, self.bias,
                     stride=self.n // self.k)  # [B H, dh, k]
        return y.transpose(1, 2).reshape(b, h, self.k, dh)


def _attention(cfg: Config, q, k, v, mask, drop: nn.Module, training: bool):
    """softmax(q k^T / sqrt(dh), masked keys excluded) v for [B, H, T|S, dh];
    mask [B, S] True = key takes part, or None. A row with no visible key gives
    zeros (cformer's rule)."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    if cfg.attention_impl == "sdpa":
        p = cfg.attn_dropout if training else 0.0
        am = mask[:, None, None, :] if mask is not None else None
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=am, dropout_p=p, scale=scale)
    else:
        s = torch.matmul(q * scale, k.transpose(-2, -1))
        if mask is not None:
            s = s.masked_fill(~mask[:, None, None, :], MASKED_SCORE)
        out = torch.matmul(drop(torch.softmax(s, dim=-1)), v)
    if mask is not None:
        out = out.masked_fill(~mask.any(dim=1)[:, None, None, None], 0.0)
    return out


class Projections:
    """The sequence projections of an attention layer (of this twin and of
    fast_models.py): E and F of its own (F = E when sharing is kv), or the
    encoder's shared one when sharing is layerwise."""

    def _init_projections(self, cfg: Config, kind: str, shared: Optional[SeqProj], per_head: bool):
        self.shared = [shared]  # a list: not registered as this layer's parameter
        if kind != "standard" and cfg.sharing != "layerwise":
            h, d = cfg.heads, cfg.dim
            make = lambda: SeqProj(kind, cfg.max_len, cfg.k, h, d // h, per_head, cfg.xavier_projections)
            self.E = make()
            if cfg.sharing in ("none", "headwise"):
                self.F = make()

    def _projections(self):
        if self.cfg.sharing == "layerwise":
            return self.shared[0], self.shared[0]
        if self.cfg.sharing == "kv":
            return self.E, self.E
        return self.E, self.F


class Attention(nn.Module, Projections):
    """Multi-head self-attention, standard or with sequence projections."""

    def __init__(self, cfg: Config, kind: str, shared: Optional[SeqProj]):
        super().__init__()
        d, h = cfg.dim, cfg.heads
        self.cfg, self.kind, self.heads = cfg, kind, h
        self.q_proj, self.k_proj = nn.Linear(d, d), nn.Linear(d, d)
        self.v_proj, self.out_proj = nn.Linear(d, d), nn.Linear(d, d)
        self.drop = _dropout(cfg.attn_dropout)
        self._init_projections(cfg, kind, shared, cfg.sharing == "none" and kind == "linear")

    def _split(self, x):
        b, t, d = x.shape
        return x.view(b, t, self.heads, d // self.heads).transpose(1, 2)

    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor]) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self._split(self.q_proj(x)), self._split(self.k_proj(x)), self._split(self.v_proj(x))
        key_mask = mask
        if self.kind != "standard":
            if mask is not None:  # padded keys and values are zero before projecting
                keep = mask[:, None, :, None]
                k, v = k * keep, v * keep
            e, f = self._projections()
            k, v = e(k), f(v)
            key_mask = self._slot_mask(mask, b, t) if self.kind == "conv" else None
        o = _attention(self.cfg, q, k, v, key_mask, self.drop, self.training)
        return self.out_proj(o.transpose(1, 2).reshape(b, t, d))

    def _slot_mask(self, mask, b, t):
        """[B, k] True where a conv window covers at least one real token."""
        n, k = self.cfg.max_len, self.cfg.k
        if mask is None and t == n:
            return None
        real = mask if mask is not None else torch.ones(b, t, dtype=torch.bool)
        real = F.pad(real, (0, n - t), value=False)
        return real.view(b, k, n // k).any(dim=2)


class FeedForward(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.fc1 = nn.Linear(cfg.dim, cfg.ff_hidden)
        self.fc2 = nn.Linear(cfg.ff_hidden, cfg.dim)
        self.drop = _dropout(cfg.dropout)

    def forward(self, x):
        return self.fc2(self.drop(F.gelu(self.fc1(x))))


class Layer(nn.Module):
    """Pre-norm block: x + drop(attn(norm1 x)), then x + drop(ff(norm2 x))."""

    def __init__(self, cfg: Config, kind: str, shared: Optional[SeqProj]):
        super().__init__()
        self.norm1 = nn.LayerNorm(cfg.dim, eps=NORM_EPS)
        self.attn = Attention(cfg, kind, shared)
        self.norm2 = nn.LayerNorm(cfg.dim, eps=NORM_EPS)
        self.ff = FeedForward(cfg)
        self.drop = _dropout(cfg.dropout)

    def forward(self, x, mask):
        x = x + self.drop(self.attn(self.norm1(x), mask))
        return x + self.drop(self.ff(self.norm2(x)))


class Encoder(nn.Module):
    """ids [B, T] (T <= n), mask [B, T] (True/1 = real token) or None -> [B, T, dim]."""

    def __init__(self, cfg: Config):
        super().__init__()
        cfg.check()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.dim, padding_idx=cfg.pad_id)
        self.pos = Position(cfg.max_len, cfg.dim)
        self.drop = _dropout(cfg.dropout)
        kinds = [a for a in cfg.attention if a != "standard"]
        self.proj = None
        if cfg.sharing == "layerwise" and kinds:
            self.proj = SeqProj(kinds[0], cfg.max_len, cfg.k, cfg.heads, cfg.dim // cfg.heads, False,
                                cfg.xavier_projections)
        self.layers = nn.ModuleList(Layer(cfg, a, self.proj) for a in cfg.attention)
        self.norm = nn.LayerNorm(cfg.dim, eps=NORM_EPS)

    def forward(self, ids: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        if ids.shape[1] > self.cfg.max_len:
            raise ValueError(f"T {ids.shape[1]} is longer than max_len {self.cfg.max_len}")
        if mask is not None:
            mask = mask != 0
        x = self.drop(self.pos(self.embed(ids)))
        for layer in self.layers:
            x = layer(x, mask)
        return self.norm(x)


class Classifier(Encoder):
    """Encoder, masked mean pooling, head.fc1 (dim -> head_hidden), gelu,
    dropout, head.fc2 (-> num_classes): logits [B, num_classes]. A subclass of
    the encoder so that the names are cformer's ("embed.weight", "head.fc1.weight")."""

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.head = nn.Module()
        self.head.fc1 = nn.Linear(cfg.dim, cfg.head_hidden)
        self.head.fc2 = nn.Linear(cfg.head_hidden, cfg.num_classes)
        self.head_drop = _dropout(cfg.dropout)

    def forward(self, ids: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        h = super().forward(ids, mask)
        if mask is None:
            pooled = h.mean(dim=1)
        else:
            w = (mask != 0).to(h.dtype)
            pooled = (h * w[:, :, None]).sum(dim=1) / w.sum(dim=1, keepdim=True).clamp(min=1)
        z = F.gelu(self.head.fc1(pooled))
        return self.head.fc2(self.head_drop(z))


def count_params(model: nn.Module) -> int:
    """Distinct parameters (the layerwise projection once)."""
    return sum(p.numel() for p in model.parameters())


def formula_params(cfg: Config, with_classifier: bool) -> int:
    """cformer's model_param_count for this subset (docs/models.md)."""
    V, n, d, h, f, k = cfg.vocab_size, cfg.max_len, cfg.dim, cfg.heads, cfg.ff_hidden, cfg.k
    dh = d // h
    total = V * d + n * d
    one = {"linear": k * n, "conv": dh * dh * (n // k) + dh if k else 0}
    times = {"none": 2, "headwise": 2, "kv": 1, "layerwise": 0}[cfg.sharing]
    for a in cfg.attention:
        total += 4 * d + 4 * (d * d + d) + 2 * d * f + f + d
        if a != "standard":
            per_head = cfg.sharing == "none" and a == "linear"
            total += times * one[a] * (h if per_head else 1)
    kinds = [a for a in cfg.attention if a != "standard"]
    if cfg.sharing == "layerwise" and kinds:
        total += one[kinds[0]]
    total += 2 * d
    if with_classifier:
        total += d * cfg.head_hidden + cfg.head_hidden + cfg.head_hidden * cfg.num_classes + cfg.num_classes
    return total


def no_decay(name: str, p: torch.Tensor) -> bool:
    """cformer's AdamW leaves biases, norms and the embeddings undecayed."""
    return p.ndim == 1 or name.startswith(("embed.", "pos."))


def forward_flops(cfg: Config, with_classifier: bool) -> float:
    """Matmul FLOPs (2 m n k each) of one forward pass over one full sequence
    of n tokens; embedding lookups, norms, softmax and elementwise ops are 0."""
    n, d, h, f, k = cfg.max_len, cfg.dim, cfg.heads, cfg.ff_hidden, cfg.k
    dh = d // h
    total = 0.0
    for a in cfg.attention:
        total += 4 * 2 * n * d * d + 2 * 2 * n * d * f  # q, k, v, out; fc1, fc2
        if a == "standard":
            total += 2 * 2 * n * n * d  # q k^T and p v over all heads
        else:
            total += 2 * 2 * n * k * d  # q k^T and p v against k slots
            if a == "linear":
                total += 2 * 2 * k * n * d  # E K and F V
            else:
                total += 2 * 2 * n * dh * d  # conv as [k, kern dh] x [kern dh, dh] per head
    if with_classifier:
        total += 2 * d * cfg.head_hidden + 2 * cfg.head_hidden * cfg.num_classes
    return total
