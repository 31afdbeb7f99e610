#!/bin/sh
# tools/attention_spectrum on tiny checkpoints trained here: a Transformer's curves (one per
# layer and head, n points each, rising to 1 within [0, 1]), the heatmap table and CSV, the
# same output twice for the same seed, a Linformer's n x k matrices (k points), also at n > 1,024
# where they come in blocks of rows, and the errors:
# no checkpoint, a missing file, another vocabulary, no review long enough, a bad flag. Run
# from the build directory (as `make check` does).
set -u
tool=tools/attention_spectrum mlm=examples/linformer_mlm
for p in "$tool" "$mlm"; do
	if [ ! -x "$p" ]; then
		echo "test_attention_spectrum: $p not built" >&2
		exit 99
	fi
done
srcdir=${srcdir:-.}
prog=$tool test_name=attention_spectrum
. "$srcdir/tests/lib.sh"

# check_curves CSV ROWS COLUMNS: ROWS points of COLUMNS curves, each non-decreasing within
# [0, 1] and ending at 1.
check_curves() {
	awk -F, -v rows="$2" -v cols="$3" '
		NR == 1 { if (NF != cols + 1 || $1 != "index") bad = "header " $0; next }
		{
			if (NF != cols + 1 || $1 != NR - 1) bad = "row " NR ": " $0
			for (c = 2; c <= NF; c++) {
				if ($c < 0 || $c > 1.000001 || (NR > 2 && $c < prev[c] - 1e-9))
					bad = "row " NR " column " c ": " $c
				prev[c] = $c
			}
		}
		END {
			if (NR != rows + 1) bad = bad " " NR - 1 " rows, want " rows
			for (c = 2; c <= cols + 1; c++)
				if (prev[c] < 0.999999) bad = bad " column " c " ends at " prev[c]
			if (bad != "") { print bad; exit 1 }
		}' "$1" || fail "$1: not $3 rising curves of $2 points"
}

small="--dim 16 --heads 2 --ff 32 --steps 4 --batch 8 --max-docs 100 --threads 1"
# shellcheck disable=SC2086 # the flag list is meant to split
"$mlm" --model transformer --n 32 $small --log-dir "$tmp/tf" >"$tmp/tf.out" 2>&1 ||
	fail "training the Transformer: $(cat "$tmp/tf.out")"
# shellcheck disable=SC2086
"$mlm" --model LC --n 32 --k 8 $small --log-dir "$tmp/lin" >"$tmp/lin.out" 2>&1 ||
	fail "training the Linformer: $(cat "$tmp/lin.out")"

spec="--sequences 6 --rank 8 --threads 1"
# shellcheck disable=SC2086
expect 0 "| 2 (32) |" --checkpoint "$tmp/tf/best.safetensors" $spec --out "$tmp/a"
check_curves "$tmp/a/spectrum.csv" 32 4
[ "$(sed -n 1p "$tmp/a/at_rank.csv")" = "layer,head,keys,value" ] &&
	[ "$(wc -l <"$tmp/a/at_rank.csv")" -eq 5 ] ||
	fail "at_rank.csv: $(cat "$tmp/a/at_rank.csv")"
# the heatmap is the curves' value at index 8
want=$(awk -F, 'NR == 9 { print $2 }' "$tmp/a/spectrum.csv")
got=$(awk -F, 'NR == 2 { print $4 }' "$tmp/a/at_rank.csv")
[ "$want" = "$got" ] || fail "layer 1 head 1 at index 8: $got in at_rank.csv, $want in spectrum.csv"
grep -q "spectrum.csv" "$tmp/a/spectrum.gp" || fail "spectrum.gp does not plot spectrum.csv"
# shellcheck disable=SC2086
"$tool" --checkpoint "$tmp/tf/best.safetensors" $spec --out "$tmp/b" >/dev/null 2>&1 &&
	cmp -s "$tmp/a/spectrum.csv" "$tmp/b/spectrum.csv" || fail "a second run differs"

# the Linformer's P is n x k: k points a curve
# shellcheck disable=SC2086
expect 0 "| 2 (8) |" --checkpoint "$tmp/lin/best.safetensors" $spec --out "$tmp/c"
check_curves "$tmp/c/spectrum.csv" 8 4

# at n > 1,024 a projected layer's P comes in blocks of query rows (1,024 + 64 here), gathered
# into one matrix a layer: a review of 1,250 tokens, written here
mkdir -p "$tmp/long/test/pos" "$tmp/long/test/neg"
awk 'BEGIN { for (i = 0; i < 250; i++) printf "the film was good and "; print "" }' \
	>"$tmp/long/test/pos/0_9.txt"
echo "too short" >"$tmp/long/test/neg/0_1.txt"
# shellcheck disable=SC2086
"$mlm" --model LC --n 1088 --k 8 $small --log-dir "$tmp/long_lin" \
	>"$tmp/long_lin.out" 2>&1 || fail "training the n 1088 Linformer: $(cat "$tmp/long_lin.out")"
expect 0 "| 2 (8) |" --checkpoint "$tmp/long_lin/best.safetensors" --data "$tmp/long" \
	--sequences 1 --rank 8 --threads 1 --out "$tmp/e"
check_curves "$tmp/e/spectrum.csv" 8 4

# ---- errors ---------------------------------------------------------------------------------
expect 1 "--checkpoint: a checkpoint is required" --out "$tmp/d"
expect 1 "$tmp/none.safetensors" --checkpoint "$tmp/none.safetensors" --out "$tmp/d"
expect 1 "18 tokens, the checkpoint's model has 30522" --checkpoint "$tmp/tf/best.safetensors" \
	--vocab "$srcdir/tests/data/mlm_vocab_tiny.txt" --out "$tmp/d"
expect 1 "no review of 32 tokens or more" --checkpoint "$tmp/tf/best.safetensors" \
	--data "$srcdir/tests/data/imdb_tiny" --out "$tmp/d"
expect 1 "--rank" --checkpoint "$tmp/tf/best.safetensors" --rank 0
[ ! -e "$tmp/d/spectrum.csv" ] || fail "a failed run wrote spectrum.csv"

finish
