#!/bin/sh
# The C blocks of docs/nn-guide.md and README.md (tests/doc_programs.sh): each whole program
# builds against this build tree's library, with the headers laid out as installed
# (include/cformer), and runs; each excerpt of the tutorial is a part of its source.
# `make installcheck` does the same against the installed library. Run from the build
# directory (as `make check` does, which passes the build's compiler and flags).
set -u
top=${srcdir:-.}
if [ ! -e include/cformer/.stamp ] || [ ! -e libcformer.la ]; then
	echo "test_doc_programs: run it from a built build directory" >&2
	exit 99
fi
here=$(pwd)
CC=${DOC_BUILD_CC:-cc}
DOC_CFLAGS="-I$here/include ${DOC_BUILD_CFLAGS:-} -Wall -Wextra -Werror"
DOC_LIBS="-L$here/.libs -Wl,-rpath,$here/.libs -lcformer ${DOC_BUILD_LIBS:--lm}"
DOC_SRCDIR=$top
export CC DOC_CFLAGS DOC_LIBS DOC_SRCDIR
exec sh "$top/tests/doc_programs.sh" "$top/docs/nn-guide.md" "$top/README.md"
