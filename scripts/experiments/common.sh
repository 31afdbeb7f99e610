# Shared by the experiment scripts (sourced, not run): flags, finding the example programs,
# running one configuration per seed (skipping runs already complete), summarising each run's
# metrics.csv, mean and spread over seeds, the markdown tables, and plotting with plot.gp.
# A study sets STUDY, DEF_EPOCHS, QUICK_FLAGS (the flags of its runs under --quick) and
# STUDY_DOC, sources this file and calls parse_args "$@".
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
  --data DIR      aclImdb directory, or its archive (default: the bundled subset
                  examples/data/aclImdb_subset)
  --epochs E      training epochs of every run (default: $DEF_EPOCHS; --quick: 2)
  --quick         a smoke test of the whole pipeline: tiny data, a small model, 2 epochs
  --seeds "S..."  seeds of each configuration (default: "1 2 3")
  --threads T     threads of each run (default: 2)
  --extra "ARGS"  more flags for every run of the program, e.g. "--dim 256 --layers 4"
  --models "M..." only these models (classifier and MLM studies; default: all three)
  --ns "N..."     only these sequence lengths (classifier and MLM studies; default: the grid)
  --out DIR       results directory (default: results/$STUDY)
  --bin DIR       the build directory, holding study/imdb_study and examples/linformer_mlm
                  (default: ., else \$BUILD_DIR, else the source tree)
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
	PLOTS=1 SEL_MODELS="" SEL_NS=""
	while [ $# -gt 0 ]; do
		case $1 in
		--data | --epochs | --seeds | --threads | --extra | --out | --bin | --models | --ns)
			[ $# -ge 2 ] || die "$1 needs a value (see --help)"
			case $1 in
			--data) DATA=$2 ;;
			--epochs) EPOCHS=$2 ;;
			--seeds) SEEDS=$2 ;;
			--threads) THREADS=$2 ;;
			--extra) EXTRA=$2 ;;
			--out) OUT=$2 ;;
			--bin) BIN=$2 ;;
			--models) SEL_MODELS=$2 ;;
			--ns) SEL_NS=$2 ;;
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
	QUICK_ARGS=""
	[ "$QUICK" = 1 ] && QUICK_ARGS=$QUICK_FLAGS
	case $EPOCHS in '' | *[!0-9]* | 0) die "--epochs: expected a positive integer, got '$EPOCHS'" ;; esac
	case $THREADS in '' | *[!0-9]*) die "--threads: expected an integer >= 0, got '$THREADS'" ;; esac
	for s in $SEEDS; do
		case $s in *[!0-9]*) die "--seeds: expected integers, got '$SEEDS'" ;; esac
	done
	[ -n "$SEEDS" ] || die "--seeds: expected at least one seed"
	for s in $SEL_NS; do
		case $s in *[!0-9]* | 0) die "--ns: expected positive integers, got '$SEL_NS'" ;; esac
	done
	for s in $SEL_MODELS; do
		case $s in transformer | linformer | conv-linformer) ;;
		*) die "--models: expected transformer, linformer or conv-linformer, got '$s'" ;;
		esac
	done
	[ -z "$DATA" ] || [ -d "$DATA/train" ] || [ -f "$DATA" ] ||
		die "--data: $DATA is neither an aclImdb directory (with train/) nor an archive of one"
	OUT=${OUT:-results/$STUDY}
	[ "$PLOTS" = 0 ] || need_gnuplot
	find_programs
	mkdir -p "$OUT/runs" || die "cannot create $OUT"
	OUT=$(cd "$OUT" && pwd)
	[ -n "$DATA" ] && DATA=$(cd "$(dirname "$DATA")" && pwd)/$(basename "$DATA")
	return 0
}

need_gnuplot() {
	command -v gnuplot >/dev/null 2>&1 && return 0
	die "gnuplot is needed for the plots and was not found.
Install it (Debian/Ubuntu): sudo apt-get install gnuplot-nox
or run with --no-plots to write the tables only."
}

# IMDB and MLM: the study program and the MLM example.
find_programs() {
	local d
	for d in "$BIN" . "${BUILD_DIR:-}" "$SRC_DIR"; do
		[ -n "$d" ] || continue
		if [ -x "$d/study/imdb_study" ] && [ -x "$d/examples/linformer_mlm" ]; then
			d=$(cd "$d" && pwd)
			IMDB=$d/study/imdb_study MLM=$d/examples/linformer_mlm
			return 0
		fi
	done
	die "study/imdb_study and examples/linformer_mlm not found: build them (make in the build
directory) and run from there, or pass --bin DIR"
}

# run_one NAME PROGRAM ARGS...: one training run into OUT/runs/NAME (its log dir), unless a
# previous run there completed (a "done" file) with the same command and --force was not given;
# a run stopped part way (a signal saves its last.safetensors) resumes with --resume when the
# command is the same. Batches are n tokens wide (--no-bucket), so each run's costs are those of
# its sequence length.
run_one() {
	local name=$1 prog=$2 dir=$OUT/runs/$1 cmd resume=()
	shift 2
	set -- "$@" --no-bucket
	cmd="$(basename "$prog") $* $EXTRA --threads $THREADS"
	if [ "$FORCE" = 0 ] && [ -e "$dir/done" ] && [ "$(cat "$dir/done")" = "$cmd" ]; then
		note "$name: done before, reusing"
		return 0
	fi
	if [ "$FORCE" = 0 ] && [ -e "$dir/last.safetensors" ] && [ "$(cat "$dir/cmd" 2>/dev/null)" = "$cmd" ]; then
		resume=(--resume)
		note "$name: resuming: $cmd"
	else
		rm -rf "$dir" && mkdir -p "$dir" && echo "$cmd" >"$dir/cmd"
		note "$name: $cmd"
	fi
	# shellcheck disable=SC2086 # EXTRA holds several flags
	if ! "$prog" "$@" $EXTRA --threads "$THREADS" --log-dir "$dir" --checkpoint-dir "$dir" \
		"${resume[@]}" >>"$dir/run.log" 2>&1; then
		tail -n 20 "$dir/run.log" >&2
		die "$name failed or stopped; its log: $dir/run.log (run the study again to resume)"
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

# The line of results.md that says when, where and how the study ran.
describe_run() {
	echo "Run $(date -u '+%Y-%m-%d %H:%M UTC') on $(nproc) CPU core(s) with --threads $THREADS$([ "$QUICK" = 1 ] && echo ", --quick ($QUICK_ARGS)")$([ -n "$EXTRA" ] && echo ", extra flags: $EXTRA")."
}

# ratio_rows AGG PREC: the rows "| model | n | k | metric1 | metric2 | train time | tokens/s |
# peak memory | speed-up | memory saving |" of the aggregate lines in AGG ("model n k count",
# then mean and std of metric1 metric2 train_s tokens_per_s peak_mb), the metrics with PREC
# decimals; speed-up and memory saving against the Transformer at the same n.
ratio_rows() {
	awk -v p="$2" '{ key = $2; if ($1 == "transformer") { tps[key] = $11; mem[key] = $13 }
		row[NR] = $0 }
	END { m = "%." p "f ± %." p "f"
		fmt = "| %s | %s | %s | " m " | " m " | %.1f ± %.1f | %.0f ± %.0f | %.0f ± %.0f | %s | %s |\n"
		for (i = 1; i <= NR; i++) { split(row[i], f, " ")
		sp = tps[f[2]] > 0 ? sprintf("%.2fx", f[11] / tps[f[2]]) : "-"
		ms = f[13] > 0 && mem[f[2]] > 0 ? sprintf("%.2fx", mem[f[2]] / f[13]) : "-"
		printf fmt, f[1], f[2], f[3], f[5], f[6], f[7], f[8], f[9], f[10], f[11], f[12], f[13],
			f[14], sp, ms } }' "$1"
}

# epoch_table COL PREC: the markdown table "| model | COL | epoch 1 | ... |" of the aggregate
# lines on stdin ("model col count", then mean and std per epoch), with PREC decimals; a col
# of 0 shows as "-".
epoch_table() {
	printf "| model | %s |" "$1"
	for e in $(seq 1 "$EPOCHS"); do printf " epoch %s |" "$e"; done
	printf "\n|---|---:|"
	for e in $(seq 1 "$EPOCHS"); do printf -- "---:|"; done
	echo
	awk -v p="$2" 'BEGIN { fmt = " %." p "f ± %." p "f |" }
	{ printf "| %s | %s |", $1, ($2 == 0 ? "-" : $2)
		for (i = 4; i < NF; i += 2) printf fmt, $i, $(i + 1); printf "\n" }'
}

# epoch_series CSV VALS N MODEL...: plot data of the per-epoch columns VALS of results.csv at
# n = N, mean and std over the seeds, a series per model.
epoch_series() {
	local csv=$1 vals=$2 n=$3 model
	shift 3
	for model in "$@"; do
		printf '"%s"\n' "$model"
		aggregate "$csv" model,n "$vals" | awk -v m="$model" -v n="$n" '$1 == m && $2 == n {
			for (i = 4; i < NF; i += 2) print (i - 2) / 2, $i, $(i + 1) }'
		printf '\n\n'
	done
}

# n_series AGG COL MODEL...: plot data of the aggregate lines in AGG ("model n k count ...")
# over n, a series per model: column COL (a mean) and COL + 1 (its std).
n_series() {
	local agg=$1 col=$2 model
	shift 2
	for model in "$@"; do
		printf '"%s"\n' "$model"
		awk -v m="$model" -v c="$col" '$1 == m { print $2, $c, $(c + 1) }' "$agg"
		printf '\n\n'
	done
}

# finish CSV MD: list the plots in MD (unless --no-plots), say what was written, print MD.
finish() {
	if [ "$PLOTS" = 1 ]; then
		{
			echo
			echo "Plots:"
			for p in $PLOTTED; do echo "- [$p]($p)"; done
		} >>"$2"
	fi
	note "wrote $1, $2${PLOTTED:+ and plots:$PLOTTED}"
	cat "$2"
}
