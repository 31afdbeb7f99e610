#!/bin/sh
# imdb_study killed (SIGKILL) at every point of every checkpoint save of a run with a
# moving average (CFORMER_CRASH_AT=k: before the temporary file exists, with its header
# written, complete but not renamed, renamed), then resumed: each time the run ends as the
# uninterrupted one, byte for byte (test line, last.safetensors, best.safetensors and
# last-ema.safetensors, which a resume saves again when a kill left it behind
# last.safetensors), with no temporary file of the killed saves left; or, killed before its
# first checkpoint, --resume says so and a fresh start does. Run from the build directory
# (as `make check`); IMDB_STUDY overrides the program.
set -u
prog=${IMDB_STUDY:-study/imdb_study}
if [ ! -x "$prog" ]; then
	echo "test_crash_resume: $prog not built" >&2
	exit 99
fi
test_name=crash_resume
. "${srcdir:-.}/tests/lib.sh"
RUN="--max-train 48 --max-test 24 --val-fraction 0.25 --tokenizer byte --n 64 --k 16 --dim 32
	--heads 2 --layers 2 --ff 64 --batch 4 --accum 2 --threads 1 --epochs 2 --lr 3e-3
	--ema 0.5"
# shellcheck disable=SC2086
"$prog" $RUN --log-dir "$tmp/ref" >"$tmp/ref.out" 2>&1 || {
	echo "FAIL: the uninterrupted run:"
	cat "$tmp/ref.out"
	exit 1
}
want=$(grep '^test: ' "$tmp/ref.out")
k=1
while [ $k -le 200 ]; do
	d="$tmp/k$k"
	# shellcheck disable=SC2086
	CFORMER_CRASH_AT=$k "$prog" $RUN --log-dir "$d" >"$d.out" 2>&1
	rc=$?
	[ $rc -eq 0 ] && break # past the run's last save point
	if [ $rc -ne 137 ]; then
		fail "crash point $k: exit $rc, not a kill: $(tail -2 "$d.out")"
		break
	fi
	# shellcheck disable=SC2086
	"$prog" $RUN --log-dir "$d" --resume >"$d.r.out" 2>&1
	rc=$?
	if [ $rc -ne 0 ] && grep -q "last.safetensors: no saved state" "$d.r.out"; then
		# shellcheck disable=SC2086
		"$prog" $RUN --log-dir "$d" >"$d.r.out" 2>&1 # killed before the first checkpoint
		rc=$?
		how="started again"
	else
		how="resumed"
	fi
	if [ $rc -ne 0 ]; then
		fail "crash point $k: $how run exited $rc: $(tail -3 "$d.r.out")"
	elif [ "$(grep '^test: ' "$d.r.out")" != "$want" ]; then
		fail "crash point $k: $how run ends with '$(grep '^test: ' "$d.r.out")', not '$want'"
	elif ! cmp -s "$tmp/ref/last.safetensors" "$d/last.safetensors" ||
		! cmp -s "$tmp/ref/best.safetensors" "$d/best.safetensors"; then
		fail "crash point $k: $how run's checkpoints differ from the uninterrupted run's"
	elif ! cmp -s "$tmp/ref/last-ema.safetensors" "$d/last-ema.safetensors"; then
		fail "crash point $k: $how run's last-ema.safetensors differs from the uninterrupted" \
			"run's (step $(head -c 4096 "$d/last-ema.safetensors" |
				grep -a -o '"step":"[0-9]*"'), last.safetensors" \
			"$(head -c 4096 "$d/last.safetensors" | grep -a -o '"step":"[0-9]*"'))"
	elif ls "$d"/*.tmp.* >/dev/null 2>&1; then
		fail "crash point $k: temporary files left after the $how run: $(ls "$d"/*.tmp.*)"
	else
		echo "ok: killed at save point $k, $how: the same run"
	fi
	k=$((k + 1))
done
[ $k -gt 12 ] || fail "only $((k - 1)) save points: the run saved less than expected"
echo "$((k - 1)) save points, $failures failure(s)"
[ "$failures" -eq 0 ]
