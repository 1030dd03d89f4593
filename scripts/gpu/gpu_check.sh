#!/usr/bin/env bash
# One command on a GPU machine (docs/cuda.md): the CUDA test suite, the attention
# cases at the models' real shapes, compute-sanitizer (memcheck; racecheck on
# attention, loss and reductions), and a short GPU training run next to the same
# run on the CPU. Raw outputs, a summary.json and gpu_check.log go to $OUT/check
# (or ./gpu_out/check); a short table is printed last. Uses the build packed by
# scripts/gpu/package_gpu_build.sh (.carry/gpu.tar.xz), else build/ (--build packs first);
# scripts/gpu/gpu_env.sh (sourced first, with what the GPU scripts share) resolves which.
#
#   scripts/gpu/gpu_check.sh [--build] [--update-docs]
#
# --update-docs merges tests_passed / tests_failed (with commit and GPU) into
# docs/gpu/latest.json and rewrites the measured table of docs/performance.md. Environment: MEMCHECK_TIMEOUT (default 150 s),
# RACECHECK_TIMEOUT (120 s), SANITIZE=0 skips the sanitizers, TRAIN_STEPS (50).
# CPU smoke run of the script itself (the CUDA tests run against the CPU backend,
# KDTRAIN_CUDA_TESTS_ON_CPU=1; nothing is learnt about the GPU):
#   DEVICE=cpu SUITE="[cuda][rope]" REALISTIC="[cuda][rope]" TRAIN_STEPS=3 OUT=/tmp/gc scripts/gpu/gpu_check.sh
source "$(dirname "${BASH_SOURCE[0]}")/gpu_env.sh"
gpu_output check gpu_check.log
gpu_options gpu_check "$@"
DEVICE="${DEVICE:-cuda}"
SUITE="${SUITE:-[cuda]~[realistic]}"
REALISTIC="${REALISTIC:-[realistic]}"
MEMCHECK_FILTER="${MEMCHECK_FILTER:-[cuda]~[realistic]~[determinism]~[matmul]~[flash]}"
RACECHECK_FILTER="${RACECHECK_FILTER:-[sanitize],[cuda][loss],[cuda][rmsnorm],[cuda][optim],[cuda][elementwise][affine]}"
gpu_build
[[ -x "$KDTRAIN" && -x "$TESTS" ]] || { echo "gpu_check: no build ($KDTRAIN; run scripts/gpu/package_gpu_build.sh)"; exit 2; }
[[ "$DEVICE" == cuda ]] || export KDTRAIN_CUDA_TESTS_ON_CPU=1
echo "== kdtrain GPU check  commit $COMMIT  device $DEVICE"
gpu_environment_report "$OUTDIR/env.txt"
gpu_resolve_libraries "$OUTDIR/env.txt" "$KDTRAIN" "$TESTS"

echo "== CUDA tests: $SUITE"
gpu_run_tests "$OUTDIR" cuda "$SUITE"
echo "== attention at the models' real shapes: $REALISTIC"
gpu_run_tests "$OUTDIR" realistic "$REALISTIC"

echo "== compute-sanitizer memcheck: $MEMCHECK_FILTER"
gpu_run_sanitizer "$OUTDIR" memcheck "$MEMCHECK_FILTER" "${MEMCHECK_TIMEOUT:-150}"
echo "== compute-sanitizer racecheck: $RACECHECK_FILTER"
gpu_run_sanitizer "$OUTDIR" racecheck "$RACECHECK_FILTER" "${RACECHECK_TIMEOUT:-120}"

STEPS="${TRAIN_STEPS:-50}"
echo "== short training run: $DEVICE vs cpu (tiny-llama, affine, $STEPS steps)"
TMP="$(mktemp -d)"
gpu_train_shard "$TMP"
# head_dim 64: CUDA trains through the fused attention kernels only (64 or 128).
for pair in "cpu:cpu" "cuda:$DEVICE"; do
  "$KDTRAIN" train --preset tiny-llama --attention affine --set model.head_dim=64 --set data.train="$TMP/train.bin" \
    --set train.steps="$STEPS" --set schedule.warmup=$(( STEPS < 10 ? 1 : 5 )) --set train.seq_len=128 --set train.global_batch=8 \
    --set train.micro_batch=8 --set log.interval=10 --set train.device="${pair#*:}" \
    --run-dir "$OUTDIR/train_${pair%%:*}" > "$OUTDIR/train_${pair%%:*}.log" 2>&1 \
    || echo "gpu_check: training on ${pair#*:} failed (train_${pair%%:*}.log)"
  grep -E "attention B=|memory:" "$OUTDIR/train_${pair%%:*}.log" | head -3
  rm -rf "$OUTDIR/train_${pair%%:*}/checkpoints"
done
rm -rf "$TMP"

# NCCL at world size 1: every NCCL call of data parallelism on this one GPU,
# compared bit for bit with the single-process communicator.
NCCL_STATUS="not run: DEVICE=$DEVICE"
if [[ "$DEVICE" == cuda ]]; then
  echo "== NCCL at world size 1 (scripts/gpu/gpu_check_nccl.sh; log in ${OUT:-$ROOT/gpu_out}/nccl)"
  scripts/gpu/gpu_check_nccl.sh > "$OUTDIR/nccl.log" 2>&1
  NCCL_STATUS="$(tail -1 "$OUTDIR/nccl.log")"
fi
echo "   $NCCL_STATUS"

echo "== summary ($OUTDIR/summary.json)"
python3 scripts/gpu/gpu_report.py check "$OUTDIR" --commit "$COMMIT" --gpu "$GPU" --device "$DEVICE" \
  ${UPDATE_DOCS:+--update-docs "$UPDATE_DOCS" --update-table "$UPDATE_TABLE"}
[[ "$NCCL_STATUS" == "nccl: passed" || "$DEVICE" != cuda ]] || exit 1
python3 - "$OUTDIR/summary.json" <<'PY'
import json, sys
sys.exit(0 if json.load(open(sys.argv[1]))["tests_status"] == "passed" else 1)
PY
