#!/bin/sh
# Every relative link of README.md and docs/ (files and headings) resolves:
# tests/check_doc_links.py, which needs a Python 3 ($PYTHON, else python3); without one
# the test is skipped (exit 77), visibly.
set -u
srcdir=${srcdir:-.}
python=${PYTHON:-python3}
if ! "$python" -c "import sys; sys.exit(sys.version_info < (3, 6))" >/dev/null 2>&1; then
	echo "SKIP: test_doc_links: no Python 3 ($python; set PYTHON)"
	exit 77
fi
"$python" "$srcdir/tests/check_doc_links.py" "$srcdir"
