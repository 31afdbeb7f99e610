#!/bin/sh
# Data-parallel training under mpirun on this machine (loopback): tests/test_nn_dist with 2
# and 3 ranks; examples/linformer_imdb with 2 and 3 ranks follows the single process's
# losses and accuracies, every rank ending with the same parameters; a run stopped with 2
# ranks resumes with 3 and ends as the uninterrupted run; examples/linformer_mlm (with
# gradient accumulation) on 2 ranks follows one process; so do both with a batch of fewer
# rows than ranks (an empty share); bench/train_throughput times the
# all-reduce on 2 ranks and refuses a batch the ranks cannot share; a rank that fails or is
# killed ends the job at once, naming the rank. Skipped (77) when MPI is not built in (MPIRUN
# empty, as configure leaves it). Run from the build directory, as `make check` does.
set -u
prog=${LINFORMER_IMDB:-examples/linformer_imdb}
mlm=${LINFORMER_MLM:-examples/linformer_mlm}
if [ -z "${MPIRUN:-}" ]; then
	echo "test_dist: SKIP: built without MPI (./configure found no Open MPI)"
	exit 77
fi
for p in "$prog" "$mlm" tests/test_nn_dist bench/train_throughput; do
	[ -x "$p" ] || { echo "test_dist: $p not built" >&2; exit 99; }
done
test_name=dist
. "${srcdir:-.}/tests/lib.sh"
# Open MPI as root (CI), more ranks than cores, no process binding (one thread a rank),
# and no cross-memory attach (refused in containers): shared memory copies twice.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_hwloc_base_binding_policy=none
run() { # run NP ARGS...: mpirun -np NP ARGS under a time limit (a hang fails)
	np=$1
	shift
	# Open MPI unloads its components at MPI_Finalize, so LeakSanitizer (CI's sanitizer
	# build) cannot tell their allocations from ours: no leak check in the ranks (the
	# single-process runs of the same code keep theirs)
	ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" timeout 300 "$MPIRUN" -np "$np" "$@"
}

for np in 2 3; do
	if run $np tests/test_nn_dist >"$tmp/unit$np.out" 2>&1 &&
		[ "$(grep -c '100%: Checks' "$tmp/unit$np.out")" -eq $np ]; then
		echo "ok: test_nn_dist on $np ranks"
	else
		fail "test_nn_dist on $np ranks:"
		cat "$tmp/unit$np.out"
	fi
done

# step,split,loss,accuracy of a run's metrics.csv (the timing columns left out)
metrics() { cut -d, -f1,3,4,5 "$1/metrics.csv"; }
SMALL="--max-train 64 --max-test 32 --epochs 2 --batch 16 --threads 1"
# shellcheck disable=SC2086
"$prog" $SMALL --log-dir "$tmp/one" >"$tmp/one.out" 2>&1 || fail "one process exited $?"
metrics "$tmp/one" >"$tmp/one.csv"
for np in 2 3; do
	# shellcheck disable=SC2086
	run $np "$prog" $SMALL --log-dir "$tmp/n$np" >"$tmp/n$np.out" 2>&1 ||
		fail "$np ranks exited $?: $(tail -5 "$tmp/n$np.out")"
	metrics "$tmp/n$np" >"$tmp/n$np.csv"
	# the same rows; losses within 1e-4 relative (another order of summation)
	if awk -F, 'NR == FNR { l[FNR] = $3; a[FNR] = $4; k[FNR] = $1 $2; next }
		{ n++; d = $3 - l[FNR]; d = d < 0 ? -d : d
		  if (k[FNR] != $1 $2 || a[FNR] != $4 || d > 1e-4 * (l[FNR] + 1)) bad++ }
		END { exit !(n > 1 && n == FNR && !bad) }' "$tmp/one.csv" "$tmp/n$np.csv"; then
		echo "ok: $np ranks follow one process ($(grep -c , "$tmp/n$np.csv") rows)"
	else
		fail "$np ranks differ from one process:"
		paste -d' ' "$tmp/one.csv" "$tmp/n$np.csv" | sed 's/^/  | /'
	fi
	grep -q "^$np ranks: parameters identical" "$tmp/n$np.out" ||
		fail "$np ranks: no 'parameters identical' line: $(tail -3 "$tmp/n$np.out")"
	[ "$(grep -c '^test: ' "$tmp/n$np.out")" -eq 1 ] ||
		fail "$np ranks: rank 0 alone should print (test lines: $(grep -c '^test: ' "$tmp/n$np.out"))"
done

# stopped after step 3 on 2 ranks, resumed on 3: the uninterrupted run's evaluations
# shellcheck disable=SC2086
run 2 "$prog" $SMALL --log-dir "$tmp/r" --stop-after 3 >"$tmp/r.out" 2>&1 ||
	fail "--stop-after on 2 ranks exited $?: $(tail -3 "$tmp/r.out")"
# shellcheck disable=SC2086
run 3 "$prog" $SMALL --log-dir "$tmp/r" --resume >"$tmp/r2.out" 2>&1 ||
	fail "resuming on 3 ranks exited $?: $(tail -3 "$tmp/r2.out")"
grep -v ',train,' "$tmp/one.csv" >"$tmp/one.eval"
metrics "$tmp/r" | grep -v ',train,' >"$tmp/r.eval"
if awk -F, 'NR == FNR { l[FNR] = $3; a[FNR] = $4; next }
	{ n++; d = $3 - l[FNR]; d = d < 0 ? -d : d; if (a[FNR] != $4 || d > 1e-4 * (l[FNR] + 1)) bad++ }
	END { exit !(n > 1 && n == FNR && !bad) }' "$tmp/one.eval" "$tmp/r.eval"; then
	echo "ok: stopped on 2 ranks, resumed on 3: the uninterrupted run's evaluations"
else
	fail "the resumed run differs:"
	paste -d' ' "$tmp/one.eval" "$tmp/r.eval" | sed 's/^/  | /'
fi

# linformer_mlm, two batches a step, dropout on: 2 ranks follow one process
awk 'BEGIN { split("cat dog bird fish horse", a, " ")
	for (i = 0; i < 60; i++) printf "the %s sat on the mat and the %s ate .\n", a[i % 5 + 1], a[(i + 2) % 5 + 1] }' \
	>"$tmp/corpus.txt"
M="--model LC --n 32 --k 8 --dim 32 --heads 2 --ff 64 --corpus $tmp/corpus.txt --val-fraction 0.2
	--batch 8 --accum 2 --seed 3 --threads 1 --steps 6 --lr 3e-3 --log-every 2"
# shellcheck disable=SC2086
"$mlm" $M --log-dir "$tmp/m1" >"$tmp/m1.out" 2>&1 || fail "linformer_mlm exited $?"
# shellcheck disable=SC2086
run 2 "$mlm" $M --log-dir "$tmp/m2" >"$tmp/m2.out" 2>&1 ||
	fail "linformer_mlm on 2 ranks exited $?: $(tail -5 "$tmp/m2.out")"
if cut -d, -f1,3,4 "$tmp/m1/metrics.csv" >"$tmp/m1.csv" &&
	cut -d, -f1,3,4 "$tmp/m2/metrics.csv" >"$tmp/m2.csv" &&
	awk -F, 'NR == FNR { l[FNR] = $3; k[FNR] = $1 $2; next }
		{ n++; d = $3 - l[FNR]; d = d < 0 ? -d : d; if (k[FNR] != $1 $2 || d > 1e-4 * (l[FNR] + 1)) bad++ }
		END { exit !(n > 2 && n == FNR && !bad) }' "$tmp/m1.csv" "$tmp/m2.csv" &&
	grep -q "^2 ranks: parameters identical" "$tmp/m2.out"; then
	echo "ok: linformer_mlm on 2 ranks follows one process"
else
	fail "linformer_mlm on 2 ranks differs:"
	paste -d' ' "$tmp/m1.csv" "$tmp/m2.csv" | sed 's/^/  | /'
fi

# a batch of fewer rows than ranks (the last of an epoch: 1 review, 1 sequence): the rank
# with an empty share weighs nothing and draws no dropout masks, and the runs go on as one
# process's (the same CSV rows; losses within 1e-4 relative, "nan" only against "nan")
follows() { # follows ONE.csv MANY.csv: step,split,loss[,accuracy] rows
	awk -F, 'NR == FNR { l[FNR] = $3; a[FNR] = $4; k[FNR] = $1 $2; next }
		{ n++; d = $3 - l[FNR]; d = d < 0 ? -d : d
		  if (k[FNR] != $1 $2 || a[FNR] != $4) bad++
		  else if ($3 != l[FNR] && ($3 == "nan" || l[FNR] == "nan" || d > 1e-4 * (l[FNR] + 1))) bad++ }
		END { exit !(n > 2 && n == FNR && !bad) }' "$1" "$2"
}
E="--max-train 14 --max-test 8 --epochs 2 --batch 4 --threads 1" # 13 training reviews
# shellcheck disable=SC2086
"$prog" $E --log-dir "$tmp/e1" >"$tmp/e1.out" 2>&1 || fail "batch 4 of 13 reviews exited $?"
# shellcheck disable=SC2086
run 2 "$prog" $E --log-dir "$tmp/e2" >"$tmp/e2.out" 2>&1 ||
	fail "batch 4 of 13 reviews on 2 ranks exited $?: $(tail -5 "$tmp/e2.out")"
metrics "$tmp/e1" >"$tmp/e1.csv"
metrics "$tmp/e2" >"$tmp/e2.csv"
if grep -q "13 train," "$tmp/e1.out" && follows "$tmp/e1.csv" "$tmp/e2.csv"; then
	echo "ok: a last batch of 1 review on 2 ranks follows one process"
else
	fail "a last batch of 1 review on 2 ranks differs from one process:"
	paste -d' ' "$tmp/e1.csv" "$tmp/e2.csv" | sed 's/^/  | /'
fi
# the MLM, 2 batches a step: 49 sequences, a rank may predict no token of its share
awk 'BEGIN { split("cat dog bird fish horse", a, " ")
	for (i = 0; i < 61; i++) printf "the %s sat on the mat and the %s ate .\n", a[i % 5 + 1], a[(i + 2) % 5 + 1] }' \
	>"$tmp/corpus61.txt"
E="--model LC --n 32 --k 8 --dim 32 --heads 2 --ff 64 --corpus $tmp/corpus61.txt --val-fraction 0.2
	--batch 4 --accum 2 --seed 3 --threads 1 --steps 14 --lr 3e-3 --log-every 1"
# shellcheck disable=SC2086
"$mlm" $E --log-dir "$tmp/em1" >"$tmp/em1.out" 2>&1 || fail "linformer_mlm, 49 sequences, exited $?"
# shellcheck disable=SC2086
run 2 "$mlm" $E --log-dir "$tmp/em2" >"$tmp/em2.out" 2>&1 ||
	fail "linformer_mlm, 49 sequences, on 2 ranks exited $?: $(tail -5 "$tmp/em2.out")"
cut -d, -f1,3,4 "$tmp/em1/metrics.csv" >"$tmp/em1.csv"
cut -d, -f1,3,4 "$tmp/em2/metrics.csv" >"$tmp/em2.csv"
if grep -q "49 training" "$tmp/em1.out" && follows "$tmp/em1.csv" "$tmp/em2.csv"; then
	echo "ok: linformer_mlm with empty shares on 2 ranks follows one process"
else
	fail "linformer_mlm with empty shares on 2 ranks differs from one process:"
	paste -d' ' "$tmp/em1.csv" "$tmp/em2.csv" | sed 's/^/  | /'
fi

# bench/train_throughput on 2 ranks: the all-reduce timed as a phase; a batch the ranks
# cannot share is refused
tp=bench/train_throughput
TP="--models linformer --n 32 --k 8 --dim 16 --heads 2 --layers 1 --ff 32 --vocab 50 --reps 1
	--warmup 1 --threads 1 --sgemm-size 64"
# shellcheck disable=SC2086
if run 2 "$tp" $TP --batch 4 >"$tmp/tp.out" 2>&1 && grep -q "fwd / bwd / all-reduce / AdamW" "$tmp/tp.out" &&
	grep -q "^| linformer | 32 | 8 | 4 |" "$tmp/tp.out"; then
	echo "ok: train_throughput on 2 ranks"
else
	fail "train_throughput on 2 ranks: $(tail -5 "$tmp/tp.out")"
fi
# shellcheck disable=SC2086
run 3 "$tp" $TP --batch 2 >"$tmp/tp.out" 2>&1 && fail "a batch of 2 on 3 ranks ran"
grep -q "2 rows cannot be shared by 3 ranks" "$tmp/tp.out" ||
	fail "a batch of 2 on 3 ranks: $(tail -3 "$tmp/tp.out")"

# a rank that fails, or is killed, ends the job at once, naming the rank
for fault in "1:3" "0:2:kill"; do
	start=$(date +%s)
	# shellcheck disable=SC2086
	CFORMER_FAIL_AT=$fault run 2 "$prog" $SMALL --log-dir "$tmp/f" >"$tmp/f.out" 2>&1
	rc=$?
	took=$(($(date +%s) - start))
	rank=${fault%%:*}
	if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $took -lt 60 ] &&
		grep -Eq "rank $rank (of 2|with PID)" "$tmp/f.out"; then
		echo "ok: CFORMER_FAIL_AT=$fault ended the job in $took s (exit $rc), naming rank $rank"
	else
		fail "CFORMER_FAIL_AT=$fault: exit $rc after $took s:"
		sed 's/^/  | /' "$tmp/f.out"
	fi
done

[ $failures -eq 0 ] || exit 1
echo "test_dist: all passed"
