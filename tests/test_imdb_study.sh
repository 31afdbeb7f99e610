#!/bin/sh
# imdb_study end to end on small slices of the bundled IMDB subset: the training loss
# falls; metrics.csv has its columns and rows; the TensorBoard file parses back with the
# project's reader (tests/tb_dump: record framing and both CRCs) and matches the CSV;
# accumulated batches give the gradients of one large batch; a run stopped mid-epoch
# (--stop-after, the SIGINT path) and resumed with the command it prints ends with the same
# test accuracy and byte-identical checkpoints as an uninterrupted run; SIGTERM saves and
# exits 143; --ema evaluates averaged weights and resumes them exactly; --adv-eps trains twice;
# --positions conv trains a convolution instead of a table; --eval-only reproduces
# the run's test accuracy, a --keep-tail run's included (the checkpoint says how its run read
# text), and a contradicting --n is refused; --predict prints probabilities and --output
# writes the logits, refusing to replace an input or a checkpoint;
# --init-from takes an encoder; bad flags exit 1 naming the flag and the expected form, and
# --predict with its stdout on a full disk exits 1.
# Run from the build directory (as `make check` does); IMDB_STUDY and TB_DUMP override
# the programs.
set -u
prog=${IMDB_STUDY:-study/imdb_study}
tbdump=${TB_DUMP:-tests/tb_dump}
for p in "$prog" "$tbdump"; do
	if [ ! -x "$p" ]; then
		echo "test_imdb_study: $p not built" >&2
		exit 99
	fi
done
test_name=imdb_study
. "${srcdir:-.}/tests/lib.sh"

# run NAME ARGS...: run the program, output in $tmp/NAME.out, status in $rc.
run() {
	name=$1
	shift
	"$prog" "$@" >"$tmp/$name.out" 2>&1
	rc=$?
}

# check NAME WHAT: the last run (output in $tmp/NAME.out and .err) exited 0, else show why.
check() {
	if [ "$rc" -ne 0 ]; then
		fail "$2 exited $rc:"
		cat "$tmp/$1.out" "$tmp/$1.err" 2>/dev/null | sed 's/^/  | /'
		return 1
	fi
	echo "ok: $2"
}

# same WHAT A B: files A and B are byte-identical.
same() {
	if cmp -s "$2" "$3"; then echo "ok: $1"; else fail "$1: $2 and $3 differ"; fi
}

test_line() { grep '^test: ' "$1"; }

# Small and fast: 48 training reviews (36 train, 12 validation), 24 test, byte tokens, n 64,
# two accumulated batches of 4 per step (the last step of an epoch has one), one thread.
BASE="--max-train 48 --max-test 24 --val-fraction 0.25 --tokenizer byte --n 64 --k 16
	--dim 32 --heads 2 --layers 2 --ff 64 --batch 4 --accum 2 --threads 1 --log-every 1"
SMALL="$BASE --epochs 3 --lr 3e-3"

# ---- an uninterrupted run: outputs, CSV, TensorBoard -------------------------------------
# shellcheck disable=SC2086
run a $SMALL --log-dir "$tmp/a"
check a "training run" || {
	echo "$failures failure(s)"
	exit 1
}
for f in last.safetensors best.safetensors metrics.csv; do
	[ -s "$tmp/a/$f" ] || fail "no $f in the run directory"
done
for f in "$tmp"/a/*.tmp*; do
	[ ! -e "$f" ] || fail "temporary file left: $f"
done
grep -q '^test: loss [0-9.]* accuracy [0-9.]* ([0-9]*/24 reviews)$' "$tmp/a.out" ||
	fail "no test accuracy line in the output"
if ! grep -q 'tokens/s (batch x width' "$tmp/a.out" ||
	! grep -q 'peak memory [0-9.]* MB' "$tmp/a.out"; then
	fail "no tokens/s and peak memory summary"
fi

csv="$tmp/a/metrics.csv"
[ "$(head -1 "$csv")" = "step,epoch,split,loss,accuracy,lr,tokens_per_s,elapsed_s,peak_mb" ] ||
	fail "CSV header is '$(head -1 "$csv")'"
# 5 steps per epoch (9 batches, 2 per step): 15 train rows, 3 validation rows, 1 test row
counts=$(awk -F, 'NR > 1 { n[$3]++; if (NF != 9) bad++ } END {
	printf "%d %d %d %d", n["train"], n["val"], n["test"], bad }' "$csv")
[ "$counts" = "15 3 1 0" ] || fail "CSV rows (train val test badfields) are $counts"
awk -F, '$3 == "train" { if ($1 != ++s || $6 == "" || $7 <= 0) exit 1 }' "$csv" ||
	fail "CSV train rows: steps not 1..15 or lr/tokens_per_s missing"
awk -F, '$3 == "test" { t = $5 } END { exit !(t >= 0 && t <= 1) }' "$csv" ||
	fail "CSV test accuracy out of [0, 1]"

set -- "$tmp"/a/events.out.tfevents.*
if [ $# -ne 1 ] || [ ! -f "$1" ]; then
	fail "expected one TensorBoard event file, found: $*"
elif ! "$tbdump" "$1" >"$tmp/tb.txt" 2>"$tmp/tb.err"; then
	fail "the event file does not parse: $(cat "$tmp/tb.err")"
else
	for tag in train/loss train/acc val/loss val/acc lr test/acc; do
		grep -q "^$tag " "$tmp/tb.txt" || fail "no $tag scalars in the event file"
	done
	# the event file and the CSV hold the same training losses (float precision)
	if awk -F, 'NR == FNR { if ($1 == "train/loss") tb[$2] = $3; next }
		$3 == "train" { n++; d = tb[$1] - $4
			if (!($1 in tb) || d > 1e-5 || d < -1e-5) bad++ }
		END { exit bad || n != 15 }' FS=' ' "$tmp/tb.txt" FS=, "$csv"; then
		echo "ok: TensorBoard event file parses and matches the CSV"
	else
		fail "TensorBoard train/loss differs from the CSV"
	fi
fi

# ---- gradient accumulation: 2 batches of 4 make the gradients of one batch of 8 ----------
ACC="--max-train 48 --max-test 8 --val-fraction 0.25 --tokenizer byte --n 64 --k 16 --dim 32
	--heads 2 --layers 2 --ff 64 --steps 3 --clip 0 --dropout 0 --attn-dropout 0 --threads 1
	--log-every 1"
# shellcheck disable=SC2086
run x1 $ACC --batch 8 --accum 1 --log-dir "$tmp/x1"
check x1 "batch 8" || true
# shellcheck disable=SC2086
run x2 $ACC --batch 4 --accum 2 --log-dir "$tmp/x2"
check x2 "batch 4 x accum 2" || true
"$tbdump" "$tmp"/x1/events.* | grep -e '^train/grad_norm ' -e '^train/loss ' >"$tmp/x1.tb"
"$tbdump" "$tmp"/x2/events.* | grep -e '^train/grad_norm ' -e '^train/loss ' >"$tmp/x2.tb"
if awk 'NR == FNR { v[$1 $2] = $3; next }
	{ n++; d = (v[$1 $2] - $3) / $3; if (d > 1e-4 || d < -1e-4) bad++ }
	END { exit bad || n != 6 }' "$tmp/x1.tb" "$tmp/x2.tb"; then
	echo "ok: accumulated gradients equal one batch's"
else
	fail "accumulated gradient norms or losses differ:"
	paste "$tmp/x1.tb" "$tmp/x2.tb" | sed 's/^/  | /'
fi

# --token-mask corrupts the training input: the first loss changes, deterministically
for r in m1 m2; do
	# shellcheck disable=SC2086
	run $r $ACC --batch 8 --token-mask 0.5 --log-dir "$tmp/$r"
	check $r "--token-mask 0.5" || true
done
l1=$("$tbdump" "$tmp"/x1/events.* | awk '$1 == "train/loss" && $2 == 1 { print $3 }')
m1=$("$tbdump" "$tmp"/m1/events.* | awk '$1 == "train/loss" && $2 == 1 { print $3 }')
m2=$("$tbdump" "$tmp"/m2/events.* | awk '$1 == "train/loss" && $2 == 1 { print $3 }')
if [ -n "$l1" ] && [ -n "$m1" ] && [ "$m1" != "$l1" ] && [ "$m1" = "$m2" ]; then
	echo "ok: --token-mask changes the loss ($l1 -> $m1), the same each run"
else
	fail "--token-mask losses: plain '$l1', masked '$m1' and '$m2'"
fi

# ---- the loss falls: 12 reviews memorised with WordPiece tokens, no dropout ---------------
run w --max-train 16 --max-test 8 --val-fraction 0.25 --n 64 --k 16 --dim 32 --heads 2 \
	--layers 2 --ff 64 --batch 4 --epochs 12 --lr 3e-3 --dropout 0 --attn-dropout 0 \
	--threads 1 --log-every 3 --log-dir "$tmp/w"
if check w "WordPiece run"; then
	if ! awk -F, '$3 == "train" { if (!n++) first = $4; last = $4 }
		END { printf "training loss %.4f -> %.4f\n", first, last
			exit !(last < first / 2) }' "$tmp/w/metrics.csv" >"$tmp/loss.txt"; then
		fail "loss did not fall: $(cat "$tmp/loss.txt")"
	fi
	cat "$tmp/loss.txt"
fi

# ---- resume: stop in the middle of epoch 3 at step 12, resume with the printed command ---
# shellcheck disable=SC2086
run b $SMALL --log-dir "$tmp/b" --stop-after 12
if check b "stopped run" && ! grep -q 'stopped (--stop-after) at step 12 of 15' "$tmp/b.out"; then
	fail "no stop message in: $(cat "$tmp/b.out")"
fi
resume=$(sed -n 's/^to resume: //p' "$tmp/b.out")
case $resume in
*--resume) ;;
*) fail "no resume command printed" ;;
esac
# A run killed (SIGKILL) after its last checkpoint leaves rows past it: the resume drops them.
awk -F, -v OFS=, '$3 == "train" { last = $0 } END { $0 = last; for (s = 13; s <= 14; s++) { $1 = s; print } }' \
	"$tmp/b/metrics.csv" >>"$tmp/b/metrics.csv"
sh -c "$resume" >"$tmp/b2.out" 2>&1
rc=$?
if check b2 "resumed run"; then
	grep -q 'resumed at step 12 of 15' "$tmp/b2.out" ||
		fail "resumed run did not start at step 12"
	want=$(test_line "$tmp/a.out") got=$(test_line "$tmp/b2.out")
	[ "$want" = "$got" ] || fail "test accuracy after resume '$got' differs from '$want'"
	for f in last.safetensors best.safetensors; do
		same "resumed $f equals the uninterrupted one" "$tmp/a/$f" "$tmp/b/$f"
	done
	steps=$(awk -F, '$3 == "train" { printf "%s ", $1 }' "$tmp/b/metrics.csv")
	[ "$steps" = "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 " ] ||
		fail "resumed CSV train steps: $steps"
	# step by step, the same training loss, accuracy and learning rate
	cols() { awk -F, '$3 == "train" { print $1, $4, $5, $6 }' "$1"; }
	[ "$(cols "$tmp/a/metrics.csv")" = "$(cols "$tmp/b/metrics.csv")" ] ||
		fail "resumed CSV train rows differ from the uninterrupted run's"
	set -- "$tmp"/b/events.out.tfevents.*
	[ $# -eq 2 ] || fail "expected a second event file after resuming, found: $*"
fi
# ---- --ema: validated and tested on the averaged weights, which resume restores ----------
# shellcheck disable=SC2086
run ea $SMALL --ema 0.5 --log-dir "$tmp/ea"
if check ea "--ema run"; then
	# the averages change what is evaluated, not how the run trains
	split_rows() { awk -F, -v s="$2" '$3 == s { print $1, $4, $5, $6 }' "$1"; }
	[ "$(split_rows "$tmp/a/metrics.csv" train)" = "$(split_rows "$tmp/ea/metrics.csv" train)" ] ||
		fail "--ema changed the training rows"
	[ "$(split_rows "$tmp/a/metrics.csv" val)" != "$(split_rows "$tmp/ea/metrics.csv" val)" ] ||
		fail "--ema: validation rows equal those of the weights"
	run ee --eval-only --checkpoint "$tmp/ea/last-ema.safetensors" --max-test 24 --batch 4 \
		--threads 1
	want=$(test_line "$tmp/ea.out") got=$(test_line "$tmp/ee.out")
	[ "$want" = "$got" ] || fail "--ema: eval-only of the averages '$got', training's '$want'"
fi
# shellcheck disable=SC2086
run eb $SMALL --ema 0.5 --log-dir "$tmp/eb" --stop-after 7
check eb "--ema stopped run" || true
cp -r "$tmp/eb" "$tmp/ec"
sh -c "$(sed -n 's/^to resume: //p' "$tmp/eb.out")" >"$tmp/eb2.out" 2>&1
rc=$?
if check eb2 "--ema resumed run"; then
	want=$(test_line "$tmp/ea.out") got=$(test_line "$tmp/eb2.out")
	[ "$want" = "$got" ] || fail "--ema: test accuracy after resume '$got' differs from '$want'"
	for f in last.safetensors last-ema.safetensors best.safetensors; do
		same "--ema: resumed $f equals the uninterrupted one" "$tmp/ea/$f" "$tmp/eb/$f"
	done
fi
# last.safetensors alone is the run's state: the averages' file is only for evaluation
rm "$tmp/ec/last-ema.safetensors"
# shellcheck disable=SC2086
run ec2 $SMALL --ema 0.5 --log-dir "$tmp/ec" --resume
if check ec2 "--ema resumed without last-ema.safetensors"; then
	[ "$(test_line "$tmp/ea.out")" = "$(test_line "$tmp/ec2.out")" ] ||
		fail "--ema: resumed without last-ema.safetensors: $(test_line "$tmp/ec2.out")"
	same "--ema: last-ema.safetensors written again" "$tmp/ea/last-ema.safetensors" \
		"$tmp/ec/last-ema.safetensors"
fi
expect 1 "--ema: expected a number in \[0, 1), got '1'" --ema 1
# a resumed run must be given the same settings
# shellcheck disable=SC2086
expect 1 "--lr is '0.002' but the run being resumed used '0.003'" \
	$BASE --epochs 3 --lr 2e-3 --log-dir "$tmp/b" --resume
expect 1 "--resume: needs --checkpoint-dir" --resume
expect 1 "$tmp/none/last.safetensors: no saved state" --resume --checkpoint-dir "$tmp/none"

# ---- SIGTERM: the step finishes, last.safetensors is saved, exit 143 (128 + SIGTERM) --------
# shellcheck disable=SC2086
sigterm_run "$tmp/c/metrics.csv" 3 "$prog" $BASE --epochs 1000 --lr 3e-3 --log-dir "$tmp/c"
mv "$tmp/sigterm.out" "$tmp/c.out"
if [ "$rc" -ne 143 ]; then
	fail "the SIGTERM run exited $rc, not 143:"
	sed 's/^/  | /' "$tmp/c.out"
else
	echo "ok: SIGTERM run exits 143"
	grep -q '^interrupted at step [0-9]* of 5000' "$tmp/c.out" || fail "no interruption message"
	[ -s "$tmp/c/last.safetensors" ] || fail "SIGTERM saved no checkpoint"
	at=$(sed -n 's/^interrupted at step \([0-9]*\) .*/\1/p' "$tmp/c.out")
	resume=$(sed -n 's/^to resume: //p' "$tmp/c.out")
	sh -c "$resume --stop-after $((at + 2))" >"$tmp/c2.out" 2>&1
	rc=$?
	to=$((at + 2))
	if check c2 "resume after SIGTERM" &&
		! { grep -q "resumed at step $at of 5000" "$tmp/c2.out" &&
			grep -q "stopped (--stop-after) at step $to of 5000" "$tmp/c2.out"; }; then
		fail "resume after SIGTERM (at step $at): $(cat "$tmp/c2.out")"
	fi
fi

# ---- eval-only and predict from the checkpoint alone --------------------------------------
run e --eval-only --checkpoint "$tmp/a/last.safetensors" --max-test 24 --batch 4 --threads 1
if check e "eval-only"; then
	want=$(test_line "$tmp/a.out") got=$(test_line "$tmp/e.out")
	[ "$want" = "$got" ] || fail "eval-only '$got' differs from training's '$want'"
fi
# eval mode: no dropout, so the batch size changes nothing
run e2 --eval-only --checkpoint "$tmp/a/last.safetensors" --max-test 24 --batch 24 --threads 1
if check e2 "eval-only, one batch"; then
	want=$(test_line "$tmp/e.out") got=$(test_line "$tmp/e2.out")
	[ "$want" = "$got" ] || fail "eval-only with 1 batch '$got' differs from 6 batches '$want'"
fi
# the checkpoint remembers how its run read text: a --keep-tail run's test line, reproduced by
# --eval-only without the flag; the flag given reads as it says (and says so); a --n that
# contradicts the file is refused; a file from before checkpoints kept it reads as before,
# with a notice
# shellcheck disable=SC2086
run kt $BASE --steps 6 --lr 3e-3 --keep-tail 20 --log-dir "$tmp/kt"
if check kt "--keep-tail run"; then
	run ke --eval-only --checkpoint "$tmp/kt/last.safetensors" --max-test 24 --batch 4 --threads 1
	check ke "eval-only of the --keep-tail run" &&
		{ [ "$(test_line "$tmp/kt.out")" = "$(test_line "$tmp/ke.out")" ] ||
			fail "--keep-tail: eval-only '$(test_line "$tmp/ke.out")', run '$(test_line "$tmp/kt.out")'"; }
	run k0 --eval-only --checkpoint "$tmp/kt/last.safetensors" --max-test 24 --batch 4 \
		--threads 1 --keep-tail 0
	if check k0 "eval-only --keep-tail 0 of the --keep-tail 20 run" &&
		{ [ "$(test_line "$tmp/kt.out")" = "$(test_line "$tmp/k0.out")" ] ||
			! grep -q "^imdb_study: --keep-tail 0: reading as the flag says, not as the run of $tmp/kt/last.safetensors did (keep-tail 20)$" "$tmp/k0.out"; }; then
		fail "--keep-tail 0 at eval: '$(test_line "$tmp/k0.out")' with $(grep keep-tail "$tmp/k0.out")"
	fi
	expect 1 "^imdb_study: --n: 32 contradicts $tmp/kt/last.safetensors, whose run read 64 tokens per example" \
		--eval-only --checkpoint "$tmp/kt/last.safetensors" --n 32
fi
expect 0 "^imdb_study: ${srcdir:-.}/tests/data/checkpoints/conv_linformer_v0.safetensors does not say how its run read text (saved before checkpoints kept it): reading at n 8, keep-tail 0, the vocabulary unchecked$" \
	--eval-only --checkpoint "${srcdir:-.}/tests/data/checkpoints/conv_linformer_v0.safetensors" \
	--max-test 8 --batch 4 --threads 1
probs='^[01]\.[0-9]\{4\} [01]\.[0-9]\{4\}$'
"$prog" --predict "A wonderful, moving film; I loved it." --checkpoint "$tmp/a/best.safetensors" \
	--threads 1 >"$tmp/p.out" 2>"$tmp/p.err"
rc=$?
if check p "predict"; then
	if [ "$(wc -l <"$tmp/p.out")" -ne 1 ] || ! grep -q "$probs" "$tmp/p.out" ||
		! awk '{ s = $1 + $2; exit !(s > 0.999 && s < 1.001) }' "$tmp/p.out"; then
		fail "predict printed: $(cat "$tmp/p.out")"
	fi
fi
# --output: the logits at full precision, whose softmax is what --predict prints, and whose
# argmax reproduces the test accuracy of --eval-only
"$prog" --predict "A wonderful, moving film; I loved it." --checkpoint "$tmp/a/best.safetensors" \
	--threads 1 --output "$tmp/p.jsonl" >"$tmp/po.out" 2>/dev/null
if ! cmp -s "$tmp/p.out" "$tmp/po.out" ||
	! sed 's/.*"logits": \[\(.*\), \(.*\)\]}/\1 \2/' "$tmp/p.jsonl" | paste -d' ' - "$tmp/p.out" |
	awk '{ e = exp($2 - $1); p = 1 / (1 + e); d = p - $3; exit !(NF == 4 && d < 6e-5 && d > -6e-5) }'; then
	fail "--output .jsonl: $(cat "$tmp/p.jsonl") against $(cat "$tmp/p.out")"
else
	echo "ok: --predict --output writes the logits behind the printed probabilities"
fi
run eo --eval-only --checkpoint "$tmp/a/last.safetensors" --max-test 24 --batch 4 --threads 1 \
	--output "$tmp/e.csv"
if check eo "eval-only --output"; then
	hits=$(awk -F, 'NR > 1 { n++; if (($4 > $3) == ($2 == 1)) h++ } END { print n, h }' "$tmp/e.csv")
	want=$(sed -n 's/^test: .*(\([0-9]*\)\/\([0-9]*\) reviews)$/\2 \1/p' "$tmp/e.out")
	[ "$(head -1 "$tmp/e.csv")" = "review,label,logit_0,logit_1" ] && [ "$hits" = "$want" ] ||
		fail "--eval-only --output: $hits (rows, argmax hits), want $want"
fi
expect 1 "--output: goes with --predict" $BASE --steps 1 --output "$tmp/x.csv"
expect_full --predict "A wonderful film." --checkpoint "$tmp/a/best.safetensors"
printf 'Dreadful.\n\nOne of the best films of the decade.\n' >"$tmp/reviews.txt"
"$prog" --predict-file "$tmp/reviews.txt" --checkpoint "$tmp/w/last.safetensors" --batch 2 \
	--threads 1 >"$tmp/pf.out" 2>"$tmp/pf.err"
rc=$?
if check pf "predict-file"; then
	if [ "$(grep -c "$probs" "$tmp/pf.out")" -ne 3 ] ||
		[ "$(wc -l <"$tmp/pf.out")" -ne 3 ]; then
		fail "predict-file printed: $(cat "$tmp/pf.out")"
	fi
fi
# --output never replaces what the run reads (the same file under another name) or a
# checkpoint
cp "$tmp/reviews.txt" "$tmp/reviews.bak"
expect 1 "--output: $tmp/./reviews.txt is --predict-file $tmp/reviews.txt, an input of the run" \
	--predict-file "$tmp/reviews.txt" --checkpoint "$tmp/w/last.safetensors" --threads 1 \
	--output "$tmp/./reviews.txt"
cp "$tmp/w/last.safetensors" "$tmp/w/last.json"
expect 1 "--output: $tmp/w/last.json is a checkpoint" --predict x --threads 1 \
	--checkpoint "$tmp/a/best.safetensors" --output "$tmp/w/last.json"
cmp -s "$tmp/reviews.txt" "$tmp/reviews.bak" && cmp -s "$tmp/w/last.safetensors" "$tmp/w/last.json" ||
	fail "a refused --output changed its file"
# --keep-tail: a review longer than n - 2 bytes is read by its end too; a short one as before
# (the run read with keep-tail 0: the flag overrides what the checkpoint says)
long="Slow, dull, and far too long at the start, it drags on and on. Yet the ending is superb!"
short="Superb!"
for t in 0 20; do
	for txt in long short; do
		eval "review=\$$txt"
		"$prog" --predict "$review" --checkpoint "$tmp/a/best.safetensors" --keep-tail $t \
			--threads 1 >"$tmp/kt-$txt-$t.out" 2>"$tmp/kt.err" ||
			fail "--keep-tail $t: $(cat "$tmp/kt-$txt-$t.out" "$tmp/kt.err")"
	done
done
if ! cmp -s "$tmp/kt-long-0.out" "$tmp/kt-long-20.out" &&
	cmp -s "$tmp/kt-short-0.out" "$tmp/kt-short-20.out"; then
	echo "ok: --keep-tail reads a long review's end"
else
	fail "--keep-tail: long $(cat "$tmp/kt-long-0.out") / $(cat "$tmp/kt-long-20.out"), short $(cat "$tmp/kt-short-0.out") / $(cat "$tmp/kt-short-20.out")"
fi
# --pooled-test: train and test pooled, a seeded part of all of them held out as the test set;
# --eval-only with the same flag tests on the same reviews, without it on aclImdb's test split
# shellcheck disable=SC2086
run pa $BASE --steps 2 --pooled-test 0.5 --log-dir "$tmp/pa"
if check pa "--pooled-test run" &&
	! grep -q '(train and test splits pooled, 0.5 of the reviews held out' "$tmp/pa.out"; then
	fail "--pooled-test: no pooling line in $(cat "$tmp/pa.out")"
fi
for f in "--pooled-test 0.5" ""; do
	# shellcheck disable=SC2086
	run pe --eval-only --checkpoint "$tmp/pa/last.safetensors" --max-test 24 --batch 4 \
		--threads 1 $f
	check pe "eval-only ${f:-without --pooled-test}" && test_line "$tmp/pe.out" >"$tmp/pe-${f:+p}.line"
done
if [ "$(test_line "$tmp/pa.out")" = "$(cat "$tmp/pe-p.line")" ] &&
	! cmp -s "$tmp/pe-p.line" "$tmp/pe-.line"; then
	echo "ok: --eval-only --pooled-test tests on the run's pooled test reviews"
else
	fail "--pooled-test: run '$(test_line "$tmp/pa.out")', eval '$(cat "$tmp/pe-p.line")', official '$(cat "$tmp/pe-.line")'"
fi
# --embed-l2: the penalty's gradient reaches the embedding, so the run ends elsewhere
# shellcheck disable=SC2086
run l0 $BASE --steps 2 --log-dir "$tmp/l0"
# shellcheck disable=SC2086
run l2 $BASE --steps 2 --embed-l2 5 --log-dir "$tmp/l2"
if check l2 "--embed-l2 run" && [ "$(test_line "$tmp/l0.out")" = "$(test_line "$tmp/l2.out")" ]; then
	fail "--embed-l2 5 changed nothing: $(test_line "$tmp/l2.out")"
fi
# --pos-l2: the position embedding's penalty changes the weights, and not as --embed-l2's does
# shellcheck disable=SC2086
run lp $BASE --steps 2 --pos-l2 5 --log-dir "$tmp/lp"
if check lp "--pos-l2 run"; then
	if cmp -s "$tmp/l0/best.safetensors" "$tmp/lp/best.safetensors"; then
		fail "--pos-l2 5 changed nothing"
	elif cmp -s "$tmp/l2/best.safetensors" "$tmp/lp/best.safetensors"; then
		fail "--pos-l2 5 ended as --embed-l2 5: it penalised the token embedding"
	else
		echo "ok: --pos-l2 reaches the position embedding"
	fi
fi
# --proj-l2: without warmup the projections leave their start at step 1, and at step 2 the
# penalty pulls them back
# shellcheck disable=SC2086
run w0 $BASE --steps 2 --warmup 0 --log-dir "$tmp/w0"
# shellcheck disable=SC2086
run la $BASE --steps 2 --warmup 0 --proj-l2 50 --log-dir "$tmp/la"
if check la "--proj-l2 run" && cmp -s "$tmp/w0/best.safetensors" "$tmp/la/best.safetensors"; then
	fail "--proj-l2 50 changed nothing"
fi
# --positions conv: the convolution replaces the table, and an encoder without it refuses
# to take it over
# shellcheck disable=SC2086
run pc $BASE --steps 2 --warmup 0 --positions conv --pos-kernel 5 --log-dir "$tmp/pc"
if check pc "--positions conv run"; then
	grep -q "positions none + conv 5" "$tmp/pc.out" || fail "--pos-kernel 5 not in the summary"
	head -c 4096 "$tmp/pc/last.safetensors" | grep -q '"pos_conv.weight"' ||
		fail "--positions conv: no pos_conv.weight in the checkpoint"
	if head -c 4096 "$tmp/pc/last.safetensors" | grep -q '"pos.weight"'; then
		fail "--positions conv: the checkpoint still has a position table"
	fi
	expect 1 "--positions: conflicts with the encoder of --init-from" \
		--init-from "$tmp/pc/last.safetensors" --positions learned
fi
# --lazy-embed: at step 2 the rows of step 1's tokens that step 2 lacks stay put, where dense
# Adam's moments move them on
# shellcheck disable=SC2086
run lz $BASE --steps 2 --lazy-embed --log-dir "$tmp/lz"
if check lz "--lazy-embed run"; then
	if cmp -s "$tmp/l0/best.safetensors" "$tmp/lz/best.safetensors"; then
		fail "--lazy-embed changed nothing"
	else
		echo "ok: --lazy-embed changes the updates"
	fi
fi
# --adv-eps: the second pass at the perturbed embedding adds its gradient, so the run ends
# elsewhere; its loss column stays that of the clean pass (the first step's equals --adv-eps 0's)
# shellcheck disable=SC2086
run av $BASE --steps 2 --adv-eps 0.05 --log-dir "$tmp/av"
# shellcheck disable=SC2086
run a0 $BASE --steps 2 --adv-eps 0 --log-dir "$tmp/a0"
if check av "--adv-eps run" && check a0 "--adv-eps 0 run"; then
	first() { awk -F, '$3 == "train" { print $4; exit }' "$1/metrics.csv"; }
	if cmp -s "$tmp/a0/best.safetensors" "$tmp/av/best.safetensors"; then
		fail "--adv-eps 0.05 changed nothing"
	elif [ "$(first "$tmp/a0")" != "$(first "$tmp/av")" ]; then
		fail "--adv-eps: first training loss $(first "$tmp/av"), without $(first "$tmp/a0")"
	else
		echo "ok: --adv-eps trains on the perturbed embedding too"
	fi
fi
# --label-smoothing: softer targets change the gradients, so the run ends elsewhere
# shellcheck disable=SC2086
run sm $BASE --steps 2 --label-smoothing 0.2 --log-dir "$tmp/sm"
if check sm "--label-smoothing run"; then
	if cmp -s "$tmp/l0/best.safetensors" "$tmp/sm/best.safetensors"; then
		fail "--label-smoothing 0.2 changed nothing"
	else
		echo "ok: --label-smoothing changes the training"
	fi
fi
# --pooling attention: the query is trained and saved; eval-only rebuilds it from the checkpoint
# shellcheck disable=SC2086
run po $BASE --steps 2 --pooling attention --log-dir "$tmp/po"
if check po "--pooling attention run"; then
	run pq --eval-only --checkpoint "$tmp/po/last.safetensors" --max-test 24 --batch 4 --threads 1
	if ! check pq "eval-only of attention pooling"; then
		:
	elif [ "$(test_line "$tmp/po.out")" != "$(test_line "$tmp/pq.out")" ]; then
		fail "--pooling attention: eval-only '$(test_line "$tmp/pq.out")', run '$(test_line "$tmp/po.out")'"
	elif ! grep -q 'head.pool.query' "$tmp/po/last.safetensors"; then
		fail "--pooling attention: no head.pool.query in the checkpoint"
	fi
fi
# --embed-l2-ramp: over both steps (L 2.5, then 5) the weights end elsewhere; a ramp shorter
# than one step is no ramp
# shellcheck disable=SC2086
run lr $BASE --steps 2 --embed-l2 5 --embed-l2-ramp 1 --log-dir "$tmp/lr"
# shellcheck disable=SC2086
run ls $BASE --steps 2 --embed-l2 5 --embed-l2-ramp 0.4 --log-dir "$tmp/ls"
if check lr "--embed-l2-ramp run" && check ls "--embed-l2-ramp 0.4 run"; then
	if cmp -s "$tmp/l2/best.safetensors" "$tmp/lr/best.safetensors"; then
		fail "--embed-l2-ramp 1 changed nothing"
	elif ! cmp -s "$tmp/l2/best.safetensors" "$tmp/ls/best.safetensors"; then
		fail "--embed-l2-ramp 0.4 of 2 steps (under one step) changed the weights"
	else
		echo "ok: --embed-l2-ramp scales the penalty over its steps"
	fi
fi
expect 1 "this tokenizer 30522" --eval-only --checkpoint "$tmp/a/last.safetensors" \
	--tokenizer wordpiece
expect 1 "--predict: needs --checkpoint" --predict "great"
expect 1 "cannot open $tmp/none.txt" --predict-file "$tmp/none.txt" \
	--checkpoint "$tmp/a/last.safetensors"

# ---- init-from: the encoder of another checkpoint ---------------------------------------
# (the default model CC: per layer 8 attention, 4 conv projection, 4 norm and 4 feed-forward
# tensors; embed, pos and the final norm: 2 x 20 + 4 = 44)
expect 0 "encoder: 44 tensors from $tmp/w/last.safetensors" \
	--init-from "$tmp/w/last.safetensors" --max-train 16 --max-test 8 --val-fraction 0.25 \
	--batch 4 --steps 1 --threads 1 --log-dir "$tmp/i"
expect 1 "--n: conflicts with the encoder of --init-from" \
	--init-from "$tmp/w/last.safetensors" --n 128
expect 1 "--init-from: .*$tmp/none.safetensors" --init-from "$tmp/none.safetensors"

# ---- bad flags: exit 1 with a message naming the flag and the expected form -----------------
expect 1 "--lr: expected a number in (0, 10\], got 'abc'" --lr abc
expect 1 "--batch: expected an integer in \[1, 65536\], got '0'" --batch 0
expect 1 "--epochs: expected an integer in \[1, 1048576\], got '2.5'" --epochs 2.5
expect 1 "--dropout: expected a number in \[0, 1), got '1'" --dropout 1
expect 1 "--threads: expected an integer in \[0, 4096\], got '-1'" --threads -1
expect 1 "--sharing: expected one of none|headwise|kv|layerwise, got 'most'" --sharing most
expect 1 "unknown flag '--frobnicate'" --frobnicate
expect 1 "--epochs: missing value: expected --epochs E" --epochs
expect 1 "--resume: takes no value" --resume=yes
expect 1 "--lr: given twice" --lr 1e-3 --lr 2e-3
expect 1 "unexpected argument 'extra'" extra
expect 1 "--model: .*unknown preset 'bert'" --model bert
expect 1 "heads 3 must divide dim 32" --dim 32 --heads 3
expect 1 "k 100 not in \[1, max_len 64\]" --n 64 --k 100
expect 1 "--proj: applies to Linformer (L) layers; --model transformer has none" \
	--model transformer --proj conv
expect 1 "--k-list: needs --k-schedule list" --k-list 8,8
expect 1 "--eval-only: needs --checkpoint" --eval-only
expect 1 "--embed-l2: expected a number in \[0, 10\], got '-1'" --embed-l2 -1
expect 1 "--adv-eps: expected a number in \[0, 10\], got '-0.1'" --adv-eps -0.1
expect 1 "--label-smoothing: expected a number in \[0, 1), got '1'" --label-smoothing 1
expect 1 "--embed-l2-ramp: needs --embed-l2 or --pos-l2 L > 0" --embed-l2-ramp 0.5
expect 1 "--pos-l2: needs --positions learned" --pos-l2 0.1 --positions sinusoidal
expect 1 "--pos-kernel: needs --positions conv" --pos-kernel 5
expect 1 "--pos-kernel: 4 is even: expected an odd kernel" --positions conv --pos-kernel 4
expect 1 "--proj-l2: nn_anchor_init: no parameter name matches .*: expected Linformer layers" \
	--proj-l2 0.1 --model transformer --max-train 8 --max-test 8
expect 1 "--embed-l2-ramp: expected a number in \[0, 1\], got '2'" --embed-l2-ramp 2
expect 1 "--pooled-test: expected a number in \[0, 0.9\], got '1'" --pooled-test 1
expect 1 "reading the train split of --data $tmp/nodata" --data "$tmp/nodata" --log-dir "$tmp/x"
expect 0 "usage: imdb_study" --help

[ "$failures" -eq 0 ] || {
	echo "$failures failure(s)"
	exit 1
}
exit 0
