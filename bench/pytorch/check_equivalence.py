"""Check that models.py computes the same function as cformer.

Loads a cformer classifier checkpoint (safetensors, with the model config in
its metadata) into models.Classifier and runs the token ids that cformer ran;
the logits and the encoder's hidden states must agree with cformer's to about
1e-5 in float32.

The two input files come from bench/pytorch/dump_logits.c, a small program
that `make check` builds (a check program). From a cformer build directory
(after `make check`, or `make bench/pytorch/dump_logits`):

    bench/pytorch/dump_logits linformer:2 headwise 32 8 32 lin.safetensors lin.json
    bench/pytorch/dump_logits conv-linformer:2 headwise 32 8 22 conv.safetensors conv.json
    ~/venv-torch/bin/python ../bench/pytorch/check_equivalence.py \\
        lin.safetensors lin.json conv.safetensors conv.json

--impl math,sdpa,fast-math,fast-sdpa checks the twin's two attentions and
fast_models.py (the benchmark's fast PyTorch model, its weights mapped from
the twin's) against cformer's numbers too.

dump_logits arguments: preset ("transformer:2", "linformer:2",
"conv-linformer:2" or a pattern such as "LC"), sharing (none|headwise|kv|
layerwise; layerwise needs a single projected kind), n = max_len, k, T <= n
(the length of the ids; T < n exercises the slicing of E and the zero padding
of the conv), then the two output files. It builds a tiny model (dim 32, 2 heads, ff 64, 3 classes,
dropout 0), adds noise to every parameter (so that norms and biases are not
left at 1 and 0), and runs four rows: all real tokens, padding over the last
quarter, a single real token and none. Further FIELD=VALUE arguments set config
fields (dump_logits.c's header; check_doc.py uses them).

Several file pairs may be given; the exit status is 1 if any differs by more
than --tol. Standard library and torch only (no numpy, no safetensors).
"""

import argparse
import json
import math
import os
import struct
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fast_models as FM  # noqa: E402
import models as M  # noqa: E402

DTYPES = {"F32": torch.float32, "F64": torch.float64, "I32": torch.int32, "I64": torch.int64}


def read_safetensors(path):
    """-> ({name: tensor}, metadata dict): 8-byte little-endian header length,
    a JSON header {name: {dtype, shape, data_offsets}}, then the raw data."""
    with open(path, "rb") as f:
        blob = f.read()
    (hlen,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + hlen])
    meta = header.pop("__metadata__", {})
    base = 8 + hlen
    tensors = {}
    for name, h in header.items():
        start, end = h["data_offsets"]
        dt = DTYPES[h["dtype"]]
        data = bytearray(blob[base + start : base + end])  # writable copy
        t = torch.frombuffer(data, dtype=dt) if data else torch.empty(0, dtype=dt)
        tensors[name] = t.reshape(h["shape"])
    return tensors, meta


def positions_of(c):
    """cformer's "positions", or what the older "no_positions" /
    "learned_positions" keys of configs saved before it meant."""
    if "positions" in c:
        return c["positions"]
    if c.get("no_positions"):
        return "none"
    return "learned" if c.get("learned_positions", True) else "sinusoidal"


# The fields of cformer's model config (models/model_config_fields.h) that config_from_cformer
# does not read, and why; every other field it reads (check_fields.py checks both lists
# against the C list).
NOT_READ = {
    "k_schedule": "resolved per layer into k",
    "k_first": "resolved per layer into k",
    "k_last": "resolved per layer into k",
    "tie_embeddings": "the MLM head's, which models.py does not have",
    "seed": "the weights come from the checkpoint",
}


def config_from_cformer(c):
    """models.Config from cformer's model_config JSON; refuses what models.py
    does not implement."""
    unsupported = {
        "activation": c["activation"] != "gelu",
        "swiglu": c["swiglu"],
        "pre_norm": not c["pre_norm"],
        "rms_norm": c["rms_norm"],
        "positions": positions_of(c) != "learned",
        "position_kernel": c.get("position_kernel", 0) != 0,
        "final_norm": not c["final_norm"],
        "pooling": c["pooling"] != "mean",
        "conv_dense": c["conv_dense"],
        "mask_empty_slots": c.get("mask_empty_slots", False),
        "shared_kv_head": c["shared_kv_head"],
    }
    bad = [k for k, v in unsupported.items() if v]
    if bad:
        raise ValueError(f"models.py does not implement cformer's {', '.join(bad)} setting")
    kinds = c["attention"][: c["layers"]]
    ks = {kk for kk, a in zip(c["k"], kinds) if a != "standard"}
    if len(ks) > 1:
        raise ValueError(f"models.py has one k for every layer, cformer's config has {sorted(ks)}")
    return M.Config(
        vocab_size=c["vocab_size"], max_len=c["max_len"], dim=c["dim"], heads=c["heads"],
        ff_hidden=c["ff_hidden"], attention=list(kinds), k=ks.pop() if ks else c["max_len"],
        sharing=c["sharing"], dropout=c["dropout"], attn_dropout=c["attn_dropout"],
        pad_id=c["pad_id"], num_classes=c["num_classes"], head_hidden=c["head_hidden"],
        xavier_projections=c["xavier_projections"],
    )


def check(st_path, json_path, tol, impls):
    params, meta = read_safetensors(st_path)
    with open(json_path) as f:
        ref = json.load(f)
    cfg_json = ref["config"] if "config" in ref else json.loads(meta["config"])
    dtype = next(iter(params.values())).dtype
    ids = torch.tensor(ref["ids"], dtype=torch.int64).reshape(ref["shape"])
    mask = torch.tensor(ref["mask"], dtype=torch.int64).reshape(ref["shape"])
    want_logits = torch.tensor(ref["logits"], dtype=torch.float64).reshape(ref["logits_shape"])
    want_hidden = torch.tensor(ref["hidden"], dtype=torch.float64).reshape(ref["hidden_shape"])
    kinds = ",".join(cfg_json["attention"][: cfg_json["layers"]])
    label = f"{os.path.basename(st_path)} [{kinds}; {cfg_json['sharing']}; n {cfg_json['max_len']}, T {ids.shape[1]}]"
    ok = True
    for impl in impls:
        cfg = config_from_cformer(cfg_json)
        cfg.attention_impl = "math" if impl.startswith("fast") else impl
        model = M.Classifier(cfg).to(dtype)
        missing, unexpected = model.load_state_dict(params, strict=False)
        if missing or unexpected:
            raise ValueError(f"{st_path}: parameter names differ: missing {missing}, unexpected {unexpected}")
        encode = M.Encoder.forward
        if impl.startswith("fast"):  # fast_models.py with the twin's weights (fast-math, fast-sdpa)
            if cfg.sharing == "none" and "linear" in cfg.attention:
                print(f"skip {label} {impl}: fast_models.py has no per-head E (sharing none)")
                continue
            model = FM.from_twin(model, impl.partition("-")[2] or "auto")
            encode = FM.FastEncoder.encode
        model.eval()
        with torch.no_grad():
            logits = model(ids, mask).double()
            hidden = encode(model, ids, mask).double()
        # hidden states at padded positions are not used by cformer's
        # classifier; compare them too (both sides compute every position)
        dl = (logits - want_logits).abs().max().item()
        dh = (hidden - want_hidden).abs().max().item()
        real = mask.bool()
        dhr = (hidden - want_hidden).abs()[real].max().item()
        good = dl <= tol and dh <= tol and not math.isnan(dl + dh)
        ok &= good
        print(f"{'ok  ' if good else 'FAIL'} {label} {impl}: logits max|diff| {dl:.2e} "
              f"(|logits| <= {want_logits.abs().max().item():.2f}), hidden {dh:.2e} "
              f"(real tokens {dhr:.2e})")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", help="pairs: OUT.safetensors OUT.json")
    ap.add_argument("--tol", type=float, default=1e-4, help="largest max|diff| accepted (default 1e-4)")
    ap.add_argument("--impl", default="math",
                    help="comma-separated: math, sdpa (models.py's attention), fast-math, fast-sdpa "
                         "(fast_models.py with the same weights; fast = fast-auto); default math")
    a = ap.parse_args()
    if len(a.files) % 2:
        ap.error("expected pairs of OUT.safetensors OUT.json")
    torch.set_num_threads(1)
    impls = a.impl.split(",")
    ok = all([check(a.files[i], a.files[i + 1], a.tol, impls) for i in range(0, len(a.files), 2)])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
