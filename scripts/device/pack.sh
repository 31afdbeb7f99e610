#!/bin/sh
# Build cformer with the CUDA backend in build-cuda/src (programs linked with libtool's
# -no-install: no wrapper scripts, libcformer.so found in the tree) and pack what a GPU
# machine without BLIS, Check, cJSON, utf8proc, libarchive or Open MPI needs into .device/
# (git-ignored): the programs of the build tree (build.tar.xz) and the shared libraries they
# load that are neither glibc's nor CUDA's (lib.tar.xz). scripts/device/run.sh runs them there.
# Usage: scripts/device/pack.sh   (CUDA_ARCH overrides -gencode=arch=compute_90,code=[sm_90,
# compute_90]: Hopper machine code, and PTX the driver compiles for a newer GPU; PROGRAMS="P..."
# packs only those programs, e.g. "examples/linformer_mlm examples/linformer_imdb" beside the
# reviews of scripts/device/pack_imdb.sh, which this script leaves in .device/)
set -eu
cd "$(dirname "$0")/../.."
arch=${CUDA_ARCH:-"-gencode=arch=compute_90,code=[sm_90,compute_90]"}
jobs=$(nproc 2>/dev/null || echo 2)
# A copy of the working tree (tracked and untracked files, not the ignored ones), built in place:
# the checkout here may be configured in place itself, which rules out a VPATH build.
# A changed configure.ac starts afresh (a recheck under make would see LDFLAGS=-no-install).
cmp -s configure.ac build-cuda/src/configure.ac || rm -rf build-cuda/src
mkdir -p build-cuda/src
git ls-files -co --exclude-standard -z | xargs -0 cp -p --parents -t build-cuda/src
if [ ! -f build-cuda/src/Makefile ]; then
	(cd build-cuda/src && autoreconf -fi >/dev/null 2>&1 &&
		./configure -q --with-cuda --disable-static NVCCFLAGS="-O3 -std=c++17 $arch")
fi
make -C build-cuda/src -j"$jobs" LDFLAGS=-no-install all >/dev/null
make -C build-cuda/src -j"$jobs" LDFLAGS=-no-install check TESTS= >/dev/null # not run
rm -rf .device/lib .device/build.tar.* .device/lib.tar.*
mkdir -p .device/lib
# the programs make builds (a stale binary of a removed test stays out), or those named
printf 'print-programs:\n\t@echo $(PROGRAMS) $(check_PROGRAMS)\n' >build-cuda/programs.mk
progs=${PROGRAMS:-$(make -s -C build-cuda/src -f Makefile -f ../programs.mk print-programs)}
(cd build-cuda/src && tar cf - $progs .libs/libcformer.so*) | xz -T0 -6 >.device/build.tar.xz
# shared libraries a bare CUDA machine lacks (xz: libarchive brings ICU's 31 MB of data, 7.5
# MB compressed, and the device takes 64 MiB of files in all)
for p in $progs; do ldd "build-cuda/src/$p"; done | awk '/=> \//{ print $3 }' | sort -u |
	grep -Ev '/(libc|libm|libdl|librt|libpthread|ld-linux|libstdc\+\+|libgcc_s|libcudart|libcublas|libcublasLt|libnccl|libcformer)\.so' |
	while read -r lib; do cp -L "$lib" .device/lib/; done
tar cf - -C .device lib | xz -T0 -9 >.device/lib.tar.xz && rm -rf .device/lib
du -sh .device
