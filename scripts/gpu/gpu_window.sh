#!/usr/bin/env bash
# scripts/gpu/gpu_window.sh: the one command for a lent GPU. Everything worth knowing from a
# short window, in order of value, inside WINDOW_SECONDS (500: 8 min 20 s on an H100 or H200,
# counted from the script's start, so the checks before the steps are inside it; the windows
# of 2026-11-28 ended within a second of their budgets, and timeout_s 540 leaves 40 s to save).
#
# Through the device tool (docs/cuda.md, "The GPU window"):
#   1. here:  scripts/gpu/package_gpu_build.sh    builds and packs .carry/gpu.tar.xz (about 14 MiB)
#   2. there: run(command="bash scripts/gpu/gpu_window.sh --update-docs",
#                 carry=[".carry/gpu.tar.xz"], timeout_s=540)
#             the checkout travels by itself; the pack is the only other thing to carry
#   3. here:  scripts/gpu/gpu_window.sh --import FILES_AT/window
#             writes docs/gpu/latest.json, docs/gpu/DATE-COMMIT/ (the returned files) and the
#             measured table of docs/performance.md; commit them, naming the GPU and the commit.
# Results land in $OUT/window (./gpu_out/window without $OUT): env.txt first (GPU, driver,
# nvcc, torch, triton and transformers versions, where every library resolved), window.log,
# summary.json, table.txt, raw.tgz (every raw output) and, when a GPU is named, latest.json.
# All but env.txt are rewritten after every step, so a run cut short returns what it measured.
# --update-docs also writes the docs of step 3 in this checkout (on a machine that keeps it).
#
# Exit status: 0 every step ran or was cut for time, and the tests passed; 1 a test failed,
# was skipped or cut, or a step failed; 2 usage, or no build; 3 a binary cannot load its shared
# libraries (stopped before any GPU work); 4 CUDA cannot start (stopped after the first tests).
#
# The steps, in order of value (--plan prints their caps). A step gets the smaller of its cap
# and the time left, and is skipped when that is under the least time it can use:
#   a  tests, each case once: the tensor-core and wgmma wrappers against the emulator
#      ([cuda][tc], [cuda][wgmma]), the sm_90a flash kernels `auto` runs ([cuda][flash][sm90a]),
#      the rest of [cuda] (the step's other kernels), the real shapes ([realistic]), the other
#      attention cases, then the mma.sync flash kernels. A suite stopped by its time limit
#      is "cut at N s".
#   b  attention forward and backward at D 64 and 128, each timing written as it is measured:
#      kdtrain's baseline and SDPA, kdtrain's variants, the atomics timing build
#      (attn_determinism_cost), every kernel choice the binary offers
#      (scripts/gpu/kernel_choices.py), the atomics build once more per backward kernel
#      choice (attn_determinism_cost_by_choice), every other packed build
#      (bin/kdtrain_LABEL), PyTorch's variants; predicted beside measured where the pack
#      holds predictions.json.
#   c  the llama3.2-1b step at T 2048, micro-batch 8, for FIRST_VARIANTS (baseline affine):
#      kdtrain, then torch.compile variant by variant (the models built on the GPU).
#   d  NCCL at world size 1 (scripts/gpu/gpu_check_nccl.sh).
#   c  the cached-teacher step.
#   c  the cache writer: `kdtrain teacher-cache --json` tokens/s over the same teacher's
#      forward-only tokens/s (`kdtrain eval`), a random-weight llama3.2-1b at the step's shape.
#   e  compute-sanitizer racecheck and synccheck on [sanitize]; skipped at once where the GPU
#      runtime answers "Device not supported".
#   then, only where the whole cap still fits: the attention kernels under Nsight Compute (b
#   profile: PROFILES, ncu_summary.py), the other variants, and the step with TEACHER.
#
#   scripts/gpu/gpu_window.sh [--update-docs] [--build]    run the window
#   scripts/gpu/gpu_window.sh --plan | --import DIR | --help
#
# Environment: WINDOW_SECONDS, DEVICE (cuda), ONLY (a regex: the steps whose names it
# starts, the rest skipped, for a second window that runs what a first one left out),
# FIRST_VARIANTS, TORCH_VARIANTS (all), TEACHER
# (llama3.2-3b; "" skips), CACHE_TEACHER (PRESET) and CACHE_BATCHES (24) of the cache write,
# SANITIZE=0, the test filters PRIMITIVES WGMMA FLASH ATTENTION REALISTIC KERNELS SANITIZE_FILTER
# ("" skips a suite), the step shape PRESET SEQ MICRO_BATCH STEPS WARMUP, the caps
# ATTN_SECONDS (step b, 80) and TORCH_SECONDS (each torch step, 70; the baseline's 15 less),
# ATTN_ARGS (more bench_attention.py arguments), PROFILES ("D VARIANT" lines, the profile's;
# PROFILE_PRESET), ATTN_BUILDS (more --kdtrain-build specs, one a line: the hook for a build
# or kernel the binary does not announce),
# GPU_PACK_DIR, GPU_SITE_PACKAGES, GPU_DOCS_ROOT (the scripts' own tests set these).
# DEVICE=cpu runs the same sequence on the CPU at tiny shapes: a smoke test of the script (CI).
START=$(date +%s)
source "$(dirname "${BASH_SOURCE[0]}")/gpu_env.sh"
source "$ROOT/scripts/gpu/gpu_window_steps.sh"
export PYTHONUNBUFFERED=1
case "${1:-}" in
  --help|-h) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit 0 ;;
  --import) exec python3 scripts/gpu/gpu_report.py import "${2:?--import DIR}" --docs-root "${GPU_DOCS_ROOT:-$ROOT/docs}" ;;
  --plan) window_defaults; plan_table; exit 0 ;;
esac
gpu_output window window.log
gpu_options gpu_window "$@"
window_defaults
gpu_build
[[ -x "$KDTRAIN" && -x "$TESTS" ]] || { echo "gpu_window: no build ($KDTRAIN; run scripts/gpu/package_gpu_build.sh)"; exit 2; }
echo "== kdtrain GPU window  commit $COMMIT  device $DEVICE  budget ${BUDGET}s"
ENV_FILE="$OUTDIR/env.txt"
gpu_environment_report "$ENV_FILE"
gpu_resolve_libraries "$ENV_FILE" "$KDTRAIN" "$TESTS" ${PACK:+"$PACK"/bin/*}
VARIANTS="$("$KDTRAIN" info --variants | awk '{print $1}' | tr '\n' ' ')"  # every variant, from the binary
[[ -n "${VARIANTS// /}" ]] || { echo "gpu_window: '$KDTRAIN info --variants' listed no variant"; exit 2; }
REST_VARIANTS="$(for V in $VARIANTS; do [[ " $FIRST_VARIANTS " == *" $V "* ]] || echo "$V"; done | tr '\n' ' ')"
TORCH_VARIANTS="${TORCH_VARIANTS:-$VARIANTS}"
RAW="$(mktemp -d)"  # raw outputs, packed into $OUTDIR/raw.tgz after every step
SCRATCH="$(mktemp -d)"  # a step's large files (the cache write's checkpoint), never packed
trap 'rm -rf "$RAW" "$SCRATCH"' EXIT
[[ -n "$PACK" && -f "$PACK/predictions.json" ]] && cp "$PACK/predictions.json" "$RAW/"
cp "$ENV_FILE" "$RAW/"
export ROOT RAW SCRATCH START BUDGET DEVICE PRESET SEQ MB KDTRAIN TESTS KDTRAIN_ATOMIC_DQ TORCH_MODE TEACHER ATTN_ARGS ATTN_BUILDS

mapfile -t PLAN < <(plan)
for entry in "${PLAN[@]}"; do
  IFS="|" read -r name cap least _ call <<< "$entry"
  run_step "$name" "$cap" "$least" $call < /dev/null
  if [[ "$name" == "a tests" ]] && cuda_cannot_start; then
    record_phase "stop" "CUDA cannot start: the tests say 'SKIPPED: no CUDA device'" 0
    save
    echo "gpu_window: CUDA cannot start (the tests say 'SKIPPED: no CUDA device'); stopping (exit 4)"
    exit 4
  fi
done
save
echo "== done in $(( $(date +%s) - START ))s; $OUTDIR: $(cd "$OUTDIR" && echo *)"
window_verdict
VERDICT=$?
cat "$RAW/table.txt"  # the table last
exit $VERDICT

