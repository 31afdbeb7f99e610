# Shared by the shell tests, sourced after setting test_name and prog (the program
# expect runs): a temporary directory $tmp removed at exit, fail, expect and finish.
# shellcheck shell=sh
tmp=$(mktemp -d "${TMPDIR:-/tmp}/$test_name.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
failures=0

# fail MESSAGE: count a failure and say what failed.
fail() {
	echo "FAIL: $*"
	failures=$((failures + 1))
}

# expect STATUS PATTERN ARGS...: run $prog ARGS and check its exit status (left in rc) and that
# its output (stdout and stderr, left in $tmp/expect.out) contains PATTERN.
expect() {
	want=$1 pattern=$2
	shift 2
	"$prog" "$@" >"$tmp/expect.out" 2>&1
	rc=$?
	if [ "$rc" -ne "$want" ] || ! grep -q -- "$pattern" "$tmp/expect.out"; then
		fail "$prog $* exited $rc (want $want), output lacks '$pattern' or has:"
		sed 's/^/  | /' "$tmp/expect.out"
	else
		echo "ok: $prog $*"
	fi
}

# expect_full ARGS...: $prog ARGS with its standard output on a full disk (/dev/full) exits 1
# and says so on stderr (left in $tmp/full.out); skipped where there is no /dev/full.
expect_full() {
	if [ ! -w /dev/full ]; then
		echo "skip: no /dev/full for $prog $*"
		return
	fi
	"$prog" "$@" >/dev/full 2>"$tmp/full.out"
	rc=$?
	if [ "$rc" -ne 1 ] || ! grep -q "writing the standard output: " "$tmp/full.out"; then
		fail "$prog $* >/dev/full exited $rc (want 1 and an error line):"
		sed 's/^/  | /' "$tmp/full.out"
	else
		echo "ok: $prog $* >/dev/full"
	fi
}

# sigterm_run CSV ROWS PROGRAM ARGS...: run the program (not a shell function; its output in
# $tmp/sigterm.out) until CSV has ROWS lines (at most 60 s), send it SIGTERM and leave its exit
# status in rc.
sigterm_run() {
	csv=$1 rows=$2
	shift 2
	"$@" >"$tmp/sigterm.out" 2>&1 &
	pid=$!
	i=0
	while { [ ! -f "$csv" ] || [ "$(wc -l <"$csv")" -lt "$rows" ]; } && [ $i -lt 600 ]; do
		sleep 0.1
		i=$((i + 1))
	done
	kill -TERM "$pid"
	wait "$pid"
	rc=$?
}

# sigterm_check TOTAL CSV ROWS PROGRAM ARGS...: a training run of TOTAL steps sent SIGTERM (as
# sigterm_run) saves and exits 143 (128 + SIGTERM), not 0, so a script tells it from a finished
# run, and the command it prints resumes at the step it stopped at.
sigterm_check() {
	total=$1
	shift
	sigterm_run "$@"
	at=$(sed -n "s/^interrupted at step \([0-9]*\) of $total: saved .*/\1/p" "$tmp/sigterm.out")
	resume=$(sed -n 's/^to resume: //p' "$tmp/sigterm.out")
	if [ "$rc" -eq 143 ] && [ -n "$at" ] &&
		sh -c "$resume --stop-after $((at + 1))" >"$tmp/sigterm2.out" 2>&1 &&
		grep -q "^resumed at step $at" "$tmp/sigterm2.out"; then
		echo "ok: SIGTERM at step $at exits 143 and the run resumes"
	else
		fail "SIGTERM: exit $rc (want 143), step '$at':"
		cat "$tmp/sigterm.out" "$tmp/sigterm2.out" 2>&1 | tail -n 6 | sed 's/^/  | /'
	fi
}

# finish: the summary line, and exit 1 if anything failed.
finish() {
	if [ "$failures" -ne 0 ]; then
		echo "$failures failure(s)"
		exit 1
	fi
	echo "all $test_name checks passed"
	exit 0
}
