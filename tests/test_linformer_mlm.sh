#!/bin/sh
# linformer_mlm end to end on a tiny generated corpus: a few steps lower the loss, perplexity is
# printed and finite, the CSV has its columns, a run stopped and resumed ends with the
# uninterrupted run's checkpoint (also one killed outright after a --save-every save), SIGTERM
# saves and exits 143, the model learns from context (not only word frequencies), the
# checkpoint rebuilds the model from its config alone and reproduces the validation perplexity,
# --eval-only refuses a --n that contradicts the checkpoint, --init-from continues it at a
# longer n (and refuses another vocabulary), --precision bf16 ends near the f32 run's perplexity,
# masked and full decoding agree, whole-word and span masking run, and bad flags (held-out
# text with no masked token among them) exit 1 with a clear message, as --eval-only does with
# its stdout on a full disk. Run from the build directory
# (as `make check` does); LINFORMER_MLM overrides the program.
set -u
prog=${LINFORMER_MLM:-examples/linformer_mlm}
if [ ! -x "$prog" ]; then
	echo "test_linformer_mlm: $prog not built" >&2
	exit 99
fi
test_name=linformer_mlm
. "${srcdir:-.}/tests/lib.sh"

# A corpus of 80 short, very regular documents (one a line): an MLM learns it within steps.
awk 'BEGIN {
	split("cat dog bird fish horse", a, " "); split("red blue green small big", b, " ");
	for (i = 0; i < 80; i++)
		printf "the %s %s sat on the mat and the %s %s ate the food .\n",
			b[i % 5 + 1], a[i % 5 + 1], b[(i + 2) % 5 + 1], a[(i + 3) % 5 + 1]
}' >"$tmp/corpus.txt"
model="--model LC --n 32 --k 8 --dim 32 --heads 2 --ff 64 --dropout 0 --attn-dropout 0"
data="--corpus $tmp/corpus.txt --val-fraction 0.2 --batch 8 --seed 3 --threads 1"
# shellcheck disable=SC2086 # the flag lists are meant to split
train() { "$prog" $model $data "$@"; }

# ---- training ---------------------------------------------------------------------------------
train --steps 24 --lr 3e-3 --log-every 4 --log-dir "$tmp/run" >"$tmp/train.out" 2>&1 ||
	fail "training exited $?: $(cat "$tmp/train.out")"
sed 's/^/  | /' "$tmp/train.out"
csv=$tmp/run/metrics.csv
[ "$(head -n 1 "$csv")" = "step,epoch,split,loss,perplexity,lr,tokens_per_s,elapsed_s,peak_mb" ] ||
	fail "metrics.csv header: $(head -n 1 "$csv")"
# the loss of the last logged window is well below the first (which starts near log(vocab))
awk -F, '$3 == "train" { if (!n++) first = $4; last = $4 }
	END { exit !(n >= 5 && first > 8 && last < first - 1) }' "$csv" ||
	fail "the training loss did not decrease: $(grep ',train,' "$csv" | cut -d, -f4 | tr '\n' ' ')"
# every row has a finite perplexity = exp(loss) > 1; train rows a learning rate and tokens/s
awk -F, 'NR > 1 { n++; if (!($5 > 1 && $5 < 1e30) || ($5 - exp($4)) ^ 2 > (1e-3 * $5) ^ 2) bad = 1
	if ($3 == "train" && !($6 > 0 && $7 > 0)) bad = 1 }
	END { exit !(n >= 8 && !bad) }' "$csv" || fail "bad rows in metrics.csv: $(cat "$csv")"
[ "$(grep -c ',val,' "$csv")" -eq 3 ] || fail "metrics.csv lacks a val row per epoch: $(cat "$csv")"
val=$(sed -n 's/.*validation loss [0-9.]* perplexity \([0-9.]*\).*/\1/p' "$tmp/train.out" | tail -n 1)
case $val in
[0-9]*.[0-9][0-9][0-9]) echo "ok: validation perplexity $val" ;;
*) fail "no finite validation perplexity printed (got '$val')" ;;
esac
ls "$tmp/run"/events.out.tfevents.* >/dev/null 2>&1 || fail "no TensorBoard event file"

# ---- stopped and resumed: the uninterrupted run's checkpoint, byte for byte --------------------
# at step 10, after the first validation (8 steps an epoch), and at step 5, before it (no best
# perplexity saved yet)
for at in 10 5; do
	train --steps 24 --lr 3e-3 --log-every 4 --log-dir "$tmp/rs$at" --stop-after $at \
		>"$tmp/rs.out" 2>&1 || fail "--stop-after exited $?: $(cat "$tmp/rs.out")"
	resume=$(sed -n 's/^to resume: //p' "$tmp/rs.out")
	[ -n "$resume" ] || fail "no resume command printed: $(cat "$tmp/rs.out")"
	eval "$resume" >"$tmp/rs2.out" 2>&1 || fail "resuming exited $?: $(cat "$tmp/rs2.out")"
	if cmp -s "$tmp/run/last.safetensors" "$tmp/rs$at/last.safetensors" &&
		grep -q "^resumed at step $at" "$tmp/rs2.out"; then
		echo "ok: stopped at step $at and resumed: the uninterrupted run's last.safetensors"
	else
		fail "the run resumed at step $at differs: $(tail -3 "$tmp/rs2.out")"
	fi
done
# --save-every 3, killed outright (SIGKILL at a checkpoint save's n-th point, four a save:
# before its temporary file, header written, complete, renamed) during the save of step 6, and
# after it: resumed from step 3, then from step 6, each ends as the uninterrupted run
for kp in 6:3 8:6; do
	k=${kp%:*} from=${kp#*:}
	# shellcheck disable=SC2086
	env CFORMER_CRASH_AT=$k "$prog" $model $data --steps 24 --lr 3e-3 --log-every 4 \
		--log-dir "$tmp/se$k" --save-every 3 >"$tmp/se.out" 2>&1
	[ $? -eq 137 ] || fail "CFORMER_CRASH_AT=$k --save-every 3 did not die by SIGKILL"
	train --steps 24 --lr 3e-3 --log-every 4 --log-dir "$tmp/se$k" --save-every 3 --resume \
		>"$tmp/se2.out" 2>&1 || fail "resuming after the kill exited $?: $(cat "$tmp/se2.out")"
	if cmp -s "$tmp/run/last.safetensors" "$tmp/se$k/last.safetensors" &&
		grep -q "^resumed at step $from" "$tmp/se2.out"; then
		echo "ok: --save-every 3 killed at save point $k resumed from step $from to the same end"
	else
		fail "killed at save point $k: $(grep -m1 resumed "$tmp/se2.out"), or the end differs"
	fi
done
# shellcheck disable=SC2086
expect 1 "save-every" $model $data --save-every -1

# SIGTERM finishes the step, saves, exits 143 and the run resumes from there
# shellcheck disable=SC2086
sigterm_check 100000 "$tmp/t/metrics.csv" 3 "$prog" $model $data --steps 100000 --lr 3e-3 \
	--log-every 1 --log-dir "$tmp/t"
# resuming a run that ended does nothing, and says so
cp "$tmp/run/last.safetensors" "$tmp/ended.safetensors"
# shellcheck disable=SC2086
expect 0 "ended at step 24: nothing to resume" $model $data --steps 24 --lr 3e-3 --log-every 4 \
	--log-dir "$tmp/run" --resume
cmp -s "$tmp/run/last.safetensors" "$tmp/ended.safetensors" || fail "resuming an ended run changed it"
expect 1 "--resume: needs --log-dir" --resume --corpus "$tmp/corpus.txt"
expect 1 "no saved state\|last.safetensors" --resume --log-dir "$tmp/nothing" --corpus "$tmp/corpus.txt"

# ---- the checkpoint: written atomically, its config rebuilds the model -------------------------
ckpt=$tmp/run/last.safetensors
[ -s "$ckpt" ] && [ -s "$tmp/run/best.safetensors" ] || fail "no checkpoints written"
[ ! -e "$ckpt.tmp" ] || fail "temporary checkpoint file left"
grep -a -q '"config"' "$ckpt" && grep -a -q 'conv' "$ckpt" || fail "no model config in $ckpt"
train --eval-only --checkpoint "$ckpt" >"$tmp/eval.out" 2>&1 || fail "--eval-only exited $?"
grep -q "LC\].*n 32, dim 32, heads 2, layers 2" "$tmp/eval.out" ||
	fail "--eval-only did not rebuild the LC model: $(cat "$tmp/eval.out")"
grep -q "(step 24): validation loss [0-9.]* perplexity $val " "$tmp/eval.out" &&
	echo "ok: the reloaded checkpoint reproduces perplexity $val" ||
	fail "--eval-only disagrees with training's $val: $(cat "$tmp/eval.out")"

# the encoder starts a classifier (when study/imdb_study is built beside this program)
imdb=$(dirname "$prog")/../study/imdb_study
if [ -x "$imdb" ]; then
	"$imdb" --init-from "$tmp/run/best.safetensors" --max-train 16 --max-test 8 --steps 1 \
		--batch 8 --threads 1 --log-dir "$tmp/imdb" >"$tmp/imdb.out" 2>&1 &&
		grep -q "encoder: 42 tensors from" "$tmp/imdb.out" &&
		echo "ok: imdb_study --init-from takes the encoder (42 tensors)" ||
		fail "imdb_study --init-from: $(cat "$tmp/imdb.out")"
	# --embed-anchor: the embedding penalty pulls towards the pretrained values, not zero (so
	# the run differs), and a run stopped and resumed ends as the uninterrupted one
	ft() {
		"$imdb" --init-from "$tmp/run/best.safetensors" --max-train 16 --max-test 8 --steps 4 \
			--batch 8 --threads 1 --embed-l2 0.5 "$@"
	}
	ft --embed-anchor --log-dir "$tmp/anc" >"$tmp/anc.out" 2>&1 &&
		ft --log-dir "$tmp/zero" >/dev/null 2>&1 &&
		ft --embed-anchor --log-dir "$tmp/anc2" --stop-after 2 >/dev/null 2>&1 &&
		ft --embed-anchor --log-dir "$tmp/anc2" --resume >"$tmp/anc2.out" 2>&1 ||
		fail "imdb_study --embed-anchor runs exited $?: $(tail -3 "$tmp/anc.out" "$tmp/anc2.out")"
	! cmp -s "$tmp/anc/last.safetensors" "$tmp/zero/last.safetensors" &&
		cmp -s "$tmp/anc/last.safetensors" "$tmp/anc2/last.safetensors" &&
		echo "ok: imdb_study --embed-anchor changes the run and resumes exactly" ||
		fail "--embed-anchor: the same as towards zero, or the resumed run differs"
	"$imdb" --embed-l2 0.5 --embed-anchor --steps 1 >"$tmp/anc3.out" 2>&1
	[ $? -eq 1 ] && grep -q -- "--embed-anchor: needs --init-from" "$tmp/anc3.out" &&
		echo "ok: --embed-anchor without --init-from is refused" ||
		fail "--embed-anchor without --init-from: $(cat "$tmp/anc3.out")"
else
	echo "skip: $imdb not built, --init-from not tried"
fi

# ---- --init-from: a checkpoint at n = 32 continues at n = 64 (BERT's 128, then 512) -----------
# Every document is shorter than 32 tokens, so a Transformer grown to n = 64 has every weight it
# uses from the checkpoint: after one step at lr 1e-9 its validation perplexity is the source's.
tr="--model transformer --dim 32 --heads 2 --ff 64 --dropout 0 --attn-dropout 0"
# shellcheck disable=SC2086
"$prog" $tr $data --n 32 --steps 24 --lr 3e-3 --log-dir "$tmp/tr32" >"$tmp/tr32.out" 2>&1 &&
	"$prog" $tr $data --n 64 --steps 1 --lr 1e-9 --min-lr 0 --init-from "$tmp/tr32/last.safetensors" \
		--log-dir "$tmp/tr64" >"$tmp/tr64.out" 2>&1 || fail "--init-from runs exited $?"
ppl32=$(sed -n 's/.*validation loss [0-9.]* perplexity \([0-9.]*\).*/\1/p' "$tmp/tr32.out" | tail -n 1)
grep -q "init: 41 tensors from $tmp/tr32/last.safetensors, 0 projections start fresh" "$tmp/tr64.out" &&
	grep -q "(step 1): validation loss [0-9.]* perplexity $ppl32 " "$tmp/tr64.out" &&
	echo "ok: --init-from grows n 32 to 64 and keeps validation perplexity $ppl32" ||
	fail "--init-from did not carry the n = 32 model (perplexity $ppl32 there): $(cat "$tmp/tr64.out")"
# --precision bf16: the same 24 steps with bf16 products end near the f32 run's perplexity
# shellcheck disable=SC2086
"$prog" $tr $data --n 32 --steps 24 --lr 3e-3 --precision bf16 --log-dir "$tmp/tr32b" \
	>"$tmp/tr32b.out" 2>&1 || fail "--precision bf16 exited $?"
ppl16=$(sed -n 's/.*validation loss [0-9.]* perplexity \([0-9.]*\).*/\1/p' "$tmp/tr32b.out" | tail -n 1)
awk -v a="$ppl32" -v b="$ppl16" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d > 0 && d <= 0.05 * a) }' &&
	echo "ok: bf16 validation perplexity $ppl16 near f32's $ppl32" ||
	fail "bf16 validation perplexity $ppl16 against f32's $ppl32"
# Linformer layers: E and F of the linear layer ([k, n]) start fresh; the conv layer's kernel n/k
# stays 4 at n 64, k 16, so its projections are copied.
# shellcheck disable=SC2086
"$prog" --model LC --n 64 --k 16 --dim 32 --heads 2 --ff 64 $data --steps 1 \
	--init-from "$ckpt" --log-dir "$tmp/lc64" >"$tmp/lc64.out" 2>&1 &&
	grep -q "init: 45 tensors from $ckpt, 2 projections start fresh" "$tmp/lc64.out" &&
	echo "ok: --init-from starts the linear projections of n 64 fresh, copies the rest" ||
	fail "--init-from LC n 32 -> 64: $(cat "$tmp/lc64.out")"
# A Transformer's layers seed projected ones (the shared n = 128 phase of the recipe): all 41
# tensors copied, the LC model's 6 projection tensors fresh; a projected layer cannot become
# standard.
# shellcheck disable=SC2086
"$prog" --model LC --n 64 --k 16 --dim 32 --heads 2 --ff 64 $data --steps 1 \
	--init-from "$tmp/tr32/last.safetensors" --log-dir "$tmp/tr-lc" >"$tmp/tr-lc.out" 2>&1 &&
	grep -q "init: 41 tensors from $tmp/tr32/last.safetensors, 6 projections start fresh" \
		"$tmp/tr-lc.out" &&
	echo "ok: --init-from grows a Transformer into a Linformer" ||
	fail "--init-from SS n 32 -> LC n 64: $(cat "$tmp/tr-lc.out")"
# --val-docs: a seeded sample of the held-out documents (16 of the 80 here); training keeps its 64
for v in "5 5" "100 16"; do
	# shellcheck disable=SC2086
	expect 0 "64 training and ${v#* } held-out sequences" $tr $data --n 32 --steps 1 \
		--val-docs "${v% *}" --log-dir "$tmp/vd"
done
expect 1 "--val-docs" --val-docs -1 --corpus "$tmp/corpus.txt"
# shellcheck disable=SC2086
grow() { expect 1 "$1" --model "$2" --n "$3" --k 8 --dim "$4" --heads 2 --ff 64 $data --steps 1 \
	--init-from "$ckpt" --log-dir "$tmp/grow"; }
grow "tensor embed.weight \[30522,32\] does not fit the model (\[30522,16\] there)" LC 32 16
grow "tensor pos.weight \[32,32\] does not fit the model (\[16,32\] there)" LC 16 32
grow "its layers are LC, the model's CC (the same kinds are needed, or standard" CC 32 32
grow "its layers are LC, the model's SS" SS 32 32
# shellcheck disable=SC2086
"$prog" $tr $data --n 32 --steps 1 --positions sinusoidal --log-dir "$tmp/sin" >/dev/null 2>&1 ||
	fail "the sinusoidal run exited $?"
# shellcheck disable=SC2086
expect 1 "has 40 tensors, the model has 41 (different layouts)" $tr $data --n 32 --steps 1 \
	--init-from "$tmp/sin/last.safetensors" --log-dir "$tmp/grow"
[ ! -e "$tmp/grow/last.safetensors" ] || fail "a refused --init-from wrote a checkpoint"
expect 1 "--init-from: starts a training run" --eval-only --checkpoint "$ckpt" --init-from "$ckpt"
expect 1 "--init-from: .*$tmp/none: .*cannot open" --init-from "$tmp/none" --corpus "$tmp/corpus.txt"
# the checkpoint says how its run read text: --eval-only refuses a --n that contradicts it, and
# a run grown from it another vocabulary of as many tokens
expect 1 "^linformer_mlm: --n: 64 contradicts $ckpt, whose run read 32 tokens per example" \
	--eval-only --checkpoint "$ckpt" --corpus "$tmp/corpus.txt" --n 64
sed '2000s/.*/zzzzq/' "${srcdir:-.}/tests/data/tokenizer/bert-base-uncased-vocab.txt" \
	>"$tmp/vocab2.txt"
# shellcheck disable=SC2086
expect 1 "^linformer_mlm: --vocab: $ckpt was trained with another vocabulary" $model $data \
	--steps 1 --init-from "$ckpt" --vocab "$tmp/vocab2.txt" --log-dir "$tmp/grow"

# ---- context: the masked word is only in the other positions --------------------------------
# Lines of one word six times, 38 words: a model of word frequencies alone stays near perplexity
# 38; one that attends to the unmasked copies falls towards 1 (1.5 for both when written).
awk 'BEGIN {
	n = split("apple river house green water music table window garden paper money night " \
		"story letter market summer winter forest island mountain doctor teacher father " \
		"mother friend school street church horse dog bird fish chair glass stone silver " \
		"golden castle", w, " ");
	for (i = 0; i < 600; i++) {
		x = w[(i * 7 + int(i / 38)) % n + 1];
		print x " " x " " x " " x " " x " " x
	}
}' >"$tmp/copy.txt"
for m in linformer transformer; do
	"$prog" --corpus "$tmp/copy.txt" --model $m --n 8 --dim 32 --heads 2 --ff 64 --layers 1 \
		--dropout 0 --attn-dropout 0 --batch 16 --epochs 10 --lr 3e-3 --threads 1 \
		--log-dir "$tmp/copy-$m" >"$tmp/copy.out" 2>&1 || fail "copy corpus, $m: exited $?"
	ppl=$(sed -n 's/.*validation perplexity \([0-9.]*\), best.*/\1/p' "$tmp/copy.out")
	awk -v p="$ppl" 'BEGIN { exit !(p != "" && p + 0 < 5) }' &&
		echo "ok: $m MLM reads the context (validation perplexity $ppl on the copy corpus)" ||
		fail "$m MLM does not learn from context: validation perplexity '$ppl' (want < 5)"
done

# ---- masked decoding (the head on the selected positions only) = full [B*n, vocab] logits ------
loss_of() { awk -F, '$3 == "train" { print $4; exit }' "$1/metrics.csv"; }
train --steps 1 --log-every 1 --log-dir "$tmp/masked" >/dev/null 2>&1 &&
	train --steps 1 --log-every 1 --decode full --log-dir "$tmp/full" >/dev/null 2>&1 ||
	fail "one-step runs failed"
awk -v a="$(loss_of "$tmp/masked")" -v b="$(loss_of "$tmp/full")" \
	'BEGIN { exit !(a > 5 && (a - b) ^ 2 < 1e-8) }' &&
	echo "ok: masked and full decoding give loss $(loss_of "$tmp/masked")" ||
	fail "masked loss $(loss_of "$tmp/masked") != full loss $(loss_of "$tmp/full")"

# ---- whole-word and span masking (every word of this corpus is one WordPiece: whole words select
# the tokens' draws, spans others) ------------------------------------------------------------------
for u in word:"whole words" span:"word spans"; do
	unit=${u%%:*}
	train --steps 1 --log-every 1 --mask-unit "$unit" --log-dir "$tmp/$unit" >"$tmp/$unit.out" 2>&1 ||
		fail "--mask-unit $unit failed: $(tail -2 "$tmp/$unit.out")"
	grep -q "masking 0.15 (${u#*:})" "$tmp/$unit.out" || fail "--mask-unit $unit not reported"
done
a=$(loss_of "$tmp/masked") w=$(loss_of "$tmp/word") s=$(loss_of "$tmp/span")
[ "$w" = "$a" ] && awk -v a="$a" -v s="$s" 'BEGIN { exit !(s > 5 && a != s) }' &&
	echo "ok: first loss by tokens $a, whole words $w, spans $s" ||
	fail "first loss by tokens $a, whole words $w (want the same), spans $s (want another)"

# ---- bad flags and inputs ------------------------------------------------------------------------
expect 0 "usage: linformer_mlm" --help
expect 1 "unknown flag '--frobnicate'" --frobnicate
expect 1 "unexpected argument '-n'" -n 8
expect 1 "unexpected argument 'extra'" extra
expect 1 "--n: expected an integer in \[4, 1048576\], got 'abc'" --n abc
expect 1 "--n: expected an integer in \[4, 1048576\], got '2'" --n 2
expect 1 "--lr: expected a number in (0, 10\], got '1e-3x'" --lr 1e-3x
expect 1 "--dropout: expected a number in \[0, 1), got '1'" --dropout 1
expect 1 "--model: missing value: expected --model NAME" --model
expect 1 "--n: given twice" --n 8 --n 16
expect 1 "--tokenizer: expected one of wordpiece|byte, got 'bpe'" --tokenizer bpe
expect 1 "--mask-unit: expected one of token|word|span, got 'sentence'" --mask-unit sentence
expect 1 "--no-chunk: takes no value" --no-chunk=yes
expect 1 "--corpus: and --data are two sources of text" --corpus "$tmp/corpus.txt" --data "$tmp"
expect 1 "--layers: 3 differs from the 2 layers of the pattern 'LC'" --model LC --layers 3
expect 1 "--model: .*unknown preset 'LQ'" --model LQ
expect 1 "--proj: applies to Linformer (L) layers; --model transformer has none" \
	--model transformer --proj conv
expect 1 "max_len 32 is not divisible by k 12" --model LC --n 32 --k 12 --corpus "$tmp/corpus.txt"
expect 1 "k 64 not in \[1, max_len 32\]" --n 32 --k 64 --corpus "$tmp/corpus.txt"
expect 1 "--k-list: expected 2 positive integers separated by commas, got '8,x'" \
	--model LC --n 32 --k-schedule list --k-list 8,x --corpus "$tmp/corpus.txt"
expect 1 "--k-list: needs --k-schedule list" --k-list 8,8
expect 1 "--corpus: .*$tmp/missing.txt" --corpus "$tmp/missing.txt" --tokenizer byte
expect 1 "--data: .*expected an aclImdb directory" --data "$tmp" --tokenizer byte
# an aclImdb directory with train/unsup: the 7 training and 3 unlabelled reviews
expect 0 "imdb_tiny/train and train/unsup (reviews; labels unused)" --data "${srcdir:-.}/tests/data/imdb_tiny" \
	--tokenizer byte $model --batch 4 --steps 1 --threads 1 --log-dir "$tmp/unsup"
# held-out text whose masks select no token (1 sequence of imdb_tiny at --split-seed 0): refused
# before training (no log directory) and before --eval-only, naming the flags
tiny="--data ${srcdir:-.}/tests/data/imdb_tiny --n 32 --k 8 --dim 32 --heads 2 --ff 64 --threads 1"
novals="--val-fraction: the 1 held-out sequence(s) get no masked token to predict (--mask-prob 0.15, --seed 1): hold out more text"
# shellcheck disable=SC2086
expect 1 "$novals" $tiny --split-seed 0 --steps 1 --log-dir "$tmp/noval"
[ ! -e "$tmp/noval" ] || fail "the refused run made its log directory"
# shellcheck disable=SC2086
expect 1 "$novals" $tiny --split-seed 0 --eval-only --checkpoint "$ckpt"
# shellcheck disable=SC2086
expect 0 "(1 tokens)" $tiny --split-seed 1 --steps 1 --log-dir "$tmp/val1"
: >"$tmp/empty.txt"
expect 1 "--corpus: .*empty.txt" --corpus "$tmp/empty.txt" --tokenizer byte
expect 1 "--vocab: .*missing-vocab.txt" --vocab "$tmp/missing-vocab.txt"
# shellcheck disable=SC2086
expect_full --eval-only --checkpoint "$ckpt" $data
expect 1 "--eval-only: needs --checkpoint CKPT" --eval-only
expect 1 "--checkpoint: is the model of --eval-only" --checkpoint "$ckpt"
expect 1 "loading $tmp/none: .*cannot open" --eval-only --checkpoint "$tmp/none"
expect 1 "--log-dir: cannot create directory $tmp/corpus.txt/x\|--log-dir: .*not a directory" \
	--corpus "$tmp/corpus.txt" --steps 1 --log-dir "$tmp/corpus.txt/x"

finish
