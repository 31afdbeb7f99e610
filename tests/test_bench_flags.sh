#!/bin/sh
# The benchmarks' model flags are the examples' (models/model_config_fields.h, through
# examples/common/model_flags): bench/train_throughput and bench/linformer_table list them
# with the field list's help and choices, refuse values outside its ranges naming the flag,
# and build the model they name. Run from the build directory (as `make check`).
set -u
tp=${TRAIN_THROUGHPUT:-bench/train_throughput}
lt=${LINFORMER_TABLE:-bench/linformer_table}
for p in "$tp" "$lt"; do
	if [ ! -x "$p" ]; then
		echo "test_bench_flags: $p not built" >&2
		exit 99
	fi
done
test_name=bench_flags
. "${srcdir:-.}/tests/lib.sh"

prog=$tp
expect 0 "--attn-dropout P  *dropout of attention probabilities (default: 0)" --help
expect 0 "--sharing none|headwise|kv|layerwise" --help
expect 0 "--activation relu|gelu|gelu_tanh|silu" --help
expect 1 "train_throughput: --dropout: expected a number in \[0, 1), got '1'" --dropout 1
expect 1 "train_throughput: --sharing: expected one of none|headwise|kv|layerwise" --sharing all
expect 1 "train_throughput: --heads: 3 heads do not divide --dim 256" --heads 3
# the flags reach the model: the header line and a step of it
expect 0 "dim 16, 2 heads, 2 layers, ff 32 (SwiGLU), batch 2, dropout 0.25, attention dropout 0.125" \
	--n 32 --models conv-linformer --k 8 --dim 16 --heads 2 --layers 2 --ff 32 --swiglu \
	--dropout 0.25 --attn-dropout 0.125 --batch 2 --vocab 50 --reps 1 --warmup 0 \
	--threads 1 --sgemm-size 64
grep -q "^| conv-linformer | 32 | 8 | 2 |" "$tmp/expect.out" ||
	fail "train_throughput: no conv-linformer row at n 32, k 8"

prog=$lt
expect 0 "--shared-kv-head  *one key/value head shared by all query heads" --help
expect 1 "linformer_table: --activation: expected one of relu|gelu|gelu_tanh|silu, got 'tanh'" \
	--activation tanh
expect 1 "linformer_table: --layers: expected an integer in \[1, 64\]" --layers 65
expect 0 "dim 16, 2 heads (one at a time), 3 layers, ff 32, vocab 50" \
	--n 64 --k 16 --models linformer --batches 1 --dim 16 --heads 2 --layers 3 --ff 32 \
	--vocab 50 --reps 1 --threads 1 --sgemm-size 64
grep -q "^| linformer | 64 | 16 | 1 |.*| ok |" "$tmp/expect.out" ||
	fail "linformer_table: no linformer row at n 64, k 16"
finish
