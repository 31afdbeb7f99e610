#!/bin/sh
# The showcase, examples/linformer_imdb, end to end: at most 22 flags (issue 39 asked for
# about 20; issue 40 added --precision, issue 42 --init-from); a short run on the bundled subset writes its logs
# and checkpoints and trains exactly as study/imdb_study with the bundled recipe's flags;
# --precision bf16 trains to nearby losses; --data takes the full recipe (validation by
# movie) on a tiny aclImdb, again as imdb_study with its flags; a run stopped with
# --stop-after and resumed with the command it prints ends as an uninterrupted one; SIGTERM
# saves and exits 143;
# --init-from takes a pretrained encoder whole and names what it leaves; a checkpoint remembers
# how its run read text, so --eval-only on a keep-tail run's checkpoint reproduces the run's
# test line and a contradicting flag or another vocabulary is refused;
# --eval-only reproduces the run's test accuracy; --predict and --predict-file print
# probabilities that are the softmax of the logits --output writes; --output refuses to
# replace an input or a checkpoint and writes atomically, a failed write exiting 1; bad flags
# exit 1 naming the flag (stdout on a full disk exits 1); a run too big for the memory is
# refused naming study/imdb_study --no-mem-check. Run from the build directory (as `make check` does);
# LINFORMER_IMDB and IMDB_STUDY override the programs.
set -u
prog=${LINFORMER_IMDB:-examples/linformer_imdb}
study=${IMDB_STUDY:-study/imdb_study}
tiny=${srcdir:-.}/tests/data/imdb_tiny
for p in "$prog" "$study"; do
	if [ ! -x "$p" ]; then
		echo "test_linformer_imdb: $p not built" >&2
		exit 99
	fi
done
test_name=linformer_imdb
. "${srcdir:-.}/tests/lib.sh"
# ok WHAT COMMAND...: the command succeeds.
ok() {
	what=$1
	shift
	if "$@" >"$tmp/ok.out" 2>&1; then echo "ok: $what"; else
		fail "$what: $*"
		sed 's/^/  | /' "$tmp/ok.out"
	fi
}
# the CSV's step, epoch, split, loss and accuracy columns (not times or memory)
metrics() { cut -d, -f1-5 "$1/metrics.csv"; }

nflags=$("$prog" --help | grep -c '^  --')
[ "$nflags" -le 22 ] && echo "ok: $nflags flags" || fail "--help lists $nflags flags (at most 22)"

SMALL="--max-train 64 --max-test 32 --epochs 2 --batch 16 --threads 1"
# shellcheck disable=SC2086
ok "training on the bundled subset" "$prog" $SMALL --log-dir "$tmp/a"
cp "$tmp/ok.out" "$tmp/a.out"
for f in metrics.csv best.safetensors last.safetensors; do
	[ -s "$tmp/a/$f" ] || fail "no $f in the log directory"
done
ls "$tmp/a"/events.out.tfevents.* >/dev/null 2>&1 || fail "no TensorBoard events"
for split in train val test; do
	grep -q ",$split," "$tmp/a/metrics.csv" || fail "metrics.csv has no $split row"
done
grep -q '^test: loss [0-9.]* accuracy [0-9.]* (' "$tmp/a.out" || fail "no test line"

# --precision bf16: the same run with bf16 products; its losses are near the f32 run's
# (first training row within 2%) but not equal, and its checkpoint is f32 like any other
# shellcheck disable=SC2086
ok "--precision bf16" "$prog" $SMALL --precision bf16 --log-dir "$tmp/b"
grep -q '^precision bf16: products in bf16' "$tmp/ok.out" || fail "no precision line"
first_loss() { awk -F, '$3 == "train" { print $4; exit }' "$1/metrics.csv"; }
awk -v a="$(first_loss "$tmp/a")" -v b="$(first_loss "$tmp/b")" \
	'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d > 0 && d <= 0.02 * a) }' &&
	echo "ok: bf16 training loss $(first_loss "$tmp/b") near f32's $(first_loss "$tmp/a")" ||
	fail "bf16 training loss $(first_loss "$tmp/b") vs f32 $(first_loss "$tmp/a")"
ok "--eval-only of the bf16 run's checkpoint" "$prog" --eval-only \
	--checkpoint "$tmp/b/last.safetensors" --max-test 32 --threads 1
expect 1 "expected one of f32|bf16|tf32" --precision f16
expect 1 "tf32 is the GPU's tensor-core mode: use it with --device cuda" --precision tf32

# the bundled recipe is imdb_study's flags, to the bit
# shellcheck disable=SC2086
ok "imdb_study with the bundled recipe's flags" "$study" $SMALL --model linformer --n 256 \
	--dim 64 --ff 256 --positions conv --embed-l2 5e-2 --embed-l2-ramp 0.33 --proj-l2 0.1 \
	--log-dir "$tmp/s"
metrics "$tmp/a" >"$tmp/a.csv"
metrics "$tmp/s" >"$tmp/s.csv"
cmp -s "$tmp/a.csv" "$tmp/s.csv" && echo "ok: the same losses as imdb_study" ||
	fail "the showcase and imdb_study differ: $(diff "$tmp/a.csv" "$tmp/s.csv" | head -4)"

# --data: the full recipe (validation by movie, the last 382 tokens kept) on a tiny aclImdb
ok "--data with the full recipe" "$prog" --data "$tiny" --n 32 --epochs 1 --batch 4 \
	--threads 1 --log-dir "$tmp/d"
grep -q "positions none + conv 3" "$tmp/ok.out" && grep -q "dim 128" "$tmp/ok.out" &&
	echo "ok: the full recipe's model" || fail "--data did not take the full recipe: $(head -2 "$tmp/ok.out")"
ok "imdb_study with the full recipe's flags" "$study" --data "$tiny" --n 32 --epochs 1 --batch 4 \
	--threads 1 --model linformer --dim 128 --heads 4 --layers 2 --ff 512 --lr 1e-3 \
	--keep-tail 382 --val-split movie --embed-l2 5e-2 --embed-l2-ramp 0.33 --positions conv \
	--proj-l2 0.1 --log-dir "$tmp/ds"
metrics "$tmp/d" >"$tmp/d.csv"
metrics "$tmp/ds" >"$tmp/ds.csv"
cmp -s "$tmp/d.csv" "$tmp/ds.csv" && echo "ok: the full recipe is imdb_study's flags, to the bit" ||
	fail "--data and imdb_study differ: $(diff "$tmp/d.csv" "$tmp/ds.csv" | head -4)"

# stopped after step 3 (mid-epoch 1 of 2 epochs of 4 steps) and resumed: the same run
# shellcheck disable=SC2086
"$prog" $SMALL --log-dir "$tmp/r" --stop-after 3 >"$tmp/r.out" 2>&1 || fail "--stop-after exited $?"
resume=$(sed -n 's/^to resume: //p' "$tmp/r.out")
[ -n "$resume" ] || fail "no resume command printed: $(cat "$tmp/r.out")"
# shellcheck disable=SC2086
eval "$resume" >"$tmp/r2.out" 2>&1 || fail "resuming exited $?: $(cat "$tmp/r2.out")"
# (the training rows cover other windows of steps; validation and test do not)
metrics "$tmp/a" | grep -v ',train,' >"$tmp/a.eval"
metrics "$tmp/r" | grep -v ',train,' >"$tmp/r.eval"
cmp -s "$tmp/a.eval" "$tmp/r.eval" && cmp -s "$tmp/a/last.safetensors" "$tmp/r/last.safetensors" &&
	echo "ok: a resumed run ends as an uninterrupted one (the same checkpoint, byte for byte)" ||
	fail "the resumed run differs: $(diff "$tmp/a.eval" "$tmp/r.eval" | head -4)"
# SIGTERM finishes the step, saves, exits 143 and the run resumes from there
sigterm_check 4000 "$tmp/t/metrics.csv" 3 "$prog" --max-train 64 --max-test 32 --epochs 1000 \
	--batch 16 --threads 1 --log-dir "$tmp/t"
# --init-from: a linformer_mlm checkpoint's encoder (its shape and its tensors, the position
# convolution too) fine-tuned, the file's MLM head and optimizer state named as unused; its
# shape flags, another tokenizer and another vocabulary are refused
mlm=${LINFORMER_MLM:-examples/linformer_mlm}
"$mlm" --n 64 --k 16 --dim 32 --heads 2 --layers 2 --ff 64 --steps 2 --batch 8 --threads 1 \
	--max-docs 40 --dropout 0 --attn-dropout 0 --positions conv --log-dir "$tmp/mlm" \
	>"$tmp/mlm.out" 2>&1 || fail "pretraining exited $?"
# shellcheck disable=SC2086
expect 0 "^encoder: [1-9][0-9]* tensors from $tmp/mlm/last.safetensors$" $SMALL \
	--init-from "$tmp/mlm/last.safetensors" --log-dir "$tmp/ft"
grep -q "n 64, dim 32, heads 2, layers 2.*positions none + conv 3" "$tmp/expect.out" ||
	fail "--init-from did not take the checkpoint's encoder: $(head -3 "$tmp/expect.out")"
unused=$(grep '^  unused: ' "$tmp/expect.out" | cut -d' ' -f4 | tr '\n' ' ')
if grep -q '^no embedding penalty' "$tmp/expect.out" &&
	grep -q '^  unused: [1-9][0-9]* optimizer\.\* tensors (the pretraining' "$tmp/expect.out" &&
	[ "$unused" = "mlm.dense.weight mlm.dense.bias mlm.norm.weight mlm.norm.bias mlm.decoder.bias $(
		sed -n 's/^  unused: \([0-9]*\) optimizer.*/\1/p' "$tmp/expect.out") " ]; then
	echo "ok: --init-from names the MLM head and the optimizer state as unused"
else
	fail "--init-from's report: $(grep -e '^encoder' -e '^  unused' "$tmp/expect.out")"
fi
# the pretraining's dropout 0 is not the fine-tuning's: the recipe's 0.1 (in the saved config)
head -c 4096 "$tmp/ft/last.safetensors" | grep -a -q 'dropout\\":0.1,' ||
	fail "--init-from kept the pretraining's dropout: $(head -c 4096 "$tmp/ft/last.safetensors" |
		grep -a -o 'dropout[^,]*,' | head -2)"
expect 1 "--n: comes from --init-from" --init-from "$tmp/mlm/last.safetensors" --n 128
"$mlm" --tokenizer byte --n 64 --k 16 --dim 32 --heads 2 --layers 2 --ff 64 --steps 1 \
	--batch 8 --threads 1 --max-docs 40 --log-dir "$tmp/mlmb" >"$tmp/mlmb.out" 2>&1 ||
	fail "byte pretraining exited $?"
expect 1 "has 261 token ids, BERT's vocabulary 30522" --init-from "$tmp/mlmb/last.safetensors"
# a vocabulary of as many tokens, one of them another: its hash differs
sed '2000s/.*/zzzzq/' "${srcdir:-.}/tests/data/tokenizer/bert-base-uncased-vocab.txt" \
	>"$tmp/vocab2.txt"
"$mlm" --vocab "$tmp/vocab2.txt" --n 64 --k 16 --dim 32 --heads 2 --layers 2 --ff 64 --steps 1 \
	--batch 8 --threads 1 --max-docs 40 --log-dir "$tmp/mlmv" >"$tmp/mlmv.out" 2>&1 ||
	fail "pretraining with another vocabulary exited $?"
expect 1 "^linformer_imdb: $tmp/mlmv/last.safetensors was trained with another vocabulary (FNV-1a 64 [0-9a-f]*), not this one" \
	--init-from "$tmp/mlmv/last.safetensors" --log-dir "$tmp/x"
expect 1 "needs --log-dir" --resume

# A checkpoint remembers how its run read text: --data's recipe keeps a long review's last
# tokens (here all n - 2 it reads), and --eval-only on its checkpoint reads the reviews so,
# reproducing the run's test line exactly; --predict reads a long text by its end too. The
# data: a tiny aclImdb of long reviews (the bundled subset's, each its own movie).
subset=${srcdir:-.}/examples/data/aclImdb_subset
for split in train test; do
	for label in neg pos; do
		mkdir -p "$tmp/long/$split/$label"
		i=0
		for f in $(ls "$subset/$split/$label" | sort -n | head -n 16); do
			cp "$subset/$split/$label/$f" "$tmp/long/$split/$label/${i}_${f#*_}"
			echo "http://www.imdb.com/title/tt$label$i/" >>"$tmp/long/$split/urls_$label.txt"
			i=$((i + 1))
		done
	done
done
ok "--data with a keep-tail recipe" "$prog" --data "$tmp/long" --n 64 --epochs 2 --batch 8 \
	--threads 1 --log-dir "$tmp/kt"
cp "$tmp/ok.out" "$tmp/kt.out"
text=$(head -c 4096 "$tmp/kt/last.safetensors" | grep -a -o '"text":"[^}]*}' | sed 's/[0-9a-f]\{16\}/H/')
[ "$text" = '"text":"{\"tokenizer\":\"wordpiece\",\"n\":64,\"keep_tail\":382,\"lowercase\":true,\"vocab_fnv1a64\":\"H\"}' ] &&
	echo "ok: the checkpoint says how its run read text" ||
	fail "the checkpoint's text metadata: $text"
ok "--eval-only of the keep-tail run" "$prog" --eval-only --data "$tmp/long" \
	--checkpoint "$tmp/kt/last.safetensors" --batch 8 --threads 1
[ "$(grep '^test: ' "$tmp/ok.out")" = "$(grep '^test: ' "$tmp/kt.out")" ] &&
	echo "ok: --eval-only reads as the keep-tail run did: $(grep '^test: ' "$tmp/ok.out")" ||
	fail "--eval-only: '$(grep '^test: ' "$tmp/ok.out")' after training's '$(grep '^test: ' "$tmp/kt.out")'"
review=$(cat "$tmp/long/test/pos/0_"*.txt)
for start in Dreadful Wonderful; do
	"$prog" --predict "$start, the start. $review" --checkpoint "$tmp/kt/last.safetensors" \
		--output "$tmp/tail-$start.csv" >"$tmp/tail.out" 2>&1 ||
		fail "--predict of a long review: $(cat "$tmp/tail.out")"
done
cmp -s "$tmp/tail-Dreadful.csv" "$tmp/tail-Wonderful.csv" &&
	echo "ok: --predict reads a long review by its end, as the run did" ||
	fail "--predict read the start of a long review: $(cat "$tmp/tail-Dreadful.csv" "$tmp/tail-Wonderful.csv")"
expect 1 "^linformer_imdb: --n: 32 contradicts $tmp/kt/last.safetensors, whose run read 64 tokens per example: leave --n out" \
	--eval-only --data "$tmp/long" --checkpoint "$tmp/kt/last.safetensors" --n 32
"$study" --eval-only --data "$tmp/long" --checkpoint "$tmp/kt/last.safetensors" \
	--vocab "$tmp/vocab2.txt" >"$tmp/v.out" 2>&1
[ $? -eq 1 ] && grep -q "^imdb_study: --vocab: $tmp/kt/last.safetensors was trained with another vocabulary" "$tmp/v.out" &&
	echo "ok: another vocabulary is refused" || fail "another vocabulary: $(cat "$tmp/v.out")"
expect 1 "no saved state" --resume --log-dir "$tmp/empty"

# the checkpoint: evaluation and prediction
ckpt=$tmp/a/best.safetensors
ok "--eval-only" "$prog" --eval-only --checkpoint "$tmp/a/last.safetensors" --max-test 32 \
	--threads 1
[ "$(grep '^test: ' "$tmp/ok.out")" = "$(grep '^test: ' "$tmp/a.out")" ] &&
	echo "ok: --eval-only reproduces the run's test accuracy" ||
	fail "--eval-only: $(grep '^test: ' "$tmp/ok.out") after training's $(grep '^test: ' "$tmp/a.out")"
ok "--predict" "$prog" --predict "A wonderful film." --checkpoint "$ckpt" --output "$tmp/p.jsonl"
grep '^[0-9.]* [0-9.]*$' "$tmp/ok.out" >"$tmp/p.txt"
awk 'NF == 2 && $1 >= 0 && $2 >= 0 && ($1 + $2 - 1) ^ 2 < 1e-6 { n++ } END { exit n != 1 }' \
	"$tmp/p.txt" && echo "ok: P(neg) P(pos) sum to 1" || fail "--predict printed: $(cat "$tmp/ok.out")"
# the probabilities are the softmax of the logits written
sed 's/.*\[\(.*\), \(.*\)\]}/\1 \2/' "$tmp/p.jsonl" | paste -d' ' - "$tmp/p.txt" |
	awk '{ e = exp($2 - $1); p = e / (1 + e); d = p - $4; exit !(d * d < 1e-8) }' &&
	echo "ok: --output's logits give the probabilities" || fail "logits $(cat "$tmp/p.jsonl") vs $(cat "$tmp/p.txt")"
printf 'Dull.\nGreat fun.\nAwful acting.\nGreat<br />fun.\n' >"$tmp/lines.txt"
ok "--predict-file" "$prog" --predict-file "$tmp/lines.txt" --checkpoint "$ckpt" --output "$tmp/p.csv"
[ "$(grep -c '^[0-9.]* [0-9.]*$' "$tmp/ok.out")" = 4 ] && [ "$(wc -l <"$tmp/p.csv")" = 5 ] &&
	echo "ok: four predictions and four CSV rows" || fail "--predict-file: $(cat "$tmp/ok.out")"
# a line break reads as the aclImdb reader reads it: one space
[ "$(grep '^[0-9.]* [0-9.]*$' "$tmp/ok.out" | sed -n 2p)" = \
	"$(grep '^[0-9.]* [0-9.]*$' "$tmp/ok.out" | sed -n 4p)" ] &&
	echo "ok: --predict-file reads <br /> as a space" ||
	fail "--predict-file: 'Great<br />fun.' and 'Great fun.' differ: $(cat "$tmp/ok.out")"

# --output refuses to replace an input of the run or a checkpoint (compared as files, not
# names), and writes atomically: a failed write (a file size limit standing in for a full
# disk) exits 1 naming the error and leaves the old file, with no temporary file
cp "$ckpt" "$tmp/ck.bin"
cp "$tmp/lines.txt" "$tmp/lines.bak"
expect 1 "ck.bin is --checkpoint $tmp/ck.bin, an input of the run" --predict x \
	--checkpoint "$tmp/ck.bin" --output "$tmp/./ck.bin"
expect 1 "a checkpoint's name" --predict x --checkpoint "$ckpt" --output "$ckpt"
expect 1 "lines.txt is --predict-file $tmp/lines.txt, an input" --predict-file "$tmp/lines.txt" \
	--checkpoint "$ckpt" --output "$tmp/../$(basename "$tmp")/lines.txt"
ln -s "$tmp/lines.txt" "$tmp/lines.link"
expect 1 "is --predict-file" --predict-file "$tmp/lines.txt" --checkpoint "$ckpt" \
	--output "$tmp/lines.link"
cp "$tmp/a/last.safetensors" "$tmp/last.csv"
expect 1 "last.csv is a checkpoint (step " --predict x --checkpoint "$ckpt" --output "$tmp/last.csv"
mkdir "$tmp/data"
cp -R "$tiny/test" "$tmp/data/test"
expect 1 "lies in --data $tmp/data, an input" --eval-only --checkpoint "$ckpt" --data "$tmp/data" \
	--output "$tmp/data/test/pos/logits.csv"
cmp -s "$ckpt" "$tmp/ck.bin" && cmp -s "$tmp/lines.txt" "$tmp/lines.bak" &&
	cmp -s "$tmp/a/last.safetensors" "$tmp/last.csv" && [ ! -e "$tmp/data/test/pos/logits.csv" ] &&
	echo "ok: the refused outputs changed nothing" || fail "a refused --output changed a file"
cp "$tmp/p.csv" "$tmp/p.bak"
(
	trap '' XFSZ
	ulimit -f 1 # 512 or 1024 bytes (dash, bash): the CSV of 100 reviews is longer
	"$prog" --eval-only --checkpoint "$ckpt" --max-test 100 --threads 1 --output "$tmp/p.csv"
) >"$tmp/full.out" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -q -- "--output: cannot write $tmp/p.csv: File too large" "$tmp/full.out" &&
	cmp -s "$tmp/p.csv" "$tmp/p.bak"; then
	echo "ok: a failed --output write exits 1 and keeps the old file"
else
	fail "--output on a full disk: exit $rc: $(tail -2 "$tmp/full.out")"
fi
ls "$tmp"/*.tmp.* >/dev/null 2>&1 && fail "temporary files left: $(ls "$tmp"/*.tmp.*)"

# errors
expect_full --predict "A wonderful film." --checkpoint "$ckpt"
expect_full --eval-only --checkpoint "$ckpt" --max-test 8 --threads 1
expect 1 "needs --checkpoint" --predict "x"
expect 1 "needs --checkpoint" --eval-only
expect 1 "goes with --eval-only" --checkpoint "$ckpt"
expect 1 "goes with --eval-only" --output "$tmp/o.csv"
expect 1 "not both" --predict x --predict-file "$tmp/lines.txt" --checkpoint "$ckpt"
expect 1 "cannot open" --predict-file "$tmp/none.txt" --checkpoint "$ckpt"
expect 1 "none.safetensors: cannot open" --predict x --checkpoint "$tmp/none.safetensors"
expect 1 "--data" --data "$tmp/nodata" --log-dir "$tmp/x"
expect 1 "--model: expected one of" --model bert
# a run that cannot fit is refused naming the real way around (the showcase has no
# --no-mem-check), and that way runs it
big="--model transformer --n 65536 --max-train 14 --max-test 8 --epochs 1 --batch 4 --threads 1"
# shellcheck disable=SC2086
expect 1 "GiB available: lower --n or --batch, or run it with study/imdb_study --no-mem-check (the recipe's flags: docs/examples.md)" \
	$big --log-dir "$tmp/big"
# shellcheck disable=SC2086
ok "study/imdb_study --no-mem-check runs the refused run" "$study" $big --no-mem-check \
	--log-dir "$tmp/big"
expect 1 "--frobnicate" --frobnicate
expect 0 "usage: linformer_imdb" --help

finish
