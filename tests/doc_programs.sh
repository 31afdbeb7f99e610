#!/bin/sh
# doc_programs.sh DOC...: the C code blocks of markdown documents, checked as a reader uses them.
# A ```c block is either a whole program, which is compiled and run (it must exit 0), or an
# excerpt, marked by the line "<!-- excerpt of FILE -->" just above it, each of whose lines
# (leading and trailing blanks aside; "..." lines left out) must be a line of FILE, so that it
# cannot drift from the source it quotes. A block with neither a main nor the mark fails to
# link, so nothing is skipped silently.
#   CC            the compiler (default cc)
#   DOC_CFLAGS    flags to compile with (default: pkg-config --cflags cformer, -Wall -Wextra -Werror)
#   DOC_LIBS      flags to link with (default: pkg-config --libs cformer, -lm)
#   DOC_SRCDIR    where the excerpts' FILEs are (default: the current directory)
# Programs are written, built and run in a temporary directory. Prints a line per document:
# how many programs ran and how many excerpts were checked.
set -u
cc=${CC:-cc}
cflags=${DOC_CFLAGS-$(pkg-config --cflags cformer) -Wall -Wextra -Werror}
libs=${DOC_LIBS-$(pkg-config --libs cformer) -lm}
srcdir=${DOC_SRCDIR:-.}
work=$(mktemp -d "${TMPDIR:-/tmp}/doc_programs.XXXXXX") || exit 99
trap 'rm -rf "$work"' EXIT
status=0

for doc in "$@"; do
	name=$(basename "$doc" .md)
	rm -f "$work"/block_*
	# each block into block_N.c, and into block_N.from the file it is an excerpt of (if any),
	# with block_N.line its first line in doc
	awk -v dir="$work" '
		/^<!-- excerpt of .* -->$/ { from = $4; next }
		/^```c$/ { n++; inside = 1; f = dir "/block_" n;
			print NR + 1 > (f ".line"); if (from != "") print from > (f ".from"); next }
		/^```/ && inside { inside = 0; from = ""; next }
		inside { print > (f ".c"); next }
		/[^ \t]/ { from = "" }
	' "$doc"
	programs=0 excerpts=0
	for c in "$work"/block_*.c; do
		[ -e "$c" ] || continue
		b=${c%.c}
		where="$doc:$(cat "$b.line")"
		if [ -e "$b.from" ]; then
			src="$srcdir/$(cat "$b.from")"
			sed 's/^[[:space:]]*//; s/[[:space:]]*$//' "$src" >"$work/src.trimmed" || {
				echo "FAIL: $where: cannot read $src"
				status=1
				continue
			}
			sed 's/^[[:space:]]*//; s/[[:space:]]*$//' "$c" | grep -v '^$' | grep -v '^\.\.\.$' |
				while IFS= read -r line; do
					grep -Fxq -- "$line" "$work/src.trimmed" || echo "$line"
				done >"$work/missing"
			if [ -s "$work/missing" ]; then
				echo "FAIL: $where: lines not in $src:"
				sed 's/^/  | /' "$work/missing"
				status=1
			fi
			excerpts=$((excerpts + 1))
			continue
		fi
		prog="$work/${name}_$(basename "$b")"
		# shellcheck disable=SC2086
		if ! $cc $cflags "$c" $libs -o "$prog" >"$work/log" 2>&1; then
			echo "FAIL: $where: the program does not build:"
			sed 's/^/  | /' "$work/log"
			status=1
		else
			(cd "$work" && "$prog") >"$work/log" 2>&1
			rc=$?
			if [ "$rc" -ne 0 ]; then
				echo "FAIL: $where: the program exits $rc:"
				sed 's/^/  | /' "$work/log"
				status=1
			fi
		fi
		programs=$((programs + 1))
	done
	echo "$doc: $programs whole program(s) built and run, $excerpts excerpt(s) checked against their source"
done
exit $status
