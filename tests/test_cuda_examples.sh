#!/bin/sh
# imdb_study, linformer_mlm and linformer_imdb with --device cuda on small slices of the
# bundled data: the GPU run follows the CPU run of the same seed (losses and test accuracy), a
# checkpoint trained on the GPU predicts the same probabilities on the CPU, a run resumes on
# the other device, and the pretraining chain (an MLM, a Linformer grown from it, the
# classifier fine-tuned from that) tests as on the CPU. Skipped (77) without a GPU. Run from
# the build directory, as `make check`.
set -u
prog=${IMDB_STUDY:-study/imdb_study}
mlm=${LINFORMER_MLM:-examples/linformer_mlm}
imdb=${LINFORMER_IMDB:-examples/linformer_imdb}
for p in "$prog" "$mlm" "$imdb"; do
	if [ ! -x "$p" ]; then
		echo "test_cuda_examples: $p not built" >&2
		exit 99
	fi
done
test_name=cuda_examples
. "${srcdir:-.}/tests/lib.sh"

if ! "$prog" --device cuda --max-train 8 --max-test 4 --steps 1 --n 32 --k 8 --dim 16 --heads 2 \
		--layers 2 --ff 32 --tokenizer byte --batch 4 >"$tmp/probe.out" 2>&1; then
	if grep -Eq "no CUDA device|cuda is not compiled in" "$tmp/probe.out"; then
		echo "test_cuda_examples: SKIP: $(cat "$tmp/probe.out")"
		exit 77
	fi
	echo "FAIL: imdb_study --device cuda:"
	cat "$tmp/probe.out"
	exit 1
fi

BASE="--max-train 48 --max-test 24 --val-fraction 0.25 --tokenizer byte --n 64 --k 16
	--dim 32 --heads 2 --layers 2 --ff 64 --batch 4 --accum 2 --threads 1 --log-every 1
	--epochs 2 --lr 3e-3"
for dev in cpu cuda; do
	# shellcheck disable=SC2086
	"$prog" $BASE --device $dev --log-dir "$tmp/$dev" >"$tmp/$dev.out" 2>&1 ||
		fail "training on $dev: $(tail -3 "$tmp/$dev.out")"
done
# the same losses step by step (f32 on both sides: 1e-3 relative over 10 steps)
if ! awk -F, 'NR == FNR { if ($3 == "train") c[$1] = $4; next }
	$3 == "train" { n++; d = c[$1] - $4; if (d < 0) d = -d
		if (!($1 in c) || d > 1e-3 * (c[$1] > 0 ? c[$1] : 1)) bad++ }
	END { exit !(n == 10 && !bad) }' "$tmp/cpu/metrics.csv" "$tmp/cuda/metrics.csv"; then
	fail "training losses differ between the devices:"
	paste -d' ' "$tmp/cpu/metrics.csv" "$tmp/cuda/metrics.csv" | sed 's/^/  | /'
else
	echo "ok: the GPU run's losses follow the CPU run's"
fi
# close: the test lines of two runs ("test: loss L accuracy A (..)"), L within 2e-3.
close() {
	a=$(grep '^test: ' "$2") b=$(grep '^test: ' "$3")
	if echo "$a $b" | awk '{ d = $3 - $10; exit !($5 == $12 && d < 2e-3 && d > -2e-3) }'; then
		echo "ok: $1 ($b)"
	else
		fail "$1: '$a' against '$b'"
	fi
}
close "the GPU run's test loss and accuracy" "$tmp/cpu.out" "$tmp/cuda.out"

# a GPU checkpoint predicts the same on both devices
for dev in cpu cuda; do
	"$prog" --device $dev --checkpoint "$tmp/cuda/best.safetensors" --tokenizer byte \
		--predict "a truly wonderful film" >"$tmp/p_$dev.out" 2>"$tmp/p_$dev.err" ||
		fail "--predict on $dev: $(cat "$tmp/p_$dev.err")"
done
if awk 'NR == FNR { a = $1; next } { d = a - $1; exit !(d < 1e-4 && d > -1e-4) }' \
	"$tmp/p_cpu.out" "$tmp/p_cuda.out"; then
	echo "ok: --predict agrees ($(cat "$tmp/p_cuda.out"))"
else
	fail "--predict: cpu $(cat "$tmp/p_cpu.out"), cuda $(cat "$tmp/p_cuda.out")"
fi

# stopped on the GPU, resumed on the CPU: the run ends as the uninterrupted GPU run
# shellcheck disable=SC2086
"$prog" $BASE --device cuda --log-dir "$tmp/r" --stop-after 4 >"$tmp/r1.out" 2>&1 ||
	fail "--stop-after on cuda: $(tail -3 "$tmp/r1.out")"
# shellcheck disable=SC2086
"$prog" $BASE --device cpu --log-dir "$tmp/r" --resume >"$tmp/r2.out" 2>&1 ||
	fail "--resume on cpu: $(tail -3 "$tmp/r2.out")"
close "stopped on the GPU, resumed on the CPU" "$tmp/cuda.out" "$tmp/r2.out"

# MLM pretraining on the GPU
"$mlm" --device cuda --max-docs 40 --n 64 --dim 32 --heads 2 --layers 2 --ff 64 --batch 4 \
	--steps 6 --tokenizer byte --log-dir "$tmp/mlm" >"$tmp/mlm.out" 2>&1 ||
	fail "linformer_mlm --device cuda: $(tail -3 "$tmp/mlm.out")"

# the pretraining recipe's path (scripts/experiments/pretrain_finetune.sh --device cuda): a
# Transformer MLM, a Linformer MLM grown from it, linformer_imdb fine-tuned from that; the
# fine-tuned model tests as the same chain on the CPU
for dev in cpu cuda; do
	d=$tmp/chain-$dev
	small="--max-docs 40 --dim 16 --heads 2 --layers 2 --ff 32 --batch 4 --steps 4
		--positions conv --device $dev"
	# shellcheck disable=SC2086
	"$mlm" $small --n 32 --log-dir "$d/p1" >"$d.p1.out" 2>&1 &&
		"$mlm" $small --n 64 --model linformer --k 16 --init-from "$d/p1/last.safetensors" \
			--log-dir "$d/p2" >"$d.p2.out" 2>&1 &&
		"$imdb" --device $dev --init-from "$d/p2/best.safetensors" --max-train 32 \
			--max-test 16 --epochs 1 --batch 8 --log-dir "$d/ft" >"$d.out" 2>&1 ||
		fail "the pretraining chain on $dev: $(tail -3 "$d".*out)"
done
close "the pretraining chain's test loss and accuracy" "$tmp/chain-cpu.out" "$tmp/chain-cuda.out"

echo "$failures failure(s)"
[ "$failures" -eq 0 ]
