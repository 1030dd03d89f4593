#!/usr/bin/env bash
# Compiles kernels/*.cu for sm_90 (no GPU needed) and prints, per file, what the
# compiler's resource report and the SASS say about the memory-bound kernels:
# the most registers of any kernel, spill bytes, stack frames (local memory),
# 16-byte global loads/stores (LDG.E.128 / STG.E.128), 64-bit integer divisions
# (I2F.U64.RP opens nvcc's 64-bit division routine) and 32-bit ones (I2F.U32.RP).
#
#   scripts/gpu/kernel_sass_report.sh [FILE.cu ...]     (default: every kernels/*.cu outside kernels/attention/)
#   scripts/gpu/kernel_sass_report.sh --bwd-dq-check    the attention backward's SASS checks: builds
#       the main kernel's mma.sync build (kernels/attention/flash_backward.cu, sm_90) and its
#       wgmma build (flash_backward_sm90a.cu, sm_90a), each deterministic and atomics, and runs
#       bwd_sass_check.py (same folder) on each pair, which fails when a global load or
#       semaphore poll feeds the first dQ HMMA / HGMMA, a gpu-scope MEMBAR precedes the next
#       step's prefetch, or the atomics build adds without red.global.add.v4.f32
#       (docs/flash_attention.md).
#   scripts/gpu/kernel_sass_report.sh --load-order-check   builds the attention kernels as
#       scripts/gpu/attention_model.py does and runs load_order_check.py (same folder), which
#       fails when the prefix scan, the backward's prep or a forward's epilogue loads from
#       global memory after a store (one more round trip; docs/attention_model.md).
#
# cuobjdump and its nvdisasm come from the CUDA toolkit or, where the toolkit lacks
# them, from PyPI (pip install -r requirements-cuda-tools.txt; scripts/setup.sh does).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
NVCC="${NVCC:-nvcc}"
command -v "$NVCC" >/dev/null || { echo "kernel_sass_report: nvcc not found" >&2; exit 1; }
CUOBJDUMP="$(command -v cuobjdump || true)"
if [[ -z "$CUOBJDUMP" ]]; then
  CUOBJDUMP="$(python3 - <<'PY' 2>/dev/null || true
import glob, os, site
for d in site.getsitepackages() + [site.getusersitepackages()]:
    for p in glob.glob(os.path.join(d, "nvidia", "*", "bin", "cuobjdump")):
        print(p); raise SystemExit
PY
)"
fi
[[ -n "$CUOBJDUMP" ]] || { echo "kernel_sass_report: no cuobjdump (pip install -r requirements-cuda-tools.txt)" >&2; exit 1; }

if [[ ${1:-} == --bwd-dq-check ]]; then
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  status=0
  for arch in sm_90 sm_90a; do
    src=kernels/attention/flash_backward.cu; flags=(-arch=sm_90)
    [[ $arch == sm_90a ]] && src=kernels/attention/flash_backward_sm90a.cu && flags=(-gencode arch=compute_90a,code=sm_90a)
    for build in det atomic; do
      defs=(); [[ $build == atomic ]] && defs=(-DKDTRAIN_ATTN_ATOMIC_DQ=1)
      "$NVCC" -std=c++17 "${flags[@]}" --expt-relaxed-constexpr -Isrc -I. "${defs[@]}" -cubin "$src" \
        -o "$work/$arch.$build.cubin"
      PATH="$(dirname "$CUOBJDUMP"):$PATH" "$CUOBJDUMP" -sass "$work/$arch.$build.cubin" >"$work/$arch.$build.sass"
    done
    echo "== $arch ($src)"
    python3 "$(dirname "${BASH_SOURCE[0]}")/bwd_sass_check.py" "$work/$arch.det.sass" "$work/$arch.atomic.sass" \
      || status=1
  done
  exit $status
fi
if [[ ${1:-} == --load-order-check ]]; then
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  gpu="$(dirname "${BASH_SOURCE[0]}")"
  NVCC="$NVCC" python3 -c "import sys; sys.path.insert(0, sys.argv[1]); import attention_model
attention_model.compile_all(sys.argv[2])" "$gpu" "$work"
  python3 "$gpu/load_order_check.py" "$work"/{scan,bwd,fwd,fwd_sm90a}.sass
  exit
fi
files=("$@")
if ((${#files[@]} == 0)); then
  files=(kernels/*.cu)  # the attention family (kernels/attention/) has kernel_report.sh
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
printf "%-22s %5s %7s %6s %7s %7s %6s %6s\n" file regs spill stack LDG128 STG128 div64 div32
for f in "${files[@]}"; do
  name="$(basename "$f" .cu)"
  "$NVCC" -std=c++17 -O3 -arch=sm_90 --expt-relaxed-constexpr -Isrc -I. -c "$f" \
    -o "$work/$name.o" -Xptxas -v 2>"$work/$name.ptxas"
  "$CUOBJDUMP" -sass "$work/$name.o" >"$work/$name.sass"
  regs=$(grep -o 'Used [0-9]* registers' "$work/$name.ptxas" | awk '{print $2}' | sort -n | tail -1)
  spill=$(grep -o '[0-9]* bytes spill stores' "$work/$name.ptxas" | awk '{s+=$1} END {print s+0}')
  stack=$(grep -o '[0-9]* bytes stack frame' "$work/$name.ptxas" | awk '{s+=$1} END {print s+0}')
  printf "%-22s %5s %7s %6s %7s %7s %6s %6s\n" "$name" "${regs:-0}" "$spill" "$stack" \
    "$(grep -c 'LDG.E.128' "$work/$name.sass" || true)" "$(grep -c 'STG.E.128' "$work/$name.sass" || true)" \
    "$(grep -c 'I2F.U64.RP' "$work/$name.sass" || true)" "$(grep -c 'I2F.U32.RP' "$work/$name.sass" || true)"
done
