#!/bin/sh
# What stops a run before it does harm, in imdb_study and linformer_mlm (and for NaN
# gradients linformer_imdb): a run that cannot
# fit in memory is refused before any work, naming the estimate and what is available (and
# --no-mem-check overrides); an output directory that cannot be written is found at the start;
# a step with NaN gradients (CFORMER_NAN_GRAD_AT) stops the run without saving, the last
# checkpoint intact and resumable, or is skipped with --skip-nonfinite; a corrupt saved state
# (a negative AdamW second moment) is refused on --resume naming the tensor and element, and
# a state that turns non-finite is never saved over the last good one. Run from the build
# directory (as `make check`); IMDB_STUDY, LINFORMER_MLM, LINFORMER_IMDB and CKPT_POKE override
# the programs.
set -u
prog=${IMDB_STUDY:-study/imdb_study}
mlm=${LINFORMER_MLM:-examples/linformer_mlm}
imdb=${LINFORMER_IMDB:-examples/linformer_imdb}
ckpt_poke=${CKPT_POKE:-tests/ckpt_poke}
for p in "$prog" "$mlm" "$imdb" "$ckpt_poke"; do
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

# ---- a corrupt saved state: refused on --resume, never replacing the last good one ---------
# a negative second moment (what a bad disk or tool might leave) is refused by name, the
# file left as it was; a planted state whose next update overflows the weights (m huge,
# v 0) makes the next save fail rather than write them, the files as they were
poke() { "$ckpt_poke" "$@" >/dev/null || fail "ckpt_poke $*"; }
# shellcheck disable=SC2086
"$prog" $SMALL --log-dir "$tmp/neg" --stop-after 4 >/dev/null 2>&1 || fail "the run to corrupt"
cp -R "$tmp/neg" "$tmp/big"
poke "$tmp/neg/last.safetensors" optimizer.v.layers.0.attn.q_proj.bias 3 -1
cp "$tmp/neg/last.safetensors" "$tmp/neg.bak"
# shellcheck disable=SC2086
expect 1 "last.safetensors: tensor 'optimizer.v.layers.0.attn.q_proj.bias' holds 1 negative values of 32, the first at \[3\]: -1" \
	"$tmp/neg.out" "$prog" $SMALL --log-dir "$tmp/neg" --resume
cmp -s "$tmp/neg.bak" "$tmp/neg/last.safetensors" || fail "the refused state was overwritten"
poke "$tmp/big/last.safetensors" optimizer.m.layers.0.attn.q_proj.bias 3 3e38
poke "$tmp/big/last.safetensors" optimizer.v.layers.0.attn.q_proj.bias 3 0
cp "$tmp/big/last.safetensors" "$tmp/big.bak"
# shellcheck disable=SC2086
expect 1 "tensor 'layers.0.attn.q_proj.bias' holds 1 non-finite values (NaN or inf) of 32, the first at \[3\]: -inf; not saved" \
	"$tmp/big.out" "$prog" $SMALL --log-dir "$tmp/big" --resume
cmp -s "$tmp/big.bak" "$tmp/big/last.safetensors" && [ ! -e "$tmp/big/best.safetensors" ] ||
	fail "a non-finite state was saved"
# shellcheck disable=SC2086
"$mlm" $MLM --log-dir "$tmp/mneg" --stop-after 3 >/dev/null 2>&1 || fail "the MLM run to corrupt"
poke "$tmp/mneg/last.safetensors" optimizer.v.layers.0.norm1.weight 0 -0.5
cp "$tmp/mneg/last.safetensors" "$tmp/mneg.bak"
# shellcheck disable=SC2086
expect 1 "tensor 'optimizer.v.layers.0.norm1.weight' holds 1 negative values of 32, the first at \[0\]: -0.5" \
	"$tmp/mneg.out" "$mlm" $MLM --log-dir "$tmp/mneg" --resume --stop-after 5
cmp -s "$tmp/mneg.bak" "$tmp/mneg/last.safetensors" || fail "the refused MLM state was overwritten"

echo "$failures failure(s)"
[ "$failures" -eq 0 ]
