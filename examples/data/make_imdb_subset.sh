#!/bin/sh
# Rebuild the bundled IMDB subset (aclImdb_subset/) from a full aclImdb
# directory: in each of train/neg, train/pos, test/neg and test/pos, the
# review files whose id is a multiple of 25 (ids 0, 25, ..., 12475: 500 per
# folder), copied byte for byte under their original names. Prints the
# aggregate SHA-256 that README.md records.
#
#   sh examples/data/make_imdb_subset.sh /path/to/aclImdb [DEST]
#
# DEST defaults to aclImdb_subset next to this script and must not hold
# review files yet.
set -eu
src=${1:?usage: make_imdb_subset.sh ACLIMDB_DIR [DEST_DIR]}
dest=${2:-$(dirname "$0")/aclImdb_subset}
for split in train test; do
	for label in neg pos; do
		in="$src/$split/$label"
		out="$dest/$split/$label"
		[ -d "$in" ] || { echo "make_imdb_subset: no directory $in" >&2; exit 1; }
		if [ -d "$out" ] && [ -n "$(ls "$out")" ]; then
			echo "make_imdb_subset: $out is not empty; remove it first" >&2
			exit 1
		fi
		mkdir -p "$out"
		# one directory listing per folder: names <id>_<rating>.txt, id % 25 == 0
		ls "$in" | LC_ALL=C awk -F_ '/^[0-9]+_[0-9]+\.txt$/ && $1 % 25 == 0' >"$out/.list"
		n=$(wc -l <"$out/.list")
		[ "$n" -eq 500 ] || {
			echo "make_imdb_subset: $in: $n files with an id divisible by 25, expected 500" >&2
			exit 1
		}
		while read -r f; do cp "$in/$f" "$out/$f"; done <"$out/.list"
		rm "$out/.list"
		echo "$split/$label: $n files"
	done
done
# Digest: "<path relative to DEST>\t<sha256>\n" per review file, sorted bytewise.
cd "$dest"
find train test -name '*.txt' | LC_ALL=C sort | while read -r f; do
	printf '%s\t%s\n' "$f" "$(sha256sum "$f" | cut -d' ' -f1)"
done | sha256sum | sed 's/ .*//;s/^/aggregate sha256: /'
