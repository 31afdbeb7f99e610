#!/usr/bin/env bash
# The k ablation: Linformer sentiment classifiers on IMDB at n = 512 with k = 32, 64, 128, 256
# (and the Transformer at n = 512 as the reference), each over several seeds: validation
# accuracy per epoch, test accuracy, training time, tokens/s, peak memory, and the speed-up and
# memory ratios against the Transformer. One command: scripts/experiments/k_ablation.sh
set -euo pipefail
STUDY=k_ablation
DEF_EPOCHS=4
QUICK_FLAGS="--max-train 64 --max-test 64 --dim 32 --ff 64 --batch 16 --log-every 2"
STUDY_DOC="Trains imdb_study (Linformer, n = 512) for every k x seed, plus the Transformer."
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
parse_args "$@"
[ -z "$SEL_MODELS$SEL_NS" ] || die "--models and --ns do not apply to this study (n = 512, k varies)"

N=512
KS="32 64 128 256"
note "data $(describe_data); n $N; epochs $EPOCHS; seeds $SEEDS; threads $THREADS; $IMDB"

# The configurations: "label model k" (k 0 for the Transformer, which has no projection).
CONFIGS="transformer:transformer:0"
for k in $KS; do CONFIGS="$CONFIGS linformer-k$k:linformer:$k"; done

csv=$OUT/results.csv
echo "config,model,n,k,seed,epochs,val_acc,best_val_acc,test_acc,train_s,tokens_per_s,peak_mb,val_acc_by_epoch" >"$csv"
for c in $CONFIGS; do
	IFS=: read -r label model k <<<"$c"
	kflag=""
	[ "$k" = 0 ] || kflag="--k $k"
	for seed in $SEEDS; do
		name=$label-s$seed
		# shellcheck disable=SC2046,SC2086 # flag lists
		run_one "$name" "$IMDB" --model "$model" --n "$N" $kflag --epochs "$EPOCHS" \
			--seed "$seed" $(data_flag) $QUICK_ARGS
		read -r val best test secs tps peak byepoch < <(summarise "$OUT/runs/$name/metrics.csv" 0) ||
			die "$name: no validation rows in its metrics.csv"
		echo "$label,$model,$N,$k,$seed,$EPOCHS,$val,$best,$test,$secs,$tps,$peak,$byepoch" >>"$csv"
	done
done

# ---- the markdown table ----------------------------------------------------------------------
agg=$OUT/.agg
# config model n k count, then mean std of val_acc test_acc train_s tokens_per_s peak_mb
aggregate "$csv" config,model,n,k val_acc,test_acc,train_s,tokens_per_s,peak_mb >"$agg"
vals=$(seq -s, -f "val_acc_by_epoch[%g]" 1 "$EPOCHS")
md=$OUT/results.md
{
	echo "# k ablation: Linformer at n = $N, k = ${KS// /, }"
	echo
	echo "Data: $(describe_data). $EPOCHS epoch(s), seeds $SEEDS; mean ± std over the seeds."
	describe_run
	echo "Training time: wall time to the end of the last epoch (validation included). Speed-up:"
	echo "tokens/s over the Transformer's; memory: the Transformer's peak over the model's."
	echo
	echo "| model | k | val acc | test acc | train time (s) | tokens/s | peak memory (MB) | speed-up | memory saving |"
	echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
	awk '$2 == "transformer" { tps = $12; mem = $14 } { row[NR] = $0 }
	END { for (i = 1; i <= NR; i++) { split(row[i], f, " ")
		sp = tps > 0 ? sprintf("%.2fx", f[12] / tps) : "-"
		ms = f[14] > 0 && mem > 0 ? sprintf("%.2fx", mem / f[14]) : "-"
		printf "| %s | %s | %.4f ± %.4f | %.4f ± %.4f | %.1f ± %.1f | %.0f ± %.0f | %.0f ± %.0f | %s | %s |\n",
			f[2], (f[4] == 0 ? "-" : f[4]), f[6], f[7], f[8], f[9], f[10], f[11], f[12], f[13], f[14], f[15], sp, ms } }' "$agg"
	echo
	echo "Validation accuracy per epoch (mean ± std):"
	echo
	aggregate "$csv" model,k "$vals" | epoch_table k 4
} >"$md"

# ---- plots: accuracy per epoch per k; accuracy, time and memory vs k ----------------------------
PLOTTED=""
if [ "$PLOTS" = 1 ]; then
	dat=$OUT/.val.dat
	: >"$dat"
	aggregate "$csv" config "$vals" | while read -r label count rest; do
		printf '"%s"\n' "$label"
		echo "$rest" | awk '{ for (i = 1; i < NF; i += 2) print (i + 1) / 2, $i, $(i + 1) }'
		printf '\n\n'
	done >"$dat"
	plot "$dat" val_acc_per_epoch "Validation accuracy per epoch, n = $N" epoch "validation accuracy" 0
	for what in acc time memory; do
		dat=$OUT/.$what.dat
		# the Linformer runs as a line over k, the Transformer as a flat reference line
		awk -v w="$what" -v ks="$KS" 'BEGIN { c = w == "acc" ? 6 : w == "time" ? 10 : 14 }
		$2 == "linformer" { lin = lin $4 " " $c " " $(c + 1) "\n" }
		$2 == "transformer" { ref = $c " " $(c + 1) }
		END { printf "\"linformer\"\n%s\n\n", lin
			if (ref != "") { printf "\"transformer (n = 512)\"\n"; n = split(ks, K, " ")
				print K[1], ref; print K[n], ref } }' "$agg" >"$dat"
	done
	plot "$OUT/.acc.dat" val_acc_vs_k "Final validation accuracy vs k, n = $N" k "validation accuracy" 1
	plot "$OUT/.time.dat" time_vs_k "Training time vs k, n = $N" k "training time (s)" 1
	plot "$OUT/.memory.dat" memory_vs_k "Peak memory vs k, n = $N" k "peak memory (MB)" 1
fi
finish "$csv" "$md"
