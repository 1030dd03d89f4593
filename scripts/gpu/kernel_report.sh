#!/usr/bin/env bash
# Resource and SASS report of the attention kernels, no GPU needed:
#   - `nvcc -Xptxas -v` per instantiation: registers, stack frame, spill bytes, static smem;
#   - the forward kernels' dynamic shared memory (ForwardLayout::kSmemBytes);
#   - `cuobjdump -sass` instruction counts per instantiation: HMMA.16816 (mma.sync),
#     LDSM (ldmatrix), LDGSTS (cp.async), LDL/STL (local memory: must be 0).
# Exits non-zero if any instantiation spills or touches local memory, or if the
# forward kernels lack HMMA.16816 / LDSM / LDGSTS.
#
# usage: scripts/gpu/kernel_report.sh [kernels/attention/flash_forward.cu ...]   (default: the
#        forward, backward and prefix-scan files). Needs nvcc (CUDA 13) and, for the
#        SASS part, cuobjdump + nvdisasm (the CUDA toolkit's, or
#        `pip install -r requirements-cuda-tools.txt`).
set -euo pipefail
cd "$(dirname "$0")/../.."
ARCH=${ARCH:-sm_90}
files=("$@")
[[ ${#files[@]} -gt 0 ]] || files=(kernels/attention/flash_forward.cu kernels/attention/flash_backward.cu kernels/attention/prefix_scan.cu)
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
[[ -x $NVCC ]] || { echo "kernel_report: nvcc not found (set NVCC)" >&2; exit 2; }

find_tool() {  # $1: name
  local t
  t=$(command -v "$1" 2>/dev/null || true)
  [[ -n $t ]] && { echo "$t"; return; }
  for d in "$(dirname "$NVCC")" $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "bin") for p in nvidia.__path__))' 2>/dev/null); do
    [[ -x $d/$1 ]] && { echo "$d/$1"; return; }
  done
}
CUOBJDUMP=$(find_tool cuobjdump || true)  # optional: the SASS columns
NVDISASM=$(find_tool nvdisasm || true)

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
demangle() { c++filt | sed -E 's/kdtrain::(cuda::|flash::)?//g; s/\(anonymous namespace\):://g'; }

echo "| kernel | registers | stack | spill st/ld | static smem | HMMA.16816 | LDSM | LDGSTS | LDL/STL |"
echo "|---|---|---|---|---|---|---|---|---|"
for f in "${files[@]}"; do
  obj=$tmp/$(basename "$f").cubin
  "$NVCC" -std=c++17 -arch="$ARCH" --expt-relaxed-constexpr -Isrc -I. -cubin -Xptxas -v "$f" -o "$obj" \
    2> "$tmp/ptxas.txt"
  sass=$tmp/sass.txt
  if [[ -n $CUOBJDUMP && -n $NVDISASM ]]; then
    PATH=$(dirname "$NVDISASM"):$PATH "$CUOBJDUMP" -sass "$obj" > "$sass"
  else
    : > "$sass"
  fi
  # ptxas: "Compiling entry function 'X'" ... "N bytes stack frame, S bytes spill stores, L bytes spill loads"
  # ... "Used R registers, ... M bytes smem"
  # (a process substitution, not a pipe: a failure found in the loop must reach $status)
  while read -r name regs stack spst spld smem; do
    counts="- | - | - | -"
    if [[ -s $sass ]]; then
      body=$(awk -v fn="$name" '/Function : /{ on = ($3 == fn) } on' "$sass")
      hmma=$(grep -c "HMMA.16816" <<< "$body" || true)
      ldsm=$(grep -c "LDSM" <<< "$body" || true)
      ldgsts=$(grep -c "LDGSTS" <<< "$body" || true)
      local_mem=$(grep -cE "\b(LDL|STL)\b" <<< "$body" || true)
      counts="$hmma | $ldsm | $ldgsts | $local_mem"
      [[ $local_mem -eq 0 ]] || status=1
      if [[ ( $name == *flash_forward_kernel* || $name == *bwd_main_kernel* ) && ( $hmma -eq 0 || $ldsm -eq 0 || $ldgsts -eq 0 ) ]]; then status=1; fi
    fi
    [[ $spst -eq 0 && $spld -eq 0 ]] || status=1
    echo "| $(echo "$name" | demangle) | $regs | $stack | $spst/$spld | $smem | $counts |"
  done < <(awk '
    /Compiling entry function/ { match($0, /\x27[^\x27]+\x27/); name = substr($0, RSTART + 1, RLENGTH - 2) }
    /bytes stack frame/ { stack = $1; spst = $5; spld = $9 }
    /Used [0-9]+ registers/ {
      regs = $0; sub(/.*Used /, "", regs); sub(/ registers.*/, "", regs)
      smem = 0; if (match($0, /[0-9]+ bytes smem/)) { smem = substr($0, RSTART, RLENGTH); sub(/ bytes smem/, "", smem) }
      print name, regs, stack, spst, spld, smem
    }' "$tmp/ptxas.txt")
done

# Dynamic shared memory of the forward and backward instantiations, from the one tile table.
cat > "$tmp/smem.cpp" <<'EOF'
#include <cstdio>
#include "kernels/attention/flash_backward_kernel.cuh"
#include "kernels/attention/flash_forward_kernel.cuh"
template <int D> void row() {
  constexpr auto t = kdtrain::flash::flash_tiles(D, kdtrain::flash::FlashPass::forward);
  using L = kdtrain::flash::ForwardLayout<D, t.Br, t.Bc, t.warps>;
  std::printf("| forward D=%d | Br %d, Bc %d, %d warps (%d m-tiles each) | %d threads | %d bytes |\n", D, t.Br, t.Bc,
              t.warps, L::kMTiles, L::kThreads, L::kSmemBytes);
}
template <int D, bool kAffine> void bwd_row() {
  constexpr auto t = kdtrain::flash::kBwdTiles;
  std::printf("| backward main D=%d%s | Br %d, Bc %d, %d warps (16 key rows each) | %d threads | %zu bytes |\n", D,
              kAffine ? " affine" : "", t.Br, t.Bc, t.warps, kdtrain::flash::kBwdThreads,
              kdtrain::flash_bwd::MainLayout<D, kAffine>::kBytes);
  std::printf("| backward main sm_90a D=%d%s | 8 MMA warps + a dq writer warpgroup | %d threads | %zu bytes |\n", D,
              kAffine ? " affine" : "", kdtrain::flash::bwd_main_threads(true, false),
              kdtrain::flash_bwd::MainLayout<D, kAffine>::kBytesTwoDq);
}
int main() { row<64>(); row<128>(); bwd_row<64, false>(); bwd_row<64, true>(); bwd_row<128, false>(); bwd_row<128, true>(); }
EOF
echo
echo "| kernel | tiles | block | dynamic smem |"
echo "|---|---|---|---|"
${CXX:-c++} -std=c++17 -Isrc -I. "$tmp/smem.cpp" -o "$tmp/smem" && "$tmp/smem"
[[ -n $CUOBJDUMP && -n $NVDISASM ]] || echo "kernel_report: cuobjdump/nvdisasm not found: SASS columns skipped" >&2
[[ $status -eq 0 ]] && echo "kernel_report: OK (no spills, no local memory)" || echo "kernel_report: FAILED (spills, local memory or missing instructions)"
exit $status
