#!/bin/sh
# The PyTorch side's model fields (bench/pytorch/models.py's Config, the fields
# check_equivalence.py reads or lists as not read) against cformer's one list of them,
# models/model_config_fields.h: bench/pytorch/check_fields.py parses both as text, so it
# needs a Python 3 ($PYTHON, else python3) but no PyTorch; without one the test is skipped
# (exit 77), visibly.
set -u
srcdir=${srcdir:-.}
python=${PYTHON:-python3}
if ! "$python" -c "import ast, sys; sys.exit(sys.version_info < (3, 8))" >/dev/null 2>&1; then
	echo "SKIP: test_pytorch_fields: no Python 3.8 or later ($python; set PYTHON)"
	exit 77
fi
"$python" "$srcdir/bench/pytorch/check_fields.py" --src "$srcdir"
