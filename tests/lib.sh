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

# sigterm_run CSV ROWS PROGRAM ARGS...: run the program (not a shell function; output in $tmp/sigterm.out) until CSV has ROWS
# lines (at most 60 s), send it SIGTERM and leave its exit status in rc.
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

# finish: the summary line, and exit 1 if anything failed.
finish() {
	if [ "$failures" -ne 0 ]; then
		echo "$failures failure(s)"
		exit 1
	fi
	echo "all $test_name checks passed"
	exit 0
}
