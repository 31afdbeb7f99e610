"""Helpers shared by the PyTorch benchmarks: flags, one fresh child process
per configuration, threads, and the memory high-water mark.

Peak memory on the CPU: PyTorch's CPU allocator takes its memory from malloc,
so the benchmarks read the process's resident-set high-water mark (VmHWM in
/proc/self/status). Each configuration runs in a fresh child process which
first runs a tiny model of the same kind (so that code pages and thread pools
are already resident), then takes VmRSS as the baseline and resets the
high-water mark (writing "5" to /proc/self/clear_refs), builds the real model
and runs the measured part; peak = VmHWM - baseline. It thus includes the
parameters (and, in training, gradients and AdamW state) like cformer's
allocator peak, but also allocator slack and fragmentation (glibc keeps freed
chunks below its mmap threshold), thread stacks and any page first touched in
the measured part, and it counts pages, not bytes: it is an upper bound of
PyTorch's tensor bytes, where cformer's figure counts tensor bytes exactly.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import warnings

CHILD_FLAG = "--_child"


class Parser(argparse.ArgumentParser):
    """argparse that exits with status 1 (not 2) on a bad flag."""

    def error(self, message):
        self.print_usage(sys.stderr)
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        sys.exit(1)


def int_list(text: str):
    """"512,1024" -> [512, 1024] (positive integers)."""
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers separated by commas (e.g. 512,1024), got '{text}'")
    return values


def name_list(choices):
    """A type for "a,b": names from choices."""

    def parse(text: str):
        names = text.split(",")
        bad = [n for n in names if n not in choices]
        if bad or not text:
            raise argparse.ArgumentTypeError(f"expected names from {','.join(choices)} separated by commas, got '{text}'")
        return names

    return parse


def positive(kind):
    """A type for a positive int or float."""

    def parse(text: str):
        try:
            v = kind(text)
        except ValueError:
            v = 0
        if not v > 0:
            raise argparse.ArgumentTypeError(f"expected a positive {kind.__name__}, got '{text}'")
        return v

    return parse


def add_model_flags(p):
    """--threads and the encoder's shape (--dim, --heads, --layers, --ff, --vocab), as both
    benchmarks and their cformer twins take them."""
    p.add_argument("--threads", type=positive(int), default=2, metavar="T", help="threads (default 2)")
    p.add_argument("--dim", type=positive(int), default=256, metavar="D", help="model width (default 256)")
    p.add_argument("--heads", type=positive(int), default=4, metavar="H", help="attention heads (default 4)")
    p.add_argument("--layers", type=positive(int), default=4, metavar="L", help="encoder layers (default 4)")
    p.add_argument("--ff", type=positive(int), default=1024, metavar="F", help="feed-forward width (default 1024)")
    p.add_argument("--vocab", type=positive(int), default=30522, metavar="V", help="vocabulary (default 30522)")


def parse_model_flags(p, argv):
    """Adds --attention and --csv, parses argv and checks that --heads divides --dim."""
    p.add_argument("--attention", choices=["math", "sdpa", "auto"], default="auto",
                   help="math: softmax(q k^T) v with the scores in memory, as cformer; "
                        "sdpa: torch's fused scaled_dot_product_attention; auto (default): with "
                        "--impl fast SDPA in f32 and math under bf16 autocast (the faster of the "
                        "two on the CPUs measured, fast_models.auto_impl), with --impl twin math")
    p.add_argument("--impl", choices=["fast", "twin"], default="fast",
                   help="fast (default): fast_models.py, the same function written for speed "
                        "(fused QKV, sequence-first Linformer, folded conv, fused AdamW); twin: "
                        "models.py, cformer's modules mirrored one to one (check_equivalence.py)")
    p.add_argument("--precision", choices=["f32", "bf16"], default="f32",
                   help="f32 (default), or bf16: torch.autocast('cpu', dtype=torch.bfloat16) "
                        "around the forward (and loss); weights, gradients and optimizer f32")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile the model (its compilation runs in the warm-up steps)")
    p.add_argument("--csv", metavar="FILE", help="write the CSV here")
    a = p.parse_args(argv)
    if a.attention == "auto" and a.impl == "twin":
        a.attention = "math"
    if a.dim % a.heads:
        p.error(f"argument --heads: {a.heads} must divide --dim {a.dim}")
    return a


def variant(a) -> str:
    """The PyTorch row's name: "fast f32", "fast bf16", "fast f32 compiled", "twin f32"."""
    return f"{a.impl} {a.precision}{' compiled' if a.compile else ''}"


def build_model(c, M, cfg, classifier: bool):
    """The twin (models.py) or the fast model (fast_models.py) for cfg, per c["impl"] and
    c["attention"] (auto: the fast model's rule; the twin takes cfg.attention_impl)."""
    if c["impl"] == "twin":
        return (M.Classifier if classifier else M.Encoder)(cfg)
    import fast_models as FM

    return (FM.FastClassifier if classifier else FM.FastEncoder)(cfg, c["attention"])


def flops(c, M, cfg, classifier: bool) -> float:
    """Forward matmul FLOPs per sequence that the chosen implementation executes."""
    if c["impl"] == "twin":
        return M.forward_flops(cfg, classifier)
    import fast_models as FM

    return FM.forward_flops(cfg, classifier)


def autocast(torch, precision: str):
    """bf16: CPU autocast to bfloat16; f32: a no-op context."""
    import contextlib

    if precision == "bf16":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def short_error(e: BaseException) -> str:
    """The exception's type and the first informative line of its message."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    lines = [ln for ln in lines if "TORCHDYNAMO_VERBOSE" not in ln and "TORCH_LOGS" not in ln] or [""]
    return f"{type(e).__name__}: {lines[0][:200]}"


def csv_text(text: str) -> str:
    """text fit for one CSV field (no commas, quotes or newlines)."""
    return re.sub(r"[,\n\r\"]", ";", str(text))[:300]


def wait_policy() -> str:
    """OMP_WAIT_POLICY as set in the environment, or "default"."""
    return os.environ.get("OMP_WAIT_POLICY") or "default"


def thread_env(threads: int) -> dict:
    """The environment of a child: OpenMP and MKL limited to threads."""
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[var] = str(threads)
    return env


def run_child(script: str, params: dict, threads: int, timeout: float):
    """Runs `script --_child JSON` in a fresh process; returns its JSON result
    (the last stdout line), or {"error": why}."""
    cmd = [sys.executable, "-W", "ignore", script, CHILD_FLAG, json.dumps(params)]
    try:
        p = subprocess.run(cmd, env=thread_env(threads), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    lines = p.stdout.strip().splitlines()
    if p.returncode != 0 or not lines:
        why = p.stderr.strip().splitlines()[-1:] or [f"exit status {p.returncode}"]
        if p.returncode < 0:
            why = [f"killed by signal {-p.returncode} (out of memory?)"]
        return {"error": why[0]}
    return json.loads(lines[-1])


def child_params():
    """The child's parameters, or None in the parent."""
    if len(sys.argv) == 3 and sys.argv[1] == CHILD_FLAG:
        return json.loads(sys.argv[2])
    return None


def child_torch(threads: int):
    """Imports torch in a child with threads intra-op threads and seed 0."""
    warnings.filterwarnings("ignore")
    import torch

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    return torch


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        m = re.search(rf"^{field}:\s+(\d+) kB", f.read(), re.M)
    return int(m.group(1)) if m else 0


def rss_bytes() -> int:
    return _status_kib("VmRSS") * 1024


def hwm_bytes() -> int:
    return _status_kib("VmHWM") * 1024


def reset_hwm() -> bool:
    """Resets VmHWM to the current RSS; False where the kernel refuses."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def mem_available() -> int:
    """MemAvailable of /proc/meminfo in bytes."""
    with open("/proc/meminfo") as f:
        m = re.search(r"^MemAvailable:\s+(\d+) kB", f.read(), re.M)
    return int(m.group(1)) * 1024 if m else 0


def write_csv(path: str, header, rows) -> None:
    """rows: lists of values; None is written as an empty field."""
    with open(path, "w") as f:
        f.write(",".join(header) + "\n")
        for r in rows:
            f.write(",".join("" if v is None else str(v) for v in r) + "\n")


def markdown(header, rows) -> str:
    """A markdown table; numeric columns right-aligned."""
    def numeric(i):
        return all(re.fullmatch(r"[-+0-9.eE x]*", str(r[i])) for r in rows)

    align = ["---:" if rows and numeric(i) else "---" for i in range(len(header))]
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    out += ["| " + " | ".join(str(v) for v in r) + " |" for r in rows]
    return "\n".join(out)
