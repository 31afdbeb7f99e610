#!/usr/bin/env bash
# MLM pretraining perplexity: Transformer vs Linformer vs Conv-Linformer masked language models
# on the IMDB reviews (the training ones and, where the data has them, the unlabelled) at
# n = 128, 256, 512 and 1024 (k = min(128, n/2); the Conv-Linformer's first half of layers
# learned projections, the second convolutions of kernel = stride = n/k), each over several
# seeds: validation perplexity per epoch, training time, tokens/s, peak memory, and the speed-up
# and memory ratios against the Transformer at the same n.
# From scratch, a few epochs leave these models near word-frequency perplexity; with --grow-from
# CKPT --steps S each run instead starts from a pretrained checkpoint (e.g. phase 1 of
# pretrain_finetune.sh) and trains S steps of 8,192 tokens (batch 8192 / n), so the study compares
# models that have learned the language, at a cost a few cores can afford.
# One command: scripts/experiments/mlm_perplexity.sh
set -euo pipefail
STUDY=mlm_perplexity
DEF_EPOCHS=3
QUICK_FLAGS="--max-docs 64 --dim 32 --ff 64 --batch 8 --log-every 2"
STUDY_DOC="Pretrains linformer_mlm for every model x n x seed and tabulates the perplexities.
  --grow-from CKPT  start every run from this linformer_mlm checkpoint (--extra must repeat its
                  model flags), for --steps S steps of 8,192 tokens instead of epochs"
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
GROW="" STEPS="" args=()
while [ $# -gt 0 ]; do
	case $1 in
	--grow-from | --steps)
		[ $# -ge 2 ] || die "$1 needs a value (see --help)"
		if [ "$1" = --grow-from ]; then GROW=$2; else STEPS=$2; fi
		shift 2
		;;
	*) args+=("$1") && shift ;;
	esac
done
parse_args "${args[@]}"
if [ -n "$GROW" ]; then
	[ -f "$GROW" ] || die "--grow-from: $GROW is not a file"
	case $STEPS in
	'' | *[!0-9]* | 0) die "--steps: expected a positive integer with --grow-from, got '$STEPS'" ;;
	esac
	GROW=$(cd "$(dirname "$GROW")" && pwd)/$(basename "$GROW") EPOCHS=1
elif [ -n "$STEPS" ]; then
	die "--steps needs --grow-from (from scratch the runs are --epochs long)"
fi

MODELS=${SEL_MODELS:-"transformer linformer conv-linformer"}
NS=${SEL_NS:-"128 256 512 1024"}
note "data $(describe_data); epochs $EPOCHS; seeds $SEEDS; threads $THREADS; $MLM"

csv=$OUT/results.csv
echo "model,n,k,seed,epochs,val_ppl,best_val_ppl,train_s,tokens_per_s,peak_mb,val_ppl_by_epoch" >"$csv"
for n in $NS; do
	k=$((n / 2 < 128 ? n / 2 : 128))
	for model in $MODELS; do
		for seed in $SEEDS; do
			name=$model-n$n-s$seed grow=""
			if [ -n "$GROW" ]; then
				grow="--init-from $GROW --steps $STEPS"
				[ "$QUICK" = 1 ] || grow="$grow --batch $((8192 / n))"
			fi
			# shellcheck disable=SC2046,SC2086 # data_flag, QUICK_ARGS and grow are flag lists
			run_one "$name" "$MLM" --model "$model" --n "$n" --k "$k" --epochs "$EPOCHS" \
				--seed "$seed" $(data_flag) $QUICK_ARGS $grow
			read -r val best _ secs tps peak byepoch < <(summarise "$OUT/runs/$name/metrics.csv" 1) ||
				die "$name: no validation rows in its metrics.csv"
			echo "$model,$n,$k,$seed,$EPOCHS,$val,$best,$secs,$tps,$peak,$byepoch" >>"$csv"
		done
	done
done

# ---- the markdown table ----------------------------------------------------------------------
agg=$OUT/.agg
# model n k count, then mean std of val_ppl best_val_ppl train_s tokens_per_s peak_mb
aggregate "$csv" model,n,k val_ppl,best_val_ppl,train_s,tokens_per_s,peak_mb >"$agg"
vals=$(seq -s, -f "val_ppl_by_epoch[%g]" 1 "$EPOCHS")
md=$OUT/results.md
{
	echo "# MLM pretraining perplexity: Transformer vs Linformer vs Conv-Linformer"
	echo
	if [ -n "$GROW" ]; then
		echo "Data: the reviews of $(describe_data) (train, and train/unsup where present)."
		echo "Each run grown from $GROW: $STEPS steps of 8,192 tokens (batch 8192 / n); seeds $SEEDS;"
	else
		echo "Data: the training reviews of $(describe_data). $EPOCHS epoch(s), seeds $SEEDS;"
	fi
	echo "mean ± std over the seeds. Perplexity: exp(mean cross-entropy) over the masked tokens of"
	echo "the held-out reviews (the same masks for every model and epoch)."
	describe_run
	echo "Training time: wall time to the end of the last epoch (validation included). Speed-up:"
	echo "tokens/s over the Transformer's at the same n; memory: the Transformer's peak over the model's."
	echo
	echo "| model | n | k | val perplexity | best val perplexity | train time (s) | tokens/s | peak memory (MB) | speed-up | memory saving |"
	echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
	ratio_rows "$agg" 2
	echo
	echo "Validation perplexity per epoch (mean ± std):"
	echo
	aggregate "$csv" model,n "$vals" | epoch_table n 2
} >"$md"

# ---- plots ------------------------------------------------------------------------------------
PLOTTED=""
if [ "$PLOTS" = 1 ]; then
	for n in $NS; do
		dat=$OUT/.val_n$n.dat
		# shellcheck disable=SC2086 # MODELS is a list
		epoch_series "$csv" "$vals" "$n" $MODELS >"$dat"
		plot "$dat" "val_ppl_n$n" "Validation perplexity per epoch, n = $n" epoch "validation perplexity" 0
	done
	for what in ppl:5 time:9 memory:13; do
		# shellcheck disable=SC2086 # MODELS is a list
		n_series "$agg" "${what#*:}" $MODELS >"$OUT/.${what%:*}.dat"
	done
	plot "$OUT/.ppl.dat" ppl_vs_n "Final validation perplexity vs sequence length" n "validation perplexity" 1
	plot "$OUT/.time.dat" time_vs_n "Training time vs sequence length" n "training time (s)" 1
	plot "$OUT/.memory.dat" memory_vs_n "Peak memory vs sequence length" n "peak memory (MB)" 1
fi
finish "$csv" "$md"
