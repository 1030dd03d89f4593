#!/usr/bin/env bash
# Builds kdtrain with CUDA here and packs it for a GPU machine that has the CUDA
# driver and toolkit but none of our Debian -dev packages: the binaries plus
# every shared library they need except glibc's own and CUDA's (spdlog, fmt,
# OpenBLAS, gfortran, MPI, libstdc++ ...) go into .carry/gpu (git-ignored), and
# the same compressed into .carry/gpu.tar.xz, the path to carry: unpacked it is
# about 77 MB (OpenBLAS alone 37), packed about 14 MiB, and the device tool carries
# 64 MiB at most. The timing-only atomics build's kdtrain (KDTRAIN_ATTN_ATOMIC_DQ) goes
# with it as bin/kdtrain_atomic_dq, and any other kdtrain binary in .carry/extra-bin/
# as bin/kdtrain_LABEL (the window times each), for scripts/gpu/gpu_window.sh.
# The attention performance model's predictions (scripts/gpu/attention_model.py --json FILE,
# from this source's SASS) go in as predictions.json: the window prints them beside the
# measured times. scripts/gpu/gpu_env.sh (gpu_build)
# unpacks the pack on the GPU machine; libnccl, libcudart and libcublas stay the
# machine's (its NVIDIA Python packages carry them, and the window checks that every
# binary loads before it starts).
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
# ccache, when installed, makes the second tree (one option apart) mostly cache hits.
LAUNCH=()
command -v ccache > /dev/null && LAUNCH=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DKDTRAIN_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCH" \
  "${LAUNCH[@]}" >/dev/null
cmake --build "$BUILD" -j"${KDTRAIN_BUILD_JOBS:-$(nproc)}"
# The timing-only build (KDTRAIN_ATTN_ATOMIC_DQ: dq by float atomics), for the window's
# attn_determinism_cost; only its kdtrain binary travels, as bin/kdtrain_atomic_dq.
cmake -S . -B "$BUILD-atomic-dq" -DCMAKE_BUILD_TYPE=Release -DKDTRAIN_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCH" \
  -DKDTRAIN_ATTN_ATOMIC_DQ=ON "${LAUNCH[@]}" >/dev/null
cmake --build "$BUILD-atomic-dq" --target kdtrain -j"${KDTRAIN_BUILD_JOBS:-$(nproc)}"
rm -rf "$OUT"
mkdir -p "$OUT/bin" "$OUT/lib"
cp "$BUILD/kdtrain" "$BUILD/kdtrain_tests" "$OUT/bin/"
cp "$BUILD-atomic-dq/kdtrain" "$OUT/bin/kdtrain_atomic_dq"
for extra in .carry/extra-bin/kdtrain_*; do
  [[ -x "$extra" ]] && cp "$extra" "$OUT/bin/"
done
python3 scripts/gpu/attention_model.py --json "$OUT/predictions.json" > /dev/null \
  || echo "package_gpu_build.sh: scripts/gpu/attention_model.py failed; the window will time without predictions" >&2
# glibc's libraries and the CUDA driver/runtime stay the target's own.
ldd "$OUT"/bin/* | awk '/=> \//{print $3}' | sort -u | while read -r lib; do
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
echo "  on the device tool: run(command=\"bash scripts/gpu/gpu_window.sh --update-docs\", carry=[\".carry/gpu.tar.xz\"], timeout_s=540)"
echo "  then here: scripts/gpu/gpu_window.sh --import FILES_AT/window   (scripts/gpu/gpu_window.sh --help)"
