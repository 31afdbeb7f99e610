#!/bin/sh
# Every BLIS kernel set this CPU runs, forced in turn (BLIS reads BLIS_ARCH_TYPE once, at its
# start: one process a set): the library reports the set, and test_matmul (products of every
# layout, batch and size, BLIS's packed and unpacked paths) passes on it. So the kernels that
# BLIS or cformer pick on another CPU are tested here too, where this CPU has their
# instructions. Run from the build directory (as `make check`).
set -u
for p in tests/blis_archs tests/test_matmul; do
	if [ ! -x "$p" ]; then
		echo "test_blis_archs: $p not built" >&2
		exit 99
	fi
done
test_name=blis_archs
prog=tests/blis_archs
. "${srcdir:-.}/tests/lib.sh"

tests/blis_archs >"$tmp/archs" || fail "tests/blis_archs exited $?"
[ -s "$tmp/archs" ] || fail "no BLIS kernel set listed for this CPU"
echo "default: $(tests/blis_archs --current)"
while read -r id name; do
	cur=$(BLIS_ARCH_TYPE=$id tests/blis_archs --current 2>"$tmp/err")
	if grep -q "invalid architecture id" "$tmp/err"; then
		echo "SKIP $name: not configured in this BLIS"
		continue
	fi
	[ "$cur" = "$name" ] || { fail "BLIS_ARCH_TYPE=$id: the library reports '$cur', want $name"; continue; }
	if BLIS_ARCH_TYPE=$id tests/test_matmul >"$tmp/out" 2>&1; then
		echo "ok: $name ($(grep -o 'Checks: [0-9]*' "$tmp/out"))"
	else
		fail "test_matmul on BLIS's $name kernels:"
		sed 's/^/  | /' "$tmp/out"
	fi
done <"$tmp/archs"
finish
