#!/bin/sh
# The char LM end to end: a short training run on the bundled text lowers the validation loss
# and saves a checkpoint; the seeded sample after reloading it equals the one of the run, with
# cached keys and values and by rerunning the window; a run stopped by SIGTERM and resumed
# ends with the uninterrupted run's checkpoint, byte for byte; each error path exits 1 with a
# clear message. Run from the build directory (as `make check` does); CHAR_LM overrides the
# program.
set -u
prog=${CHAR_LM:-examples/char_lm}
if [ ! -x "$prog" ]; then
	echo "test_char_lm: $prog not built" >&2
	exit 99
fi
test_name=char_lm
. "${srcdir:-.}/tests/lib.sh"
CFORMER_DATA_DIR=${CFORMER_DATA_DIR:-${srcdir:-.}/examples/data}
export CFORMER_DATA_DIR

# a small model, so that each run takes a moment
small="--threads 1 --dim 32 --heads 2 --layers 1 --context 32 --batch 8"
ckpt=$tmp/lm.safetensors
# the sample between its two '---' lines
sample_of() {
	sed -n '/^--- sample/,/^--- [0-9]* bytes/p' "$1" | sed '1d;$d'
}

# Training on the bundled text: the validation loss falls from about ln 256 = 5.5.
# shellcheck disable=SC2086
expect 0 "step    150  validation loss" $small --steps 150 --eval-every 50 --checkpoint "$ckpt" \
	--sample 200 --seed 3
cp "$tmp/expect.out" "$tmp/train.out"
first=$(sed -n 's/^step      0  validation loss \([0-9.]*\)$/\1/p' "$tmp/train.out")
last=$(sed -n 's/^step    150  validation loss \([0-9.]*\) .*/\1/p' "$tmp/train.out")
if [ -n "$first" ] && [ -n "$last" ] && awk "BEGIN { exit !($first > 5 && $last < $first - 2) }"; then
	echo "ok: validation loss $first -> $last"
else
	fail "validation loss '$first' -> '$last' (want from above 5 to 2 lower)"
fi
grep -q "coast.txt, 8797 bytes (7918 to train, 879 to validate)" "$tmp/train.out" ||
	fail "the bundled text was not read whole"
[ -s "$ckpt" ] || fail "no checkpoint written"
ls "$tmp" | grep -q 'tmp\.' && fail "temporary file left: $(ls "$tmp")"
[ "$(sample_of "$tmp/train.out" | wc -c)" -eq 205 ] || fail "the sample is not 'The ' + 200 bytes"

# The checkpoint alone: the same seeded sample, with the cache and by rerunning the window.
expect 0 "loaded $ckpt at step 150" --generate --checkpoint "$ckpt" --sample 200 --seed 3
sample_of "$tmp/train.out" >"$tmp/want.txt"
sample_of "$tmp/expect.out" >"$tmp/got.txt"
cmp -s "$tmp/want.txt" "$tmp/got.txt" && echo "ok: the reloaded sample is the run's" ||
	fail "the reloaded sample differs: $(cat "$tmp/got.txt")"
# past the context of 32 the window moves on, and the cache is read again
expect 0 "each rerunning the window" --generate --checkpoint "$ckpt" --sample 200 --seed 3 --no-cache
sample_of "$tmp/expect.out" >"$tmp/nocache.txt"
cmp -s "$tmp/want.txt" "$tmp/nocache.txt" && echo "ok: the uncached sample is the cached one" ||
	fail "the uncached sample differs: $(cat "$tmp/nocache.txt")"
expect 0 "keys and values cached" --generate --checkpoint "$ckpt" --sample 200 --seed 4
sample_of "$tmp/expect.out" >"$tmp/seed4.txt"
cmp -s "$tmp/want.txt" "$tmp/seed4.txt" && fail "another seed gave the same sample"
expect 0 "temperature 0, top-k 20" --generate --checkpoint "$ckpt" --sample 50 --temperature 0 \
	--prompt "The light"

# Stopped by SIGTERM and resumed: the uninterrupted run's checkpoint, byte for byte.
run="$prog $small --steps 1000 --eval-every 50 --sample 0"
$run --checkpoint "$tmp/full.safetensors" >"$tmp/full.out" 2>&1 || fail "the full run failed"
$run --checkpoint "$tmp/part.safetensors" >"$tmp/part.out" 2>&1 &
pid=$!
i=0
while ! grep -q '^step     50 ' "$tmp/part.out" && [ $i -lt 600 ]; do
	sleep 0.1
	i=$((i + 1))
done
kill -TERM "$pid"
wait "$pid"
rc=$?
at=$(sed -n 's/^stopped at step \([0-9]*\): saved .*/\1/p' "$tmp/part.out")
if [ "$rc" -eq 143 ] && [ -n "$at" ] && [ "$at" -lt 1000 ]; then
	echo "ok: SIGTERM at step $at exits 143 and saves"
else
	fail "SIGTERM: exit $rc (want 143), step '$at':"
	tail -n 3 "$tmp/part.out" | sed 's/^/  | /'
fi
$run --checkpoint "$tmp/part.safetensors" --resume >"$tmp/resume.out" 2>&1 || fail "resume failed"
grep -q "^resuming from $tmp/part.safetensors at step $at" "$tmp/resume.out" ||
	fail "no resume line: $(head -n 2 "$tmp/resume.out")"
cmp -s "$tmp/full.safetensors" "$tmp/part.safetensors" &&
	echo "ok: the resumed run ends with the uninterrupted run's checkpoint" ||
	fail "the resumed run's checkpoint differs from the uninterrupted run's"

# Errors: bad flags, missing or unusable text, checkpoints that do not fit.
expect 1 "unknown flag" --frobnicate
expect 1 "--steps" --steps -1
expect 1 "--context" --context 1
expect 1 "--generate: is not for use with --resume" --generate --resume
expect 1 "heads 3 must divide dim 32" --dim 32 --heads 3 --steps 1
expect 1 "cannot open $tmp/missing.txt" --text "$tmp/missing.txt"
: >"$tmp/empty.txt"
expect 1 "empty.txt is empty" --text "$tmp/empty.txt"
printf 'A short text.\n' >"$tmp/short.txt"
expect 1 "14 bytes are too few for --context 64" --text "$tmp/short.txt"
expect 1 "reading the checkpoint" --generate --checkpoint "$tmp/none.safetensors"
expect 1 "--dim: 64 differs from the checkpoint's 32" --resume --checkpoint "$ckpt" --dim 64
printf 'not a checkpoint' >"$tmp/bad.safetensors"
expect 1 "bad.safetensors" --generate --checkpoint "$tmp/bad.safetensors"
# shellcheck disable=SC2086
expect 1 "saving the checkpoint" $small --steps 1 --checkpoint "$tmp/no/such/dir/lm.safetensors"

finish
