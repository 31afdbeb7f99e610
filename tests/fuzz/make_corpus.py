#!/usr/bin/env python3
"""Write the seed corpus of fuzz_checkpoint: small safetensors files for its
model (w [2,3] and b [2], f32, with AdamW state), valid ones laid out as
nn_checkpoint_save writes them and invalid ones, one defect each.

    python3 tests/fuzz/make_corpus.py tests/fuzz/corpus_checkpoint

Standard library only; the output is deterministic.
"""
import json
import os
import struct
import sys


def f32(values):
    return struct.pack("<%df" % len(values), *values)


def st_file(tensors, metadata=None, pad=True, header_text=None):
    """tensors: list of (name, dtype, shape, bytes), laid out in order."""
    header, data, off = {}, b"", 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(raw)]}
        data += raw
        off += len(raw)
    text = header_text if header_text is not None else json.dumps(header, separators=(",", ":"))
    h = text.encode()
    if pad:
        h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + data


W = ("w", "F32", [2, 3], f32([1, 2, 3, 4, 5, 6]))
B = ("b", "F32", [2], f32([7, 8]))
META = {"format": "cformer", "step": "42", "rng_counter": "7", "seed": "1",
        "config": '{"dim": 3, "layers": [1, 2]}'}
OPT = [("optimizer.m.w", "F32", [2, 3], f32([0.1] * 6)),
       ("optimizer.m.b", "F32", [2], f32([0.2] * 2)),
       ("optimizer.v.w", "F32", [2, 3], f32([0.3] * 6)),
       ("optimizer.v.b", "F32", [2], f32([0.4] * 2))]


def corpus():
    ok = st_file([W, B], META)
    opt_meta = dict(META, optimizer="adamw", optimizer_step="3", optimizer_lr="0.001")
    yield "valid_params", ok
    yield "valid_optimizer", st_file([W, B] + OPT, opt_meta)
    yield "valid_no_metadata", st_file([B, W], None, pad=False)
    yield "valid_other_state", st_file([W, B, ("optimizer.sgd.buf", "I64", [0], b"")], META)
    yield "bad_truncated", ok[:-5]
    yield "bad_trailing_bytes", ok + b"\0" * 8
    yield "bad_header_size", struct.pack("<Q", 1 << 40) + ok[8:]
    yield "bad_json", st_file([W, B], META, header_text='{"w":{"dtype":"F32",')
    yield "bad_not_object", st_file([], None, header_text="[1,2,3]")
    yield "bad_dtype", st_file([("w", "F16", [2, 3], b"\0" * 12), B])
    yield "bad_shape", st_file([("w", "F32", [3, 2], f32([0] * 6)), B])
    yield "bad_wrong_dtype", st_file([("w", "F64", [2, 3], b"\0" * 48), B])
    yield "bad_missing", st_file([W])
    yield "bad_unexpected", st_file([W, B, ("x", "I32", [1], b"\0" * 4)])
    over = '{"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},' \
           '"b":{"dtype":"F32","shape":[2],"data_offsets":[16,24]}}'
    yield "bad_overlap", st_file([], None, header_text=over) + f32([0] * 8)
    yield "bad_metadata", st_file([W, B], {"step": 42})
    yield "bad_partial_optimizer", st_file([W, B] + OPT[:3], opt_meta)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "corpus_checkpoint"
    os.makedirs(out, exist_ok=True)
    for name, blob in corpus():
        with open(os.path.join(out, name + ".safetensors"), "wb") as f:
            f.write(blob)


if __name__ == "__main__":
    main()
