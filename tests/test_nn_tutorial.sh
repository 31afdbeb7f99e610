#!/bin/sh
# The nn tutorial end to end: it trains to the accuracy bound of --check, its checkpoint
# rebuilds a model that predicts the same, and each error path exits 1 with a clear message.
# Run from the build directory (as `make check` does); NN_TUTORIAL overrides the program.
set -u
prog=${NN_TUTORIAL:-examples/nn_tutorial}
steps=${NN_TUTORIAL_STEPS:-300}
if [ ! -x "$prog" ]; then
	echo "test_nn_tutorial: $prog not built" >&2
	exit 99
fi
test_name=nn_tutorial
. "${srcdir:-.}/tests/lib.sh"
# the bundled sentences of the source tree (installed, the program finds them by itself)
CFORMER_DATA_DIR=${CFORMER_DATA_DIR:-${srcdir:-.}/examples/data}
export CFORMER_DATA_DIR

# Training reaches the bound; the checkpoint reloads into a model that agrees.
expect 0 "held-out loss" --check --steps "$steps" --threads 2
expect 0 "48/48 held-out predictions agree" --check --steps "$steps" --save "$tmp/model.safetensors"
[ -s "$tmp/model.safetensors" ] || { echo "FAIL: no checkpoint written"; failures=$((failures + 1)); }
[ ! -e "$tmp/model.safetensors.tmp" ] || { echo "FAIL: temporary file left"; failures=$((failures + 1)); }
# --check can fail: one step (learning rate 0 in warmup) does not lower the loss.
expect 1 "check failed" --check --steps 1

# Errors: bad flags, missing or malformed data, an unwritable checkpoint path.
expect 1 "usage:" --frobnicate
expect 1 "needs a positive integer" --steps 0
expect 1 "needs a positive integer" --steps 12x
expect 1 "unknown flag or missing value" --data
expect 1 "cannot open $tmp/missing.tsv" --data "$tmp/missing.tsv"
mkdir "$tmp/data" && printf 'en\tOne.\nfr\tDeux.\nes\tTres.\nde\tVier.\nen\tFive.\n' >"$tmp/data/langid.tsv"
CFORMER_DATA_DIR=$tmp/data expect 0 "5 sentences (4 train, 1 held out) from $tmp/data/langid.tsv" --steps 1
printf 'en\tHello there.\nfr Bonjour sans tabulation.\n' >"$tmp/notab.tsv"
expect 1 "notab.tsv:2: no TAB after the label" --data "$tmp/notab.tsv"
printf 'en\tHello there.\n\nxx\tUnknown language.\n' >"$tmp/label.tsv"
expect 1 "label.tsv:3: unknown label" --data "$tmp/label.tsv"
printf 'de\t\n' >"$tmp/empty.tsv"
expect 1 "empty.tsv:1: empty sentence" --data "$tmp/empty.tsv"
printf 'en\tOne.\nfr\tDeux.\n' >"$tmp/short.tsv"
expect 1 "need at least 5 examples, got 2" --data "$tmp/short.tsv"
expect 1 "saving the checkpoint" --steps 1 --save "$tmp/no/such/dir/model.safetensors"

finish
