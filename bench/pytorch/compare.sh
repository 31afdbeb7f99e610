#!/bin/sh
# compare.sh: run a cformer benchmark and its PyTorch counterpart on this machine with the same
# configuration and threads, one after the other, and print them side by side (compare.py).
#
#   bench/pytorch/compare.sh train [--n 128,512,2048] [--models M1,..] [flags...]
#   bench/pytorch/compare.sh table [--n 512,...,16384] [--k 128,256] [flags...]
#
# train: bench/train_throughput vs train_throughput.py, each (model, n) in a fresh process
#        on both sides, so that resident-set peaks compare like for like, the two sides of a
#        configuration one right after the other.
# table: bench/linformer_table vs linformer_table.py at batch 1.
# The PyTorch side is several rows (PT_ROWS, default "f32 bf16 compile"): f32 = the fast model
# (fast_models.py) in float32; bf16 = the same under torch.autocast bfloat16; compile = the
# fast model in float32 under torch.compile; twin = models.py, cformer's modules mirrored
# (the model check_equivalence.py proves equal to cformer), as compare.sh ran before. A row that
# fails (torch.compile without a working compiler, say) is reported as failed; the others stand.
# compare.py names the strongest PyTorch row of each configuration and gives the ratios to it.
# Other flags go to both sides unchanged (--threads, --dim, --heads, --layers, --ff, --vocab,
# --reps, --k). Environment: BUILD (the cformer build directory, default .), PYTHON (an
# interpreter with torch, default python3), OUT (where the CSVs go, default a new temp dir),
# PT_ROWS (the PyTorch rows, in order, from f32, bf16, compile, twin), CF_FLAGS (flags for the
# cformer side only, e.g. "--precision bf16"), BUSY (a number of busy
# loops, one process each, run beside both sides for the whole comparison: BUSY=1 takes one
# core away, the busy-machine measurement of docs/benchmarks.md; default 0).
# Both sides inherit the caller's environment, OpenMP's wait policy included: by default
# idle threads spin a while before they sleep; OMP_WAIT_POLICY=passive makes them sleep at
# once, which costs every parallel region a wake-up (docs/log/benchmarks.md measures both).
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
	awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"
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
rows=${PT_ROWS:-f32 bf16 compile}

# BUSY competing processes, each a shell spinning on one core, stopped on exit
busy_pids=
trap 'for p in $busy_pids; do kill "$p" 2>/dev/null; done' EXIT INT TERM
i=0
while [ "$i" -lt "${BUSY:-0}" ]; do
	sh -c 'while :; do :; done' &
	busy_pids="$busy_pids $!"
	i=$((i + 1))
done

# the flags of a PyTorch row
row_flags() {
	case $1 in
	f32) echo "--impl fast --precision f32" ;;
	bf16) echo "--impl fast --precision bf16" ;;
	compile) echo "--impl fast --precision f32 --compile" ;;
	twin) echo "--impl twin --precision f32" ;;
	*)
		echo "compare.sh: PT_ROWS: unknown row '$1' (expected f32, bf16, compile, twin)" >&2
		return 1
		;;
	esac
}
for r in $rows; do row_flags "$r" >/dev/null; done

# a PyTorch run's last table row and any failure it reports
show() { awk '/^\|/ { last = $0 } /FAILED/ { print } END { if (last != "") print last }'; }

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

# move ONE.csv's rows to the end of ALL.csv (its header only when ALL.csv is still empty); a
# run that wrote no ONE.csv adds nothing, so a failed side never gets the other side's rows
append() {
	[ -f "$1" ] || return 0
	if [ -s "$2" ]; then tail -n +2 "$1"; else cat "$1"; fi >>"$2"
	rm -f "$1"
}

if [ "$mode" = train ]; then
	ns=$(flag --n 128,512,2048 "$@")
	models=$(flag --models transformer,linformer,conv-linformer "$@")
	set -- $(rest "$@")
	: >"$out/cformer.csv"
	: >"$out/pytorch.csv"
	# one configuration at a time on both sides, so that the machine's drifts hit the pair alike
	for m in $(echo "$models" | tr , ' '); do
		for n in $(echo "$ns" | tr , ' '); do
			# shellcheck disable=SC2086 # CF_FLAGS are words
			"$build/bench/train_throughput" --models "$m" --n "$n" --csv "$out/one.csv" \
				${CF_FLAGS:-} "$@" |
				grep '^|' | tail -n 1
			append "$out/one.csv" "$out/cformer.csv"
			for r in $rows; do
				# shellcheck disable=SC2046 # the row's flags are words
				"$python" "$here/train_throughput.py" --models "$m" --n "$n" --csv "$out/one.csv" \
					$(row_flags "$r") "$@" | show
				append "$out/one.csv" "$out/pytorch.csv"
			done
		done
	done
else
	# shellcheck disable=SC2086
	"$build/bench/linformer_table" --batches 1 --csv "$out/cformer.csv" ${CF_FLAGS:-} "$@"
	: >"$out/pytorch.csv"
	for r in $rows; do
		# shellcheck disable=SC2046
		"$python" "$here/linformer_table.py" --batch 1 --csv "$out/one.csv" $(row_flags "$r") "$@"
		append "$out/one.csv" "$out/pytorch.csv"
	done
fi
echo
echo "## cformer vs PyTorch ($prog, CSVs in $out)"
echo
"$python" "$here/compare.py" "$out/cformer.csv" "$out/pytorch.csv"
