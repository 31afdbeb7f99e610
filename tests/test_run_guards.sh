#!/bin/sh
# What stops a run before it does harm, in imdb_study and linformer_mlm (and for NaN
# gradients linformer_imdb): a run that cannot
# fit in memory is refused before any work, naming the estimate and what is available (and
# --no-mem-check overrides); an output directory that cannot be written is found at the start;
# a step with NaN gradients (CFORMER_NAN_GRAD_AT) stops the run without saving, the last
# checkpoint intact and resumable, or is skipped with --skip-nonfinite. Run from the build
# directory (as `make check`); IMDB_STUDY, LINFORMER_MLM and LINFORMER_IMDB override the
# programs.
set -u
prog=${IMDB_STUDY:-study/imdb_study}
mlm=${LINFORMER_MLM:-examples/linformer_mlm}
imdb=${LINFORMER_IMDB:-examples/linformer_imdb}
for p in "$prog" "$mlm" "$imdb"; do
	if [ ! -x "$p" ]; then
		echo "test_run_guards: $p not built" >&2
		exit 99
	fi
done
test_name=run_guards
. "${srcdir:-.}/tests/lib.sh"
# expect STATUS PATTERN OUT CMD...: CMD exits STATUS and its output (in OUT) holds PATTERN.
expect() {
	want=$1 pattern=$2 out=$3
	shift 3
	"$@" >"$out" 2>&1
	rc=$?
	if [ "$rc" -ne "$want" ] || ! grep -q -- "$pattern" "$out"; then
		fail "$* exited $rc (want $want), output lacks '$pattern':"
		sed 's/^/  | /' "$out"
	else
		echo "ok: $pattern"
	fi
}
SMALL="--max-train 48 --max-test 24 --val-fraction 0.25 --tokenizer byte --n 64 --k 16
	--dim 32 --heads 2 --layers 2 --ff 64 --batch 4 --accum 2 --threads 1 --epochs 3 --lr 3e-3"
MLM="--max-docs 40 --n 64 --k 16 --dim 32 --heads 2 --layers 2 --ff 64 --batch 4 --epochs 2
	--tokenizer byte --threads 1"

# ---- memory: refused before any work, with the estimate and what is available -------------
expect 1 "needs about .* GiB (the model .* GiB, the tokenized text .* GiB) but the machine has" \
	"$tmp/mem.out" "$prog" --max-train 40 --tokenizer byte --n 1048576 --k 128 --dim 32 \
	--heads 2 --ff 64 --log-dir "$tmp/mem"
grep -q -- "--no-mem-check" "$tmp/mem.out" || fail "the memory message does not name --no-mem-check"
[ ! -e "$tmp/mem/metrics.csv" ] || fail "a refused run left a log behind"
expect 1 "needs about" "$tmp/mem2.out" "$mlm" --max-docs 40 --n 1048576 --k 128 --dim 32 \
	--heads 2 --ff 64 --tokenizer byte --log-dir "$tmp/mem2"
# a run that fits is not refused, nor one told not to check
# shellcheck disable=SC2086
expect 0 "test: loss" "$tmp/fits.out" "$prog" $SMALL --steps 2 --no-mem-check --log-dir "$tmp/fits"

# ---- an output directory that cannot be written: found at the start -------------------------
# shellcheck disable=SC2086
expect 1 "--checkpoint-dir: cannot write in /proc" "$tmp/ro.out" "$prog" $SMALL \
	--checkpoint-dir /proc --log-dir "$tmp/ro"
grep -q "^step " "$tmp/ro.out" && fail "an unwritable --checkpoint-dir was found after training"
touch "$tmp/file"
# shellcheck disable=SC2086
expect 1 "--log-dir: $tmp/file is not a directory" "$tmp/nd.out" "$mlm" $MLM \
	--log-dir "$tmp/file/sub"

# ---- NaN gradients: the run stops, the last checkpoint intact; or the step is skipped ------
# shellcheck disable=SC2086
"$prog" $SMALL --log-dir "$tmp/ref" >"$tmp/ref.out" 2>&1 || fail "the reference run failed"
# shellcheck disable=SC2086
"$prog" $SMALL --log-dir "$tmp/at5" --stop-after 5 >/dev/null 2>&1
# shellcheck disable=SC2086
CFORMER_NAN_GRAD_AT=7 expect 1 "step 7: the gradients are not finite (NaN or inf); stopped without saving: $tmp/nan/last.safetensors holds step 5" \
	"$tmp/nan.out" "$prog" $SMALL --log-dir "$tmp/nan"
cmp -s "$tmp/at5/last.safetensors" "$tmp/nan/last.safetensors" ||
	fail "the last good checkpoint changed when the run stopped"
# shellcheck disable=SC2086
"$prog" $SMALL --log-dir "$tmp/nan" --resume >"$tmp/nan2.out" 2>&1
if [ "$(grep '^test: ' "$tmp/nan2.out")" = "$(grep '^test: ' "$tmp/ref.out")" ]; then
	echo "ok: resumed from the last good state, the run ends as the uninterrupted one"
else
	fail "resumed after the stop: '$(grep '^test: ' "$tmp/nan2.out")', want '$(grep '^test: ' "$tmp/ref.out")'"
fi
# shellcheck disable=SC2086
CFORMER_NAN_GRAD_AT=7 expect 0 "1 of 15 steps skipped: their loss or gradients were not finite" \
	"$tmp/skip.out" "$prog" $SMALL --skip-nonfinite --log-dir "$tmp/skip"
# shellcheck disable=SC2086
CFORMER_NAN_GRAD_AT=2 expect 1 "step 2: the gradients are not finite" "$tmp/mnan.out" \
	"$mlm" $MLM --log-dir "$tmp/mnan"
# shellcheck disable=SC2086
CFORMER_NAN_GRAD_AT=2 expect 0 "1 steps skipped" "$tmp/mskip.out" "$mlm" $MLM --skip-nonfinite \
	--log-dir "$tmp/mskip"
# linformer_imdb (4 steps an epoch, saved at its end): stopped at step 6, step 4 kept, in a
# run from the start and in one resumed at step 4
IMDB="--max-train 14 --max-test 8 --epochs 2 --batch 4 --threads 1"
# shellcheck disable=SC2086
"$imdb" $IMDB --log-dir "$tmp/i4" --stop-after 4 >/dev/null 2>&1 || fail "linformer_imdb --stop-after 4"
cp "$tmp/i4/last.safetensors" "$tmp/at4.safetensors"
for how in "" --resume; do
	d=$tmp/i4
	[ -n "$how" ] || d=$tmp/inan
	# shellcheck disable=SC2086
	CFORMER_NAN_GRAD_AT=6 expect 1 "step 6: the gradients are not finite (NaN or inf); stopped without saving: $d/last.safetensors holds step 4" \
		"$tmp/inan.out" "$imdb" $IMDB --log-dir "$d" $how
	cmp -s "$tmp/at4.safetensors" "$d/last.safetensors" ||
		fail "linformer_imdb $how: the last good checkpoint changed when the run stopped"
done

echo "$failures failure(s)"
[ "$failures" -eq 0 ]
