#!/usr/bin/env bash
# Builds kdtrain with CUDA here and packs it for a GPU machine that has the CUDA
# driver and toolkit but none of our Debian -dev packages: the binaries plus
# every shared library they need except glibc's own and CUDA's (spdlog, fmt,
# OpenBLAS, gfortran, MPI, libstdc++ ...) go into .carry/gpu (git-ignored), and
# the same compressed into .carry/gpu.tar.xz, the path to carry: unpacked it is
# about 60 MiB (OpenBLAS alone 36), packed about 10, and the device tool carries
# 64 MiB at most. The timing-only atomics build's kdtrain (KDTRAIN_ATTN_ATOMIC_DQ) goes
# with it as bin/kdtrain_atomic_dq, for scripts/gpu/gpu_window.sh. scripts/gpu/gpu_env.sh (gpu_build, for gpu_check.sh, gpu_bench.sh and gpu_check_nccl.sh)
# unpacks it on the GPU machine.
#
#   scripts/gpu/package_gpu_build.sh [--arch 90]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
ARCH=90
while (($#)); do
  case "$1" in
    --arch) ARCH="$2"; shift 2 ;;
    *) echo "package_gpu_build.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
BUILD=build-gpu
OUT=.carry/gpu
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DKDTRAIN_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCH" >/dev/null
cmake --build "$BUILD" -j"${KDTRAIN_BUILD_JOBS:-$(nproc)}"
# The timing-only build (KDTRAIN_ATTN_ATOMIC_DQ: dq by float atomics), for the window's
# attn_determinism_cost; only its kdtrain binary travels, as bin/kdtrain_atomic_dq.
cmake -S . -B "$BUILD-atomic-dq" -DCMAKE_BUILD_TYPE=Release -DKDTRAIN_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCH" \
  -DKDTRAIN_ATTN_ATOMIC_DQ=ON >/dev/null
cmake --build "$BUILD-atomic-dq" --target kdtrain -j"${KDTRAIN_BUILD_JOBS:-$(nproc)}"
rm -rf "$OUT"
mkdir -p "$OUT/bin" "$OUT/lib"
cp "$BUILD/kdtrain" "$BUILD/kdtrain_tests" "$OUT/bin/"
cp "$BUILD-atomic-dq/kdtrain" "$OUT/bin/kdtrain_atomic_dq"
# glibc's libraries and the CUDA driver/runtime stay the target's own.
ldd "$BUILD/kdtrain" "$BUILD/kdtrain_tests" "$BUILD-atomic-dq/kdtrain" | awk '/=> \//{print $3}' | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*|libresolv.so*|libutil.so*) ;;
    libcuda.so*|libcudart.so*|libcublas.so*|libcublasLt.so*|libnccl.so*|libnvidia*) ;;
    *) cp -L "$lib" "$OUT/lib/" ;;
  esac
done
git rev-parse HEAD > "$OUT/COMMIT"
strip --strip-unneeded "$OUT"/bin/* 2>/dev/null || true
XZ_OPT="-T0 -6" tar -C .carry -cJf .carry/gpu.tar.xz gpu
du -sh "$OUT" .carry/gpu.tar.xz
LIMIT=$((64 * 1024 * 1024))
SIZE=$(stat -c %s .carry/gpu.tar.xz)
if (( SIZE > LIMIT )); then
  echo "package_gpu_build.sh: .carry/gpu.tar.xz is $SIZE bytes, over the 64 MiB carry limit" >&2
  exit 1
fi
echo "packed .carry/gpu.tar.xz (commit $(cut -c1-12 "$OUT/COMMIT"), $((SIZE / 1024 / 1024)) MiB of 64):"
echo "  carry it and run: scripts/gpu/gpu_window.sh --update-docs   (the one command; gpu_check.sh and gpu_bench.sh are longer)"
