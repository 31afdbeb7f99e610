#!/bin/sh
# compare.sh: run a cformer benchmark and its PyTorch twin on this machine with the same
# configuration and threads, one after the other, and print both side by side (compare.py).
#
#   bench/pytorch/compare.sh train [--n 128,512,2048] [--models M1,..] [flags...]
#   bench/pytorch/compare.sh table [--n 512,...,16384] [--k 128,256] [flags...]
#
# train: bench/train_throughput vs train_throughput.py, each (model, n) in a fresh process
#        on both sides, so that resident-set peaks compare like for like.
# table: bench/linformer_table vs linformer_table.py at batch 1.
# Other flags go to both sides unchanged (--threads, --dim, --heads, --layers, --ff, --vocab,
# --reps, --k). Environment: BUILD (the cformer build directory, default .), PYTHON (an
# interpreter with torch, default python3), OUT (where the CSVs go, default a new temp dir).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=${BUILD:-.}
python=${PYTHON:-python3}
mode=${1:-}
[ $# -gt 0 ] && shift
case $mode in
train) prog=train_throughput ;;
table) prog=linformer_table ;;
*)
	sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
	exit 2
	;;
esac
[ -x "$build/bench/$prog" ] || {
	echo "compare.sh: no $build/bench/$prog: build cformer (make) and set BUILD" >&2
	exit 1
}
"$python" -c "import torch" 2>/dev/null || {
	echo "compare.sh: $python cannot import torch: set PYTHON to an interpreter that can" >&2
	exit 1
}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
export OMP_WAIT_POLICY=passive

# The value of --flag in "$@", or the default.
flag() {
	name=$1 value=$2
	shift 2
	while [ $# -gt 0 ]; do
		[ "$1" = "$name" ] && [ $# -gt 1 ] && value=$2
		shift
	done
	echo "$value"
}

# "$@" without --n and --models (the loop sets those).
rest() {
	skip=
	for a in "$@"; do
		if [ -n "$skip" ]; then skip=; continue; fi
		case $a in --n | --models) skip=1 ;; *) printf '%s\n' "$a" ;; esac
	done
}

if [ "$mode" = train ]; then
	ns=$(flag --n 128,512,2048 "$@")
	models=$(flag --models transformer,linformer,conv-linformer "$@")
	set -- $(rest "$@")
	: >"$out/cformer.csv"
	for m in $(echo "$models" | tr , ' '); do
		for n in $(echo "$ns" | tr , ' '); do
			"$build/bench/train_throughput" --models "$m" --n "$n" --csv "$out/one.csv" "$@" |
				grep '^|' | tail -n 1
			if [ -s "$out/cformer.csv" ]; then tail -n +2 "$out/one.csv"; else cat "$out/one.csv"; fi \
				>>"$out/cformer.csv"
		done
	done
	"$python" "$here/train_throughput.py" --models "$models" --n "$ns" --csv "$out/pytorch.csv" "$@"
else
	"$build/bench/linformer_table" --batches 1 --csv "$out/cformer.csv" "$@"
	"$python" "$here/linformer_table.py" --batch 1 --csv "$out/pytorch.csv" "$@"
fi
echo
echo "## cformer vs PyTorch ($prog, CSVs in $out)"
echo
"$python" "$here/compare.py" "$out/cformer.csv" "$out/pytorch.csv"
