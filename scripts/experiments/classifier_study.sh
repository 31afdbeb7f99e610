#!/usr/bin/env bash
# The classifier study: Transformer vs Linformer vs Conv-Linformer sentiment classifiers on IMDB
# at n = 64, 128, 256, 512 (k = min(128, n/2)), each over several seeds: validation accuracy per
# epoch, test accuracy, training time, tokens/s, peak memory, and the speed-up and memory ratios
# against the Transformer at the same n. One command: scripts/experiments/classifier_study.sh
set -euo pipefail
STUDY=classifier_study
DEF_EPOCHS=4
STUDY_DOC="Trains linformer_imdb for every model x n x seed and tabulates the results."
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
parse_args "$@"

MODELS="transformer linformer conv-linformer"
NS="64 128 256 512"
QUICK_ARGS=""
[ "$QUICK" = 1 ] && QUICK_ARGS="--max-train 64 --max-test 64 --dim 32 --ff 64 --batch 16 --log-every 2"
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
aggregate "$csv" model,n,k val_acc,test_acc,train_s,tokens_per_s,peak_mb >"$agg"
md=$OUT/results.md
{
	echo "# Classifier study: Transformer vs Linformer vs Conv-Linformer on IMDB"
	echo
	echo "Data: $(describe_data). $EPOCHS epoch(s), seeds $SEEDS; mean ± std over the seeds."
	echo "Run $(date -u '+%Y-%m-%d %H:%M UTC') on $(nproc) CPU core(s) with --threads $THREADS$([ "$QUICK" = 1 ] && echo ", --quick ($QUICK_ARGS)")$([ -n "$EXTRA" ] && echo ", extra flags: $EXTRA")."
	echo "Training time: wall time to the end of the last epoch (validation included). Speed-up:"
	echo "tokens/s over the Transformer's at the same n; memory: the Transformer's peak over the model's."
	echo
	echo "| model | n | k | val acc | test acc | train time (s) | tokens/s | peak memory (MB) | speed-up | memory saving |"
	echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
	# agg: model n k count, then mean std of val_acc test_acc train_s tokens_per_s peak_mb
	awk '{ key = $2; if ($1 == "transformer") { tps[key] = $11; mem[key] = $13 }
		row[NR] = $0 }
	END { for (i = 1; i <= NR; i++) { split(row[i], f, " ")
		sp = tps[f[2]] > 0 ? sprintf("%.2fx", f[11] / tps[f[2]]) : "-"
		ms = f[13] > 0 && mem[f[2]] > 0 ? sprintf("%.2fx", mem[f[2]] / f[13]) : "-"
		printf "| %s | %s | %s | %.4f ± %.4f | %.4f ± %.4f | %.1f ± %.1f | %.0f ± %.0f | %.0f ± %.0f | %s | %s |\n",
			f[1], f[2], f[3], f[5], f[6], f[7], f[8], f[9], f[10], f[11], f[12], f[13], f[14], sp, ms } }' "$agg"
	echo
	echo "Validation accuracy per epoch (mean ± std):"
	echo
	printf "| model | n |"
	for e in $(seq 1 "$EPOCHS"); do printf " epoch %s |" "$e"; done
	printf "\n|---|---:|"
	for e in $(seq 1 "$EPOCHS"); do printf -- "---:|"; done
	echo
	vals=$(seq -s, -f "val_acc_by_epoch[%g]" 1 "$EPOCHS")
	aggregate "$csv" model,n "$vals" | awk '{ printf "| %s | %s |", $1, $2
		for (i = 4; i < NF; i += 2) printf " %.4f ± %.4f |", $i, $(i + 1); printf "\n" }'
} >"$md"

# ---- plots ------------------------------------------------------------------------------------
PLOTTED=""
if [ "$PLOTS" = 1 ]; then
	for n in $NS; do
		dat=$OUT/.val_n$n.dat
		: >"$dat"
		for model in $MODELS; do
			printf '"%s"\n' "$model" >>"$dat"
			aggregate "$csv" model,n "$vals" | awk -v m="$model" -v n="$n" '$1 == m && $2 == n {
				for (i = 4; i < NF; i += 2) print (i - 2) / 2, $i, $(i + 1) }' >>"$dat"
			printf '\n\n' >>"$dat"
		done
		plot "$dat" "val_acc_n$n" "Validation accuracy per epoch, n = $n" epoch "validation accuracy" 0
	done
	for what in time memory; do
		dat=$OUT/.$what.dat
		: >"$dat"
		for model in $MODELS; do
			printf '"%s"\n' "$model" >>"$dat"
			awk -v m="$model" -v w="$what" '$1 == m { print $2, (w == "time" ? $9 : $13), (w == "time" ? $10 : $14) }' "$agg" >>"$dat"
			printf '\n\n' >>"$dat"
		done
	done
	plot "$OUT/.time.dat" time_vs_n "Training time vs sequence length" n "training time (s)" 1
	plot "$OUT/.memory.dat" memory_vs_n "Peak memory vs sequence length" n "peak memory (MB)" 1
	{
		echo
		echo "Plots:"
		for p in $PLOTTED; do echo "- [$p]($p)"; done
	} >>"$md"
fi
note "wrote $csv, $md${PLOTTED:+ and plots:$PLOTTED}"
cat "$md"
