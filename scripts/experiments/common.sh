# Shared by the experiment scripts (sourced, not run): flags, finding the example programs,
# running one configuration per seed (skipping runs already complete), summarising each run's
# metrics.csv, mean and spread over seeds, and plotting with plot.gp.
# shellcheck shell=bash

EXP_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SRC_DIR=$(cd "$EXP_DIR/../.." && pwd)

die() {
	echo "$STUDY: $*" >&2
	exit 1
}
note() { echo "[$STUDY $(date +%H:%M:%S)] $*"; }

usage() {
	cat <<EOF
usage: scripts/experiments/$STUDY.sh [flags]
$STUDY_DOC
flags:
  --data DIR      aclImdb directory (default: the bundled subset examples/data/aclImdb_subset)
  --epochs E      training epochs of every run (default: $DEF_EPOCHS; --quick: 2)
  --quick         a smoke test of the whole pipeline: tiny data, a small model, 2 epochs
  --seeds "S..."  seeds of each configuration (default: "1 2 3")
  --threads T     threads of each run (default: 2)
  --extra "ARGS"  more flags for every run of the program, e.g. "--dim 256 --layers 4"
  --out DIR       results directory (default: results/$STUDY)
  --bin DIR       directory of the built linformer_imdb and linformer_mlm (default: examples/
                  of the build directory: ./examples, else \$BUILD_DIR/examples, else the tree)
  --force         rerun every configuration (default: reuse runs completed with the same
                  command)
  --keep-checkpoints   keep each run's *.safetensors (default: deleted after the run)
  --no-plots      write the tables only (no gnuplot needed)
Writes OUT/results.csv (a row per run), OUT/results.md (mean ± std over the seeds), OUT/*.png
plots and OUT/runs/<run>/ (each run's metrics.csv, TensorBoard events and log).
EOF
}

parse_args() {
	DATA="" EPOCHS="" QUICK=0 SEEDS="1 2 3" THREADS=2 EXTRA="" OUT="" BIN="" FORCE=0 KEEP=0
	PLOTS=1
	while [ $# -gt 0 ]; do
		case $1 in
		--data | --epochs | --seeds | --threads | --extra | --out | --bin)
			[ $# -ge 2 ] || die "$1 needs a value (see --help)"
			case $1 in
			--data) DATA=$2 ;;
			--epochs) EPOCHS=$2 ;;
			--seeds) SEEDS=$2 ;;
			--threads) THREADS=$2 ;;
			--extra) EXTRA=$2 ;;
			--out) OUT=$2 ;;
			--bin) BIN=$2 ;;
			esac
			shift 2
			;;
		--quick) QUICK=1 && shift ;;
		--force) FORCE=1 && shift ;;
		--keep-checkpoints) KEEP=1 && shift ;;
		--no-plots) PLOTS=0 && shift ;;
		-h | --help) usage && exit 0 ;;
		*) die "unknown flag '$1' (see --help)" ;;
		esac
	done
	[ -z "$EPOCHS" ] && { [ "$QUICK" = 1 ] && EPOCHS=2 || EPOCHS=$DEF_EPOCHS; }
	case $EPOCHS in '' | *[!0-9]* | 0) die "--epochs: expected a positive integer, got '$EPOCHS'" ;; esac
	case $THREADS in '' | *[!0-9]*) die "--threads: expected an integer >= 0, got '$THREADS'" ;; esac
	for s in $SEEDS; do
		case $s in *[!0-9]*) die "--seeds: expected integers, got '$SEEDS'" ;; esac
	done
	[ -n "$SEEDS" ] || die "--seeds: expected at least one seed"
	[ -z "$DATA" ] || [ -d "$DATA/train" ] || die "--data: $DATA has no train/ (expected the aclImdb layout)"
	OUT=${OUT:-results/$STUDY}
	[ "$PLOTS" = 0 ] || need_gnuplot
	find_programs
	mkdir -p "$OUT/runs" || die "cannot create $OUT"
	OUT=$(cd "$OUT" && pwd)
	[ -n "$DATA" ] && DATA=$(cd "$DATA" && pwd)
	return 0
}

need_gnuplot() {
	command -v gnuplot >/dev/null 2>&1 && return 0
	die "gnuplot is needed for the plots and was not found.
Install it (Debian/Ubuntu): sudo apt-get install gnuplot-nox
or run with --no-plots to write the tables only."
}

# IMDB and MLM: the example programs.
find_programs() {
	local d
	for d in "$BIN" ./examples "${BUILD_DIR:-}/examples" "$SRC_DIR/examples"; do
		[ -n "$d" ] && [ "$d" != "/examples" ] || continue
		if [ -x "$d/linformer_imdb" ] && [ -x "$d/linformer_mlm" ]; then
			IMDB=$(cd "$d" && pwd)/linformer_imdb MLM=$(cd "$d" && pwd)/linformer_mlm
			return 0
		fi
	done
	die "linformer_imdb and linformer_mlm not found: build them (make in the build directory)
and run from there, or pass --bin DIR"
}

# run_one NAME PROGRAM ARGS...: one training run into OUT/runs/NAME (its log dir), unless a
# previous run there completed (a "done" file) with the same command and --force was not given.
run_one() {
	local name=$1 prog=$2 dir=$OUT/runs/$1 cmd
	shift 2
	cmd="$(basename "$prog") $* $EXTRA --threads $THREADS"
	if [ -e "$dir/done" ] && [ "$(cat "$dir/done")" = "$cmd" ] && [ "$FORCE" = 0 ]; then
		note "$name: done before, reusing"
		return 0
	fi
	rm -rf "$dir" && mkdir -p "$dir"
	note "$name: $cmd"
	# shellcheck disable=SC2086 # EXTRA holds several flags
	if ! "$prog" "$@" $EXTRA --threads "$THREADS" --log-dir "$dir" --checkpoint-dir "$dir" \
		>"$dir/run.log" 2>&1; then
		tail -n 20 "$dir/run.log" >&2
		die "$name failed; its log: $dir/run.log"
	fi
	[ "$KEEP" = 1 ] || rm -f "$dir"/*.safetensors
	echo "$cmd" >"$dir/done"
}

# summarise CSV LOWER_BETTER: one line "final_val best_val last_split_value train_s tokens_per_s peak_mb
# val_by_epoch" of a run's metrics.csv (step,epoch,split,loss,METRIC,lr,tokens_per_s,
# elapsed_s,peak_mb). METRIC is accuracy (classifier) or perplexity (MLM); best is the max
# accuracy or min perplexity (lower_better); train_s is the elapsed time at the last validation
# (training and the per-epoch validations); tokens/s is the steps-weighted harmonic mean of the
# train rows' window rates (every step has batch x n padded tokens), i.e. training tokens over
# training time; last_split_value is the test accuracy (classifier) or "-" (MLM).
summarise() {
	awk -F, -v lower_better="$2" '
	NR == 1 { next }
	$3 == "train" { d = $1 - prev; prev = $1; if ($7 > 0) { steps += d; time += d / $7 } }
	$3 == "val" { n++; v = $5; vals = vals (n > 1 ? ";" : "") v; last = v; t = $8
		if (n == 1 || (lower_better ? v < best : v > best)) best = v }
	$3 == "test" { test = $5 }
	{ if ($9 > peak) peak = $9 }
	END { if (!n) exit 1
		printf "%s %s %s %.3f %.1f %.1f %s\n", last, best, (test == "" ? "-" : test), t,
			(time > 0 ? steps / time : 0), peak, vals }' "$1"
}

# aggregate CSV KEYS VALS: mean and sample standard deviation over the rows (the seeds) of
# each group of equal KEYS columns of results.csv, in first-seen order. KEYS and VALS are
# comma-separated column names; a VAL column "name[i]" is the i-th (1-based) ';'-separated
# entry of column name. Prints "key... count mean1 std1 mean2 std2 ..." lines.
aggregate() {
	awk -F, -v keys="$2" -v vals="$3" '
	NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i
		nk = split(keys, K, ","); nv = split(vals, V, ",")
		for (j = 1; j <= nv; j++) { sub_[j] = 0; name = V[j]
			if (match(name, /\[[0-9]+\]$/)) {
				sub_[j] = substr(name, RSTART + 1, RLENGTH - 2) + 0
				name = substr(name, 1, RSTART - 1) }
			if (!(name in col)) { print "aggregate: no column " name > "/dev/stderr"; exit 1 }
			vc[j] = col[name] }
		for (j = 1; j <= nk; j++) if (!(K[j] in col)) {
			print "aggregate: no column " K[j] > "/dev/stderr"; exit 1 }
		next }
	{ key = ""; for (j = 1; j <= nk; j++) key = key (j > 1 ? " " : "") $(col[K[j]])
		if (!(key in n)) order[++m] = key
		n[key]++
		for (j = 1; j <= nv; j++) { x = $(vc[j])
			if (sub_[j]) { split(x, parts, ";"); x = parts[sub_[j]] }
			s[key, j] += x; ss[key, j] += x * x } }
	END { for (i = 1; i <= m; i++) { key = order[i]; line = key " " n[key]
		for (j = 1; j <= nv; j++) { mean = s[key, j] / n[key]
			var = n[key] > 1 ? (ss[key, j] - n[key] * mean * mean) / (n[key] - 1) : 0
			line = line sprintf(" %.6g %.6g", mean, var > 0 ? sqrt(var) : 0) }
		print line } }' "$1"
}

# plot DATA OUTNAME TITLE XLABEL YLABEL LOGX: DATA holds one block per series (a quoted
# title line, then "x y std" lines; blocks separated by two blank lines).
plot() {
	[ "$PLOTS" = 1 ] || return 0
	local term=svg ext=svg xticks
	if gnuplot -e 'print GPVAL_TERMINALS' 2>&1 | grep -qw pngcairo; then
		term=pngcairo ext=png
	fi
	# no empty block at the end; label every x value of the data
	awk '{ line[NR] = $0 } NF { last = NR } END { for (i = 1; i <= last; i++) print line[i] }' \
		"$1" >"$1.tmp" && mv "$1.tmp" "$1"
	xticks=$(awk '$1 ~ /^[0-9.]+$/ { print $1 }' "$1" | sort -n -u | paste -s -d, -)
	[ -n "$xticks" ] || { note "no data for $2, not plotted"; return 0; }
	gnuplot -e "datafile='$1'; outfile='$OUT/$2.$ext'; term='$term'; plottitle='$3'; \
		xlab='$4'; ylab='$5'; logx=$6; xticks='$xticks'" "$EXP_DIR/plot.gp" ||
		die "gnuplot failed on $1"
	PLOTTED="$PLOTTED $2.$ext"
}

# Markdown "mean ± std" of two numbers with the given printf precision.
pm() { awk -v m="$1" -v s="$2" -v f="$3" 'BEGIN { printf f " ± " f, m, s }'; }

# The data directory flag (none: the program's default, the bundled subset).
data_flag() { [ -n "$DATA" ] && printf -- '--data %s' "$DATA"; }

describe_data() {
	if [ -n "$DATA" ]; then echo "$DATA"; else echo "the bundled subset (examples/data/aclImdb_subset)"; fi
}
