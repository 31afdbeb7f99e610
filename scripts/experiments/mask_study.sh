#!/usr/bin/env bash
# What to mask in MLM pretraining, judged by fine-tuning: for each masking (unit and rate), a
# small Transformer pretrained at n = 128 on the reviews (train, and train/unsup where present)
# for --steps steps of 64 x 128 tokens, then fine-tuned as a classifier at n = 128 for
# --ft-epochs over the seeds and tested on the test split; beside them the same classifier from
# scratch for --epochs (the recipe of docs/results.md at n = 128). Masking units: token (BERT),
# word (every WordPiece of a word) and span (SpanBERT's spans of whole words); validation
# perplexities of different units are not comparable (a whole word is harder to guess than one
# of its pieces), so the verdict is the test accuracy. Tables only, no plots.
# One command: scripts/experiments/mask_study.sh --data DIR/aclImdb
set -euo pipefail
STUDY=mask_study
DEF_EPOCHS=3
QUICK_FLAGS="--max-docs 64"
STUDY_DOC="Pretrains one small MLM per masking, fine-tunes each over the seeds, and tabulates.
  --steps S       MLM steps of 64 x 128 tokens (default: 2000; --quick: 4)
  --maskings \"U:P...\"   masking unit (token, word, span) and rate of each pretraining
                  (default: \"token:0.15 word:0.15 span:0.15 token:0.3\")
  --ft-epochs E   fine-tuning epochs of the pretrained classifiers (default: 1: a small
                  pretrained encoder memorises the training reviews in the next ones)"
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
STEPS="" MASKINGS="token:0.15 word:0.15 span:0.15 token:0.3" FT_EPOCHS=1 args=()
while [ $# -gt 0 ]; do
	case $1 in
	--steps | --maskings | --ft-epochs)
		[ $# -ge 2 ] || die "$1 needs a value (see --help)"
		case $1 in
		--steps) STEPS=$2 ;;
		--maskings) MASKINGS=$2 ;;
		--ft-epochs) FT_EPOCHS=$2 ;;
		esac
		shift 2
		;;
	*) args+=("$1") && shift ;;
	esac
done
parse_args "${args[@]}" --no-plots # tables only: gnuplot not needed
[ -n "$STEPS" ] || { [ "$QUICK" = 1 ] && STEPS=4 || STEPS=2000; }
case $STEPS in '' | *[!0-9]* | 0) die "--steps: expected a positive integer, got '$STEPS'" ;; esac
case $FT_EPOCHS in '' | *[!0-9]* | 0) die "--ft-epochs: expected a positive integer, got '$FT_EPOCHS'" ;; esac
for m in $MASKINGS; do
	case $m in token:* | word:* | span:*) ;; *) die "--maskings: expected UNIT:RATE, got '$m'" ;; esac
done

# the encoder of docs/results.md at n = 128; --quick: a 32-wide one on 64 reviews
ENC="--dim 128 --heads 4 --layers 2 --ff 512 --positions conv"
MLM_ARGS="--batch 64 --lr 1e-3 --val-docs 2000" FT_ARGS=""
if [ "$QUICK" = 1 ]; then
	ENC="--dim 32 --heads 2 --layers 2 --ff 64 --positions conv"
	MLM_ARGS="--batch 8 --lr 1e-3" FT_ARGS="--max-train 64 --max-test 64 --batch 8"
fi
# validation by movie needs aclImdb's urls files, which the bundled subset lacks
VAL=movie
[ -n "$DATA" ] || VAL=random
note "data $(describe_data); MLM steps $STEPS; maskings $MASKINGS; fine-tuning epochs $FT_EPOCHS (scratch $EPOCHS); seeds $SEEDS; threads $THREADS"

csv=$OUT/results.csv
echo "masking,seed,mlm_val_ppl,mlm_s,val_acc,best_val_acc,test_acc,train_s" >"$csv"
# one fine-tuning run (or from scratch) of E epochs over each seed, a row each
finetune() {
	local masking=$1 ppl=$2 mlm_s=$3 epochs=$4 seed name val best test secs
	shift 4
	for seed in $SEEDS; do
		name=ft-${masking/:/-}-s$seed
		# shellcheck disable=SC2046,SC2086 # data_flag and FT_ARGS are flag lists
		run_one "$name" "$IMDB" $(data_flag) --n 128 --epochs "$epochs" --val-split "$VAL" \
			--seed "$seed" $FT_ARGS "$@"
		read -r val best test secs _ < <(summarise "$OUT/runs/$name/metrics.csv" 0) ||
			die "$name: no validation rows in its metrics.csv"
		echo "$masking,$seed,$ppl,$mlm_s,$val,$best,$test,$secs" >>"$csv"
	done
}
# shellcheck disable=SC2086 # ENC is a flag list
finetune scratch - - "$EPOCHS" --model transformer $ENC --lr 1e-3 --embed-l2 5e-2 \
	--embed-l2-ramp 0.33
for m in $MASKINGS; do
	name=mlm-${m/:/-}
	# the checkpoint stays until its fine-tunings are done
	# shellcheck disable=SC2046,SC2086
	KEEP=1 run_one "$name" "$MLM" $(data_flag) --model transformer $ENC --n 128 --dropout 0 \
		--attn-dropout 0 --steps "$STEPS" --mask-unit "${m%:*}" --mask-prob "${m#*:}" \
		$MLM_ARGS $QUICK_ARGS
	read -r ppl _ _ mlm_s _ < <(summarise "$OUT/runs/$name/metrics.csv" 1) ||
		die "$name: no validation rows in its metrics.csv"
	finetune "$m" "$ppl" "$mlm_s" "$FT_EPOCHS" --init-from "$OUT/runs/$name/last.safetensors" \
		--lr 3e-4
	[ "$KEEP" = 1 ] || rm -f "$OUT/runs/$name"/*.safetensors
done

# ---- the markdown table ----------------------------------------------------------------------
md=$OUT/results.md
{
	echo "# What to mask: MLM pretraining judged by fine-tuning"
	echo
	echo "Data: $(describe_data). Each masking pretrains a Transformer ($ENC) at n = 128 for"
	echo "$STEPS steps; each classifier is then fine-tuned at n = 128 for $FT_EPOCHS epoch(s) (lr 3e-4,"
	echo "validation by $VAL) and tested on the test split; scratch is the same classifier"
	echo "untrained, $EPOCHS epochs (lr 1e-3 and the embedding penalty of the recipe). Seeds $SEEDS;"
	echo "mean ± std."
	echo "MLM perplexities of different units do not compare (a whole word is harder to guess)."
	describe_run
	echo
	echo "| masking | MLM val perplexity | MLM time (s) | best val accuracy | test accuracy | fine-tuning time (s) |"
	echo "|---|---:|---:|---:|---:|---:|"
	aggregate "$csv" masking,mlm_val_ppl,mlm_s best_val_acc,test_acc,train_s |
		awk '{ ppl = $2 == "-" ? "-" : sprintf("%.1f", $2); s = $3 == "-" ? "-" : sprintf("%.0f", $3)
			printf "| %s | %s | %s | %.4f ± %.4f | %.4f ± %.4f | %.0f |\n", $1, ppl, s, $5, $6,
				$7, $8, $9 }'
} >"$md"
PLOTTED=""
finish "$csv" "$md"
