#!/usr/bin/env bash
# Builds kdtrain with CUDA here and packs it for a GPU machine that has the CUDA
# driver and toolkit but none of our Debian -dev packages: the binaries plus
# every shared library they need except glibc's own and CUDA's (spdlog, fmt,
# OpenBLAS, gfortran, MPI, libstdc++ ...) go into .carry/gpu (git-ignored, under
# the device tool's 64 MiB carry limit). scripts/gpu_check.sh uses it there.
#
#   scripts/package_gpu_build.sh [--arch 90]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
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
rm -rf "$OUT"
mkdir -p "$OUT/bin" "$OUT/lib"
cp "$BUILD/kdtrain" "$BUILD/kdtrain_tests" "$OUT/bin/"
# glibc's libraries and the CUDA driver/runtime stay the target's own.
ldd "$BUILD/kdtrain" "$BUILD/kdtrain_tests" | awk '/=> \//{print $3}' | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*|libresolv.so*|libutil.so*) ;;
    libcuda.so*|libcudart.so*|libcublas.so*|libcublasLt.so*|libnccl.so*|libnvidia*) ;;
    *) cp -L "$lib" "$OUT/lib/" ;;
  esac
done
git rev-parse HEAD > "$OUT/COMMIT"
du -sh "$OUT"
echo "packed $OUT (commit $(cut -c1-12 "$OUT/COMMIT")): run on the GPU machine with scripts/gpu_check.sh"
