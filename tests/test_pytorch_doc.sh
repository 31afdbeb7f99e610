#!/bin/sh
# docs/pytorch.md against cformer: bench/pytorch/check_doc.py runs the page's Python (its
# module, text and AdamW code) on checkpoints of every model option and a few AdamW steps
# that this build's dump_logits and dump_adamw save. It needs a Python with PyTorch:
# $PYTHON, else python3; without one the test is skipped (exit 77), visibly. Run from the
# build directory (as `make check` does).
set -u
srcdir=${srcdir:-.}
python=${PYTHON:-python3}
for p in bench/pytorch/dump_logits bench/pytorch/dump_adamw cformer-tokenize; do
	if [ ! -x "$p" ]; then
		echo "test_pytorch_doc: $p not built" >&2
		exit 99
	fi
done
if ! "$python" -c "import torch" >/dev/null 2>&1; then
	echo "SKIP: test_pytorch_doc: $python has no PyTorch (set PYTHON to one that has)"
	exit 77
fi
"$python" "$srcdir/bench/pytorch/check_doc.py" --build . --doc "$srcdir/docs/pytorch.md"
