#!/bin/sh
# cformer-tokenize: ids without specials, the model input of --n (truncated to its first
# n - 2 tokens, or head + tail with --keep-tail), WordPiece on an HTML line break, and the
# flag errors. Run from the build directory (as `make check` does).
set -u
prog=./cformer-tokenize
if [ ! -x "$prog" ]; then
	echo "test_tokenize_cli: $prog not built" >&2
	exit 99
fi
test_name=tokenize_cli
. "${srcdir:-.}/tests/lib.sh"
vocab="${srcdir:-.}/tests/data/tokenizer/bert-base-uncased-vocab.txt"

# out WANT ARGS...: the program's output is exactly WANT.
out() {
	want=$1
	shift
	got=$("$prog" "$@" 2>&1)
	if [ "$got" = "$want" ]; then
		echo "ok: $prog $*"
	else
		fail "$prog $* printed '$got', want '$want'"
	fi
}

out "102 103 104" --byte abc
out "2 102 103 104 3 0 0 0" --byte --n 8 abc
# 10 bytes, room for 6: the first 6; keep-tail 2: the first 4 and the last 2; a tail
# longer than the room: the last 6
out "2 102 103 104 105 106 107 3" --byte --n 8 abcdefghij
out "2 102 103 104 105 110 111 3" --byte --n 8 --keep-tail 2 abcdefghij
out "2 106 107 108 109 110 111 3" --byte --n 8 --keep-tail 9 abcdefghij
out "2 102 103 104 3 0 0 0" --byte --n 8 --keep-tail 2 abc
out "1026 7987 1013 1028" --vocab "$vocab" "<br />"
out "101 7592 102 0" --vocab "$vocab" --n 4 --keep-tail 1 Hello

expect 1 "--keep-tail goes with --n" --byte --keep-tail 2 abc
expect 1 "--keep-tail: expected an integer in \[0, 2^30\], got: -1" --byte --n 8 --keep-tail -1 abc
expect 1 "--n: expected an integer in \[2, 2^30\], got: 1" --byte --n 1 abc
expect 1 "give exactly one of --vocab FILE and --byte" --n 8 abc

finish
