# Sourced first by scripts/gpu_check.sh, gpu_check_nccl.sh and gpu_bench.sh: what the
# three GPU scripts share. Sourcing sets `-uo pipefail`, ROOT (the repository root) and
# makes it the working directory; the functions below do the rest.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 2

# gpu_output NAME [LOG]: OUTDIR = $OUT/NAME (or ./gpu_out/NAME), emptied; with LOG,
# everything the script prints from here on also goes to $OUTDIR/LOG.
gpu_output() {
  OUTDIR="${OUT:-$ROOT/gpu_out}/$1"
  rm -rf "$OUTDIR"
  mkdir -p "$OUTDIR"
  if [[ -n "${2:-}" ]]; then exec > >(tee "$OUTDIR/$2") 2>&1; fi
}

# gpu_options SCRIPT ARGS...: the scripts' arguments. --update-docs sets UPDATE_DOCS and
# UPDATE_TABLE (docs/gpu/latest.json and docs/performance.md, for scripts/gpu_report.py);
# --build (gpu_check only) packs the build first; anything else ends the script.
gpu_options() {
  local script="$1" arg
  shift
  UPDATE_DOCS="" UPDATE_TABLE=""
  for arg in "$@"; do
    case "$script $arg" in
      "gpu_check --build") "$ROOT/scripts/package_gpu_build.sh" || exit 2 ;;
      *" --update-docs") UPDATE_DOCS="$ROOT/docs/gpu/latest.json" UPDATE_TABLE="$ROOT/docs/performance.md" ;;
      *) echo "$script: unknown argument '$arg'"; exit 2 ;;
    esac
  done
}

# gpu_build: finds the build to run and names the commit and the GPU. Sets KDTRAIN,
# TESTS, COMMIT, GPU (empty unless DEVICE=cuda and nvidia-smi names one) and
# LD_LIBRARY_PATH for a packed build.
#
# The packed build (scripts/package_gpu_build.sh) travels as .carry/gpu.tar.xz (the
# device tool carries at most 64 MiB; unpacked it is about 60) and is unpacked here
# into .carry/gpu when that is missing or older than the archive. Without one, the
# binaries of build/ (KDTRAIN_BUILD_DIR) are used.
gpu_build() {
  local pkg="$ROOT/.carry/gpu"
  if [[ -f "$ROOT/.carry/gpu.tar.xz" && ( ! -f "$pkg/COMMIT" || "$ROOT/.carry/gpu.tar.xz" -nt "$pkg/COMMIT" ) ]]; then
    rm -rf "$pkg"
    tar -C "$ROOT/.carry" -xJf "$ROOT/.carry/gpu.tar.xz" || { echo "cannot unpack .carry/gpu.tar.xz"; exit 2; }
    touch "$pkg/COMMIT"
  fi
  if [[ -x "$pkg/bin/kdtrain" ]]; then
    export LD_LIBRARY_PATH="$pkg/lib:${LD_LIBRARY_PATH:-}"
    KDTRAIN="$pkg/bin/kdtrain"
    TESTS="$pkg/bin/kdtrain_tests"
    COMMIT="$(cat "$pkg/COMMIT")"
  else
    local build="${KDTRAIN_BUILD_DIR:-$ROOT/build}"
    KDTRAIN="${KDTRAIN_BINARY:-$build/kdtrain}"
    TESTS="$build/kdtrain_tests"
    COMMIT="$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)"
  fi
  GPU=""
  if [[ "${DEVICE:-cuda}" == cuda ]]; then
    GPU="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
  fi
}

# gpu_train_shard DIR: DIR/train.bin, a version-1 token shard of 60000 random common
# English words (fixed seed), for the scripts' short training runs.
gpu_train_shard() {
  python3 - "$1/train.txt" <<'PY'
import random, sys
random.seed(0)
words = "the of and to in is was for on that with as by at from his her an which were this are be".split()
open(sys.argv[1], "w").write(" ".join(random.choice(words) for _ in range(60000)))
PY
  "$KDTRAIN" data write --bytes "$1/train.txt" --out "$1/train.bin" --version 1 > /dev/null
}
