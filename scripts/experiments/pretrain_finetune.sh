#!/usr/bin/env bash
# The pretraining recipe of docs/results.md, end to end: phase 1, a Transformer masked language
# model at n = 128 on the training and unlabelled IMDB reviews (the projection saves nothing at
# that length); phase 2, each model at n = 512 (k 128) grown from it (linformer_mlm
# --init-from); then each fine-tuned as a classifier over the seeds (linformer_imdb
# --init-from) and tested. Positions come from a convolution over neighbouring tokens
# (--positions conv), not a table: a table's rows past 128 would start afresh at n = 512.
# Runs take hours on a few cores: each stage resumes where it stopped (its last.safetensors)
# when the script is run again with the same flags, and a completed stage is reused.
# One command: scripts/experiments/pretrain_finetune.sh --data DIR/aclImdb
set -euo pipefail
STUDY=pretrain_finetune
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() {
	cat <<EOF
usage: scripts/experiments/pretrain_finetune.sh --data DIR [flags]
Pretrains (MLM, n = 128 then 512) and fine-tunes the IMDB classifiers; resumable.
flags:
  --data DIR        aclImdb directory or archive, with train/unsup for the full recipe (required)
  --models "M..."   models of phase 2 and fine-tuning (default: "linformer transformer conv-linformer")
  --seeds "S..."    fine-tuning seeds (default: "1 2 3")
  --threads T       threads of every run (default: 2)
  --p1-steps S      phase 1 steps, batch 64 x 128 tokens (default: 8000)
  --p2-steps S      phase 2 steps, batch 16 x 512 tokens (default: 3000)
  --ft-lr RATE      fine-tuning peak learning rate (default: 3e-4)
  --precision P     f32 or bf16 products in every run (default: bf16; f32 with --device cuda)
  --device D        cpu or cuda: where every run trains (default: cpu)
  --out DIR         results directory (default: results/pretrain_finetune)
  --bin DIR         the build directory (default: ., else \$BUILD_DIR, else the source tree)
  --quick           a smoke test of the pipeline: a tiny model, a few steps (tests/data/imdb_tiny)
Writes OUT/results.csv (a row per fine-tuning run), OUT/results.md and OUT/runs/<stage>/.
EOF
}

DATA="" MODELS="linformer transformer conv-linformer" SEEDS="1 2 3" THREADS=2 OUT="" BIN=""
P1=8000 P2=3000 FT_LR=3e-4 PRECISION="" DEVICE=cpu QUICK=0
while [ $# -gt 0 ]; do
	case $1 in
	--quick) QUICK=1 && shift && continue ;;
	-h | --help) usage && exit 0 ;;
	--data | --models | --seeds | --threads | --p1-steps | --p2-steps | --ft-lr | --precision | \
		--device | --out | --bin) [ $# -ge 2 ] || die "$1 needs a value (see --help)" ;;
	*) die "unknown flag '$1' (see --help)" ;;
	esac
	case $1 in
	--data) DATA=$2 ;; --models) MODELS=$2 ;; --seeds) SEEDS=$2 ;; --threads) THREADS=$2 ;;
	--p1-steps) P1=$2 ;; --p2-steps) P2=$2 ;; --ft-lr) FT_LR=$2 ;; --precision) PRECISION=$2 ;;
	--device) DEVICE=$2 ;; --out) OUT=$2 ;; --bin) BIN=$2 ;;
	esac
	shift 2
done
[ -n "$DATA" ] || die "--data is required (an aclImdb directory or archive)"
[ -e "$DATA" ] || die "--data: $DATA does not exist"
case $DEVICE in cpu) PRECISION=${PRECISION:-bf16} ;; cuda) PRECISION=${PRECISION:-f32} ;;
*) die "--device: expected cpu or cuda, got '$DEVICE'" ;; esac
[ "$DEVICE/$PRECISION" != cuda/bf16 ] || die "--precision bf16: the CUDA backend trains in f32 only"
for m in $MODELS; do
	case $m in transformer | linformer | conv-linformer) ;; *) die "--models: unknown model '$m'" ;; esac
done
for d in "$BIN" . "${BUILD_DIR:-}" "$SRC_DIR"; do
	if [ -n "$d" ] && [ -x "$d/examples/linformer_mlm" ] && [ -x "$d/examples/linformer_imdb" ]; then
		MLM=$(cd "$d" && pwd)/examples/linformer_mlm IMDB=$(cd "$d" && pwd)/examples/linformer_imdb
		break
	fi
done
[ -n "${MLM:-}" ] || die "examples/linformer_mlm and linformer_imdb not found: build them, or --bin DIR"
OUT=${OUT:-results/$STUDY}
mkdir -p "$OUT/runs" && OUT=$(cd "$OUT" && pwd)

# The recipe (docs/results.md); --quick shrinks it to seconds.
ENC="--dim 256 --heads 4 --layers 4 --ff 1024 --dropout 0 --attn-dropout 0 --positions conv"
N1="--n 128 --batch 64 --lr 1e-3" N2="--n 512 --batch 16 --lr 5e-4" FT="--epochs 3"
if [ "$QUICK" = 1 ]; then
	ENC="--dim 32 --heads 2 --layers 2 --ff 64 --positions conv --max-docs 100" P1=6 P2=4
	N1="--n 32 --batch 8 --lr 1e-3" N2="--n 64 --batch 8 --lr 5e-4"
	FT="--epochs 1 --batch 4"
fi
COMMON="--precision $PRECISION --device $DEVICE"

# stage NAME PROGRAM ARGS...: one run in OUT/runs/NAME. Reused when it completed with the same
# command; resumed (--resume) when it stopped part way with the same command; else run afresh.
# --threads is not part of the command: a run may resume with another. Nor is --save-every:
# the MLM stages save every 200 steps (minutes on a CPU), so that one killed outright resumes.
stage() {
	local name=$1 prog=$2 dir=$OUT/runs/$1 cmd free=()
	shift 2
	[ "$prog" != "$MLM" ] || free=(--save-every 200)
	cmd="$(basename "$prog") $*"
	if [ -e "$dir/done" ] && [ "$(cat "$dir/done")" = "$cmd" ]; then
		note "$name: done before, reusing"
		return 0
	fi
	local resume=()
	if [ -e "$dir/last.safetensors" ] && [ "$(cat "$dir/cmd" 2>/dev/null)" = "$cmd" ]; then
		resume=(--resume)
		note "$name: resuming: $cmd"
	else
		rm -rf "$dir" && mkdir -p "$dir" && echo "$cmd" >"$dir/cmd"
		note "$name: $cmd"
	fi
	"$prog" "$@" "${resume[@]}" "${free[@]}" --threads "$THREADS" --log-dir "$dir" \
		>>"$dir/run.log" 2>&1 || {
		tail -n 20 "$dir/run.log" >&2
		die "$name failed or stopped; its log: $dir/run.log (run the script again to resume)"
	}
	echo "$cmd" >"$dir/done"
}

# shellcheck disable=SC2086 # flag lists
stage p1-transformer-n128 "$MLM" --data "$DATA" --model transformer $ENC $N1 --steps "$P1" $COMMON
for m in $MODELS; do
	k="--k 128"
	[ "$QUICK" = 1 ] && k="--k 16"
	[ "$m" = transformer ] && k=""
	# shellcheck disable=SC2086
	stage "p2-$m-n512" "$MLM" --data "$DATA" --model "$m" $ENC $N2 $k --steps "$P2" $COMMON \
		--init-from "$OUT/runs/p1-transformer-n128/last.safetensors"
	for s in $SEEDS; do
		# shellcheck disable=SC2086
		stage "ft-$m-s$s" "$IMDB" --data "$DATA" --init-from "$OUT/runs/p2-$m-n512/best.safetensors" \
			--seed "$s" --lr "$FT_LR" $FT $COMMON
	done
done

# ---- the tables -----------------------------------------------------------------------------
# the last validation perplexity of an MLM stage
ppl() { awk -F, '$3 == "val" { v = $5 } END { print v }' "$OUT/runs/$1/metrics.csv"; }
csv=$OUT/results.csv
echo "model,seed,phase1_val_ppl,phase2_val_ppl,val_acc,best_val_acc,test_acc,train_s" >"$csv"
for m in $MODELS; do
	for s in $SEEDS; do
		read -r val best test secs _ < <(summarise "$OUT/runs/ft-$m-s$s/metrics.csv" 0) ||
			die "ft-$m-s$s: no validation rows in its metrics.csv"
		echo "$m,$s,$(ppl p1-transformer-n128),$(ppl "p2-$m-n512"),$val,$best,$test,$secs" >>"$csv"
	done
done
# where the runs trained: the GPU's name, or the CPU cores
machine() {
	if [ "$DEVICE" = cuda ] && command -v nvidia-smi >/dev/null; then
		nvidia-smi --query-gpu=name --format=csv,noheader | head -1
	else
		echo "$(nproc) CPU core(s)"
	fi
}
md=$OUT/results.md
{
	echo "# MLM pretraining, then fine-tuning: IMDB test accuracy"
	echo
	echo "Data: $DATA. Phase 1: $P1 steps of a Transformer MLM at n = 128; phase 2: $P2 steps of"
	echo "each model at n = 512 grown from it; fine-tuning: linformer_imdb --init-from, lr $FT_LR;"
	echo "seeds $SEEDS, mean ± std. Run $(date -u '+%Y-%m-%d %H:%M UTC') on $(machine), --threads $THREADS, --precision $PRECISION$([ "$QUICK" = 1 ] && echo ", --quick")."
	echo
	echo "| model | phase 2 validation perplexity | test accuracy | best validation accuracy | fine-tuning time (s) |"
	echo "|---|---:|---:|---:|---:|"
	aggregate "$csv" model phase2_val_ppl,test_acc,best_val_acc,train_s |
		awk '{ printf "| %s | %.1f | %.4f ± %.4f | %.4f ± %.4f | %.0f ± %.0f |\n",
			$1, $3, $5, $6, $7, $8, $9, $10 }'
} >"$md"
note "wrote $csv, $md"
cat "$md"
