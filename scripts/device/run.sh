#!/bin/sh
# On the GPU machine, from the repository root, after scripts/device/pack.sh here: the CUDA
# test programs, the GPU benchmarks, then every other test program and shell test of the
# CUDA build. Logs and tables go to a work folder that is archived into $OUT/results.tgz after
# every step (the device tool returns 8 files at most, and what a killed run left); the
# summary is $OUT/summary.txt and the last lines printed.
# Usage: scripts/device/run.sh [--tests-only | --cuda-tests | --bench-only | --profile |
#        --pretrain | --cuda-tests-beside]...   (several run in order, in one results.tgz;
#        --cuda-tests-beside starts the CUDA tests in the background, beside what follows)
# The device call carries .device/build.tar.xz and .device/lib.tar.xz, and for --pretrain
# .device/aclImdb.tar.xz too (scripts/device/pack_imdb.sh: 37 MB). The device refused the
# whole build beside the reviews (over its 64 MiB with the tree); for --cuda-tests and
# --pretrain pack the programs they run (53 MB with the reviews): PROGRAMS="tests/test_cuda
# tests/test_cuda_models study/imdb_study examples/linformer_mlm examples/linformer_imdb".
set -u
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
mode=${1:-all}

# One test (run from the unpacked build): its log in $W, a PASS/SKIP/FAIL line on stdout.
run_one() {
	t=$1
	name=$(basename "$t" .sh)
	start=$(date +%s)
	case $t in
	*.sh) timeout "${TEST_LIMIT:-300}" sh "$t" >"$W/$name.log" 2>&1 ;;
	*) timeout "${TEST_LIMIT:-300}" "./$t" >"$W/$name.log" 2>&1 ;;
	esac
	rc=$?
	res=PASS
	[ $rc -eq 77 ] && res=SKIP
	[ $rc -ne 0 ] && [ $rc -ne 77 ] && res="FAIL ($rc)"
	echo "$res: $name ($(($(date +%s) - start)) s)" \
		"$(grep -o 'Checks: [0-9]*, Failures: [0-9]*, Errors: [0-9]*' "$W/$name.log" | tail -1)"
}
if [ "$mode" = --one ]; then
	run_one "$2"
	exit 0
fi

root=$(pwd)
export OUT=${OUT:-$root/device-out}
export W=/tmp/cformer-device
rm -rf "$W" && mkdir -p "$W" "$OUT"
summary="$OUT/summary.txt"
: >"$summary"
save() { tar czf "$OUT/results.tgz" -C "$W" . ; }
# the programs carry absolute paths of the copy they were built in (test data, vocabulary)
built=/work/main/build-cuda/src
[ -e "$built" ] || { mkdir -p "$(dirname "$built")" && ln -s "$root" "$built"; }
# the build was made in place: its programs go where they were built, beside the sources
# (the examples find their bundled data from their own place)
# (xz archives: with tar's xz, else with Python's tarfile, where the machine has no xz)
unpack() {
	tar xJf "$1" -C "$2" 2>/dev/null ||
		python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$1" "$2"
}
unpack .device/build.tar.xz . && unpack .device/lib.tar.xz .device || exit 1
cuda_lib=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
	[ -e "$d/libcublas.so.13" ] && cuda_lib=$d && break
done
[ -n "$cuda_lib" ] || cuda_lib=$(dirname "$(find / -xdev -name 'libcublas.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH="$root/.libs:$root/.device/lib:$cuda_lib:${LD_LIBRARY_PATH:-}"
export srcdir="$root" OMP_WAIT_POLICY=passive CK_VERBOSITY=verbose PATH="$PATH:/usr/local/cuda/bin"
{ nvidia-smi; nvcc --version; uname -a; } >"$W/device.txt" 2>&1
grep -E "Driver Version|H100|H200|release" "$W/device.txt" | tee -a "$summary"

# The CUDA programs one at a time (they share the GPU).
cuda_tests() {
	for t in $(ls tests/test_cuda* | grep -v '\.[ch]$'); do
		run_one "$t" | tee -a "$summary"
		save
	done
}
# The others 8 at a time.
other_tests() {
	ls tests/test_* | grep -v -e test_cuda -e '\.[ch]$' | CFORMER_NUM_THREADS=2 xargs -P 8 -n 1 "$self" --one | tee -a "$summary"
	save
}
# One benchmark step: its output in $W/NAME.md, its tail in the summary.
bench() {
	name=$1 lines=$2 limit=$3
	shift 3
	start=$(date +%s)
	timeout "$limit" "$@" >"$W/$name.md" 2>&1
	echo "== $name: exit $? ($(($(date +%s) - start)) s)" | tee -a "$summary"
	tail -"$lines" "$W/$name.md" | tee -a "$summary"
	save
}
benchmarks() {
	bench train_cuda 14 ${BENCH_LIMIT:-150} ./bench/train_throughput --device cuda \
		--n 512,2048,4096 --sgemm-size 8192 --warmup 3 --reps 10 --max-seconds 20 \
		--csv "$W/train_cuda.csv"
	for p in bf16 tf32; do
		bench train_cuda_$p 14 ${BENCH_LIMIT:-150} ./bench/train_throughput --device cuda \
			--n 512,2048,4096 --precision $p --warmup 3 --reps 10 --max-seconds 20 \
			--csv "$W/train_cuda_$p.csv"
	done
	# PyTorch at its strongest: f32, tf32 and bf16 autocast, eager and compiled (the
	# fastest of each reported; max-autotune's tuning takes minutes a shape: TORCH_COMPILE)
	bench train_torch 20 ${TORCH_LIMIT:-300} env PYTHONUNBUFFERED=1 python3 \
		"$root/bench/pytorch/train_cuda.py" --n 512,2048,4096 --precision f32,tf32,bf16 \
		--compile "${TORCH_COMPILE:-none,default}" --csv "$W/train_torch.csv"
	bench table_cuda 16 ${BENCH_LIMIT:-150} ./bench/linformer_table --device cuda \
		--n 4096,8192,16384,32768,65536 --k 128,256 --batches 1,max --reps 1 --sgemm-size 8192 \
		--max-seconds 15 --csv "$W/table_cuda.csv"
}
# Each kernel's time in one Linformer training step at n 4096 (Nsight Compute, clocks as found).
profile() {
	bench profile 3 ${BENCH_LIMIT:-150} ncu --clock-control none --metrics gpu__time_duration.sum \
		--csv --log-file "$W/profile.csv" ./bench/train_throughput --device cuda \
		--models linformer --n 4096 --warmup 1 --reps 1 --sgemm-size 256
}

# The pretraining recipe of docs/results.md on the GPU (scripts/experiments/pretrain_finetune.sh
# --device cuda) over the reviews of scripts/device/pack_imdb.sh. A step at n = 512 is bound by
# the host's kernel launches, so the stages that can run at once do, each a process of its
# own: phase 1, then every model's phase 2, then each model's fine-tunings (its seeds), then
# one last run (all reused) writes the tables. PRETRAIN_MODELS and PRETRAIN_SEEDS choose (default
# the three models, seeds 1 2 3), PRETRAIN_FLAGS adds flags (e.g. "--p1-steps 16000"),
# PRETRAIN_LIMIT bounds the whole (seconds, default 540). The stages keep their checkpoints in
# build-pretrain/ (ignored, not carried), so a second call on the still-warm machine resumes
# where a stopped one left off.
pretrain() {
	[ -e .device/aclImdb.tar.xz ] || {
		echo "no .device/aclImdb.tar.xz: run scripts/device/pack_imdb.sh" | tee -a "$summary"
		return 1
	}
	start=$(date +%s)
	end=$((start + ${PRETRAIN_LIMIT:-540}))
	models=${PRETRAIN_MODELS:-linformer transformer conv-linformer} seeds=${PRETRAIN_SEEDS:-1 2 3}
	# recipe LOG THREADS FLAGS...: the script within what is left of the limit
	recipe() {
		log=$1 threads=$2
		shift 2
		[ $((end - $(date +%s))) -gt 0 ] || return 124
		# shellcheck disable=SC2086 # flag words
		timeout $((end - $(date +%s))) scripts/experiments/pretrain_finetune.sh \
			--data .device/aclImdb.tar.xz --device cuda --bin . --out build-pretrain \
			--threads "$threads" ${PRETRAIN_FLAGS:-} "$@" >>"$W/pretrain-$log.log" 2>&1
	}
	recipe p1 8 --models "" # phase 1 alone (no models: empty tables)
	pids=""
	for m in $models; do
		recipe "p2-$m" 4 --models "$m" --seeds "" &
		pids="$pids $!"
	done
	wait $pids # (not the tests beside)
	for m in $models; do # a model's seeds at once, so that a stopped call has finished models
		pids=""
		for s in $seeds; do
			recipe "ft-$m-s$s" 2 --models "$m" --seeds "$s" &
			pids="$pids $!"
		done
		wait $pids
	done
	recipe all 8 --models "$models" --seeds "$seeds"
	echo "== pretrain: exit $? ($(($(date +%s) - start)) s)" | tee -a "$summary"
	tail -12 "$W/pretrain-all.log" | tee -a "$summary"
	mkdir -p "$W/pretrain"
	(cd build-pretrain && find . -name '*.safetensors' -prune -o -type f -print |
		tar cf - -T -) | tar xf - -C "$W/pretrain"
	save
}

# the modes named, in order (e.g. --cuda-tests --pretrain), or everything but --pretrain
[ $# -gt 0 ] || set -- all
for mode in "$@"; do
	case $mode in
	--pretrain) pretrain ;;
	--cuda-tests) cuda_tests ;;
	--cuda-tests-beside) (save() { :; } && cuda_tests >/dev/null) & ;;
	--tests-only) cuda_tests && other_tests ;;
	--bench-only) benchmarks ;;
	--profile) profile ;;
	*) cuda_tests && benchmarks && other_tests && profile ;;
	esac
done
wait # for --cuda-tests-beside
save
echo "== summary"
cat "$summary"
