#!/usr/bin/env bash
# Sets up a fresh Debian/Ubuntu machine for kdtrain and builds build/kdtrain.
# Idempotent and non-interactive (CI has no stdin): each step is skipped when
# its result is already there, so running it twice costs seconds.
#
#   scripts/setup.sh [--no-python] [--no-build] [--cuda=AUTO|ON|OFF]
#
# Environment: KDTRAIN_BUILD_DIR (default build), KDTRAIN_BUILD_JOBS (default nproc).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

WITH_PYTHON=1
WITH_BUILD=1
CUDA_MODE=AUTO
for arg in "$@"; do
  case "$arg" in
    --no-python) WITH_PYTHON=0 ;;
    --no-build) WITH_BUILD=0 ;;
    --cuda=*) CUDA_MODE="${arg#--cuda=}" ;;
    -h|--help) sed -n '2,7p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown argument '$arg' (try --help)" >&2; exit 2 ;;
  esac
done
case "$CUDA_MODE" in
  AUTO|ON|OFF) ;;
  *) echo "setup.sh: --cuda must be AUTO, ON or OFF, got '$CUDA_MODE'" >&2; exit 2 ;;
esac

BUILD_DIR="${KDTRAIN_BUILD_DIR:-build}"
JOBS="${KDTRAIN_BUILD_JOBS:-$(nproc)}"
log() { echo "[setup] $*"; }

# --- system packages ---------------------------------------------------------
APT_PACKAGES=(build-essential cmake pkg-config nlohmann-json3-dev libcli11-dev libspdlog-dev
              catch2 libopenblas-dev libopenmpi-dev openmpi-bin libxxhash-dev
              clang libclang-rt-dev   # clang + libFuzzer: the fuzz targets (scripts/fuzz.sh)
              ccache)                 # cheap rebuilds; CMakeLists.txt uses it when present

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  # "install ok installed" is the only state that means the files are present.
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done
if ((${#missing[@]})); then
  if [[ $(id -u) -eq 0 ]]; then
    SUDO=()
  elif command -v sudo >/dev/null; then
    SUDO=(sudo -n)  # -n: fail instead of prompting, there is no stdin in CI
  else
    echo "setup.sh: missing packages ${missing[*]} and not root, no sudo" >&2
    exit 1
  fi
  log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${SUDO[@]}" apt-get update -q
  "${SUDO[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  log "system packages present"
fi

# --- Python tools ------------------------------------------------------------
if ((WITH_PYTHON)); then
  # Compare installed versions with the pins without starting pip (pip's resolver takes
  # seconds even when nothing changes).
  REQUIREMENTS=("$ROOT/requirements.txt" "$ROOT/requirements-eval.txt")
  # Where nvcc is, the SASS checks must run (CI fails them when they cannot): their
  # cuobjdump and nvdisasm come from PyPI when the toolkit lacks them.
  if [[ "$CUDA_MODE" != OFF ]] && { command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]]; }; then
    REQUIREMENTS+=("$ROOT/requirements-cuda-tools.txt")
  fi
  if python3 - "${REQUIREMENTS[@]}" <<'EOF'
import sys
from importlib import metadata
ok = True
for line in (l for path in sys.argv[1:] for l in open(path)):
    line = line.split("#", 1)[0].strip()
    if not line:
        continue
    name, _, want = line.partition("==")
    try:
        have = metadata.version(name.strip())
    except metadata.PackageNotFoundError:
        have = None
    # PEP 440: a pin without a local label accepts any local build ("2.9.1+cpu").
    if have is None or have.split("+", 1)[0] != want.strip():
        print(f"[setup] python: {name.strip()} is {have}, want {want.strip()}")
        ok = False
sys.exit(0 if ok else 1)
EOF
  then
    log "python requirements satisfied"
  else
    log "installing python requirements"
    python3 -m pip install --no-input "${REQUIREMENTS[@]/#/--requirement=}"
  fi
fi

# --- build ------------------------------------------------------------------------
if ((WITH_BUILD)); then
  cached_cuda=""
  if [[ -f "$BUILD_DIR/CMakeCache.txt" ]]; then
    cached_cuda="$(sed -n 's/^KDTRAIN_CUDA:[A-Z]*=//p' "$BUILD_DIR/CMakeCache.txt")"
  fi
  # Re-run the configure step only when there is none yet or the CUDA choice changed;
  # otherwise `cmake --build` re-configures by itself when CMakeLists.txt changes.
  if [[ ! -f "$BUILD_DIR/CMakeCache.txt" || "$cached_cuda" != "$CUDA_MODE" ]]; then
    log "configuring $BUILD_DIR (KDTRAIN_CUDA=$CUDA_MODE)"
    cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DKDTRAIN_CUDA="$CUDA_MODE"
  fi
  log "building with $JOBS jobs"
  cmake --build "$BUILD_DIR" -j"$JOBS"
  log "built $BUILD_DIR/kdtrain"
fi
