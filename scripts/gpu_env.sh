# Sourced by scripts/gpu_check.sh and scripts/gpu_bench.sh: finds the build to run and
# names the commit and the GPU. Sets KDTRAIN, TESTS, COMMIT, GPU (empty unless
# DEVICE=cuda and nvidia-smi names one) and LD_LIBRARY_PATH for a packed build.
#
# The packed build (scripts/package_gpu_build.sh) travels as .carry/gpu.tar.xz (the
# device tool carries at most 64 MiB; unpacked it is about 60) and is unpacked here
# into .carry/gpu when that is missing or older than the archive. Without one, the
# binaries of build/ (KDTRAIN_BUILD_DIR) are used.
PKG="$ROOT/.carry/gpu"
if [[ -f "$ROOT/.carry/gpu.tar.xz" && ( ! -f "$PKG/COMMIT" || "$ROOT/.carry/gpu.tar.xz" -nt "$PKG/COMMIT" ) ]]; then
  rm -rf "$PKG"
  tar -C "$ROOT/.carry" -xJf "$ROOT/.carry/gpu.tar.xz" || { echo "cannot unpack .carry/gpu.tar.xz"; exit 2; }
  touch "$PKG/COMMIT"
fi
if [[ -x "$PKG/bin/kdtrain" ]]; then
  export LD_LIBRARY_PATH="$PKG/lib:${LD_LIBRARY_PATH:-}"
  KDTRAIN="$PKG/bin/kdtrain"
  TESTS="$PKG/bin/kdtrain_tests"
  COMMIT="$(cat "$PKG/COMMIT")"
else
  BUILD="${KDTRAIN_BUILD_DIR:-$ROOT/build}"
  KDTRAIN="${KDTRAIN_BINARY:-$BUILD/kdtrain}"
  TESTS="$BUILD/kdtrain_tests"
  COMMIT="$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)"
fi
GPU=""
if [[ "${DEVICE:-cuda}" == cuda ]]; then
  GPU="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
fi
