#!/bin/sh
# Pack the IMDB reviews for a GPU machine, which has no copy of them: the labelled reviews of
# an aclImdb directory (train and test, pos and neg, with their urls_*.txt) and the unlabelled
# ones (of the original aclImdb_unsup.tar.gz if given, else its train/unsup) as one aclImdb/
# tree in .device/aclImdb.tar.xz (git-ignored; 37 MB for the full dataset, within the
# device's 64 MiB beside the CUDA tests and the training programs). scripts/device/run.sh
# --pretrain reads it there. scripts/device/pack.sh leaves it in place.
# Usage: scripts/device/pack_imdb.sh ACLIMDB_DIR [UNSUP_TARBALL]
set -eu
[ $# -ge 1 ] && [ $# -le 2 ] || {
	echo "usage: scripts/device/pack_imdb.sh ACLIMDB_DIR [UNSUP_TARBALL]" >&2
	exit 2
}
src=$(cd "$1" && pwd)
for d in train/pos train/neg test/pos test/neg; do
	[ -d "$src/$d" ] || { echo "pack_imdb.sh: $src has no $d: not an aclImdb directory" >&2; exit 1; }
done
unsup=""
[ $# -eq 2 ] && unsup=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/aclImdb" .device
for s in train test; do
	mkdir -p "$tmp/aclImdb/$s"
	for l in pos neg; do
		cp -r "$src/$s/$l" "$tmp/aclImdb/$s/"
		[ ! -e "$src/$s/urls_$l.txt" ] || cp "$src/$s/urls_$l.txt" "$tmp/aclImdb/$s/"
	done
done
# the unlabelled reviews: the tarball's, else the directory's own train/unsup if it has one
if [ -n "$unsup" ]; then
	tar -xzf "$unsup" -C "$tmp" aclImdb/train/unsup
elif [ -d "$src/train/unsup" ]; then
	cp -r "$src/train/unsup" "$tmp/aclImdb/train/"
fi
[ ! -e "$src/train/urls_unsup.txt" ] || cp "$src/train/urls_unsup.txt" "$tmp/aclImdb/train/"
# sorted names and fixed owners: the same reviews give the same archive
(cd "$tmp" && tar --sort=name --owner=0 --group=0 --numeric-owner -cf - aclImdb) |
	xz -T0 -9 >.device/aclImdb.tar.xz
echo "pack_imdb.sh: .device/aclImdb.tar.xz: $(du -h .device/aclImdb.tar.xz | cut -f1)," \
	"$(tar -tJf .device/aclImdb.tar.xz | grep -c '\.txt$') .txt files"
