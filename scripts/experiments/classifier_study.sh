#!/usr/bin/env bash
# The classifier study: Transformer vs Linformer vs Conv-Linformer sentiment classifiers on IMDB
# at n = 64, 128, 256, 512 (k = min(128, n/2)), each over several seeds: validation accuracy per
# epoch, test accuracy, training time, tokens/s, peak memory, and the speed-up and memory ratios
# against the Transformer at the same n. One command: scripts/experiments/classifier_study.sh
set -euo pipefail
STUDY=classifier_study
DEF_EPOCHS=4
QUICK_FLAGS="--max-train 64 --max-test 64 --dim 32 --ff 64 --batch 16 --log-every 2"
STUDY_DOC="Trains imdb_study for every model x n x seed and tabulates the results."
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
parse_args "$@"

MODELS=${SEL_MODELS:-"transformer linformer conv-linformer"}
NS=${SEL_NS:-"64 128 256 512"}
note "data $(describe_data); epochs $EPOCHS; seeds $SEEDS; threads $THREADS; $IMDB"

csv=$OUT/results.csv
echo "model,n,k,seed,epochs,val_acc,best_val_acc,test_acc,train_s,tokens_per_s,peak_mb,val_acc_by_epoch" >"$csv"
for n in $NS; do
	k=$((n / 2 < 128 ? n / 2 : 128))
	for model in $MODELS; do
		for seed in $SEEDS; do
			name=$model-n$n-s$seed
			# shellcheck disable=SC2046,SC2086 # data_flag and QUICK_ARGS are flag lists
			run_one "$name" "$IMDB" --model "$model" --n "$n" --k "$k" --epochs "$EPOCHS" \
				--seed "$seed" $(data_flag) $QUICK_ARGS
			read -r val best test secs tps peak byepoch < <(summarise "$OUT/runs/$name/metrics.csv" 0) ||
				die "$name: no validation rows in its metrics.csv"
			echo "$model,$n,$k,$seed,$EPOCHS,$val,$best,$test,$secs,$tps,$peak,$byepoch" >>"$csv"
		done
	done
done

# ---- the markdown table ----------------------------------------------------------------------
agg=$OUT/.agg
# model n k count, then mean std of val_acc test_acc train_s tokens_per_s peak_mb
aggregate "$csv" model,n,k val_acc,test_acc,train_s,tokens_per_s,peak_mb >"$agg"
md=$OUT/results.md
{
	echo "# Classifier study: Transformer vs Linformer vs Conv-Linformer on IMDB"
	echo
	echo "Data: $(describe_data). $EPOCHS epoch(s), seeds $SEEDS; mean ± std over the seeds."
	describe_run
	echo "Training time: wall time to the end of the last epoch (validation included). Speed-up:"
	echo "tokens/s over the Transformer's at the same n; memory: the Transformer's peak over the model's."
	echo
	echo "| model | n | k | val acc | test acc | train time (s) | tokens/s | peak memory (MB) | speed-up | memory saving |"
	echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
	ratio_rows "$agg" 4
	echo
	echo "Validation accuracy per epoch (mean ± std):"
	echo
	vals=$(seq -s, -f "val_acc_by_epoch[%g]" 1 "$EPOCHS")
	aggregate "$csv" model,n "$vals" | epoch_table n 4
} >"$md"

# ---- plots ------------------------------------------------------------------------------------
PLOTTED=""
if [ "$PLOTS" = 1 ]; then
	for n in $NS; do
		dat=$OUT/.val_n$n.dat
		# shellcheck disable=SC2086 # MODELS is a list
		epoch_series "$csv" "$vals" "$n" $MODELS >"$dat"
		plot "$dat" "val_acc_n$n" "Validation accuracy per epoch, n = $n" epoch "validation accuracy" 0
	done
	for what in time:9 memory:13; do
		# shellcheck disable=SC2086 # MODELS is a list
		n_series "$agg" "${what#*:}" $MODELS >"$OUT/.${what%:*}.dat"
	done
	plot "$OUT/.time.dat" time_vs_n "Training time vs sequence length" n "training time (s)" 1
	plot "$OUT/.memory.dat" memory_vs_n "Peak memory vs sequence length" n "peak memory (MB)" 1
fi
finish "$csv" "$md"
