#!/bin/sh
# On the GPU machine, from the repository root, after scripts/device/pack.sh here: every test
# program and shell test of the CUDA build with the GPU, then the GPU benchmarks. Logs and
# tables go to $OUT (default ./device-out); the last lines printed are the summary.
# Usage: scripts/device/run.sh [--tests-only | --cuda-tests | --bench-only]
set -u
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
mode=${1:-all}

# One test (run from the unpacked build): its log in $OUT, a PASS/SKIP/FAIL line on stdout.
run_one() {
	t=$1
	name=$(basename "$t" .sh)
	start=$(date +%s)
	case $t in
	*.sh) timeout 900 sh "$t" >"$OUT/$name.log" 2>&1 ;;
	*) timeout 900 "./$t" >"$OUT/$name.log" 2>&1 ;;
	esac
	rc=$?
	res=PASS
	[ $rc -eq 77 ] && res=SKIP
	[ $rc -ne 0 ] && [ $rc -ne 77 ] && res="FAIL ($rc)"
	echo "$res: $name ($(($(date +%s) - start)) s)" \
		"$(grep -o 'Checks: [0-9]*, Failures: [0-9]*, Errors: [0-9]*' "$OUT/$name.log" | tail -1)"
}
if [ "$mode" = --one ]; then
	run_one "$2"
	exit 0
fi

root=$(pwd)
export OUT=${OUT:-$root/device-out}
mkdir -p "$OUT"
# the programs carry absolute paths of the copy they were built in (test data, vocabulary)
built=/work/main/build-cuda/src
[ -e "$built" ] || { mkdir -p "$(dirname "$built")" && ln -s "$root" "$built"; }
rm -rf build-cuda && mkdir -p build-cuda && tar xzf .device/build.tar.gz -C build-cuda || exit 1
cuda_lib=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
	[ -e "$d/libcublas.so.13" ] && cuda_lib=$d && break
done
[ -n "$cuda_lib" ] || cuda_lib=$(dirname "$(find / -xdev -name 'libcublas.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH="$root/build-cuda/.libs:$root/.device/lib:$cuda_lib:${LD_LIBRARY_PATH:-}"
export srcdir="$root" OMP_WAIT_POLICY=passive
{ nvidia-smi; nvcc --version; } >"$OUT/device.txt" 2>&1
grep -E "Driver Version|H100|H200|release" "$OUT/device.txt"
cd build-cuda
summary="$OUT/summary.txt"
: >"$summary"

# The CUDA programs one at a time (they share the GPU), then the others 6 at a time.
run_tests() {
	for t in tests/test_cuda*; do
		run_one "$t"
	done | tee -a "$summary"
	[ "$mode" = --cuda-tests ] && return
	{
		ls tests/test_* | grep -v test_cuda
		ls "$root"/tests/test_*.sh
	} | CFORMER_NUM_THREADS=2 xargs -P 6 -n 1 "$self" --one | tee -a "$summary"
}

run_bench() {
	./bench/train_throughput --device cuda --n 512,2048,4096 --sgemm-size 8192 --warmup 3 \
		--reps 10 --csv "$OUT/train_cuda.csv" >"$OUT/train_cuda.md" 2>&1
	tail -6 "$OUT/train_cuda.md"
	./bench/linformer_table --device cuda --n 4096,8192,16384,32768,65536 --k 128,256 \
		--batches 1 --reps 3 --sgemm-size 8192 --max-seconds 60 \
		--csv "$OUT/table_cuda.csv" >"$OUT/table_cuda.md" 2>&1
	tail -12 "$OUT/table_cuda.md"
	(cd "$root" && PYTHONUNBUFFERED=1 python3 bench/pytorch/train_cuda.py --n 512,2048,4096 \
		--csv "$OUT/train_torch.csv") >"$OUT/train_torch.md" 2>&1
	tail -12 "$OUT/train_torch.md"
}

case $mode in --bench-only) ;; *) run_tests ;; esac
case $mode in all | --bench-only) run_bench ;; esac
echo "== summary"
cat "$summary"
