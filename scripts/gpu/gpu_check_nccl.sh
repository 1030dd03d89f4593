#!/usr/bin/env bash
# NCCL at world size 1 on one GPU, without a launcher: every NCCL call
# the data-parallel trainer makes on eight GPUs, made on one. Called by
# scripts/gpu/gpu_check.sh; runs alone too. Outputs go to $OUT/nccl (or ./gpu_out/nccl);
# the last line is "nccl: passed" or "nccl: FAILED (...)", and the exit code says the same.
#
#   scripts/gpu/gpu_check_nccl.sh
#
# 1. `kdtrain_tests "[.nccl]"`: gradient buckets (fp32 and bf16, overlapped or
#    not, small and large), all-gather, host values, on dist.backend=nccl;
# 2. `kdtrain_tests "[.nccl-watchdog]"`: a reduction whose compute stream is held
#    past dist.timeout_s must end the process with the watchdog's code 124;
# 3. 20 training steps of tiny-llama affine on the GPU with dist.backend=nccl
#    (buckets overlapped, then after the backward) against dist.backend=single:
#    metrics and model.safetensors bit for bit; then under `mpirun -np 1` when
#    mpirun exists (NCCL over MPI), the same comparison.
# On a machine with several GPUs, the same checks at world size 8 are
#   mpirun -np 8 build/kdtrain_tests "[.nccl]"
#   scripts/gpu/gpu_check_nccl.sh with NP=8 (steps 3 under mpirun -np 8: loss within bf16 tolerance)
source "$(dirname "${BASH_SOURCE[0]}")/gpu_env.sh"
gpu_output nccl
gpu_build
NP="${NP:-1}"
FAILED=()

echo "== NCCL: collectives at world size $NP"
if [[ "$NP" == 1 ]]; then
  "$TESTS" "[.nccl]" -r compact > "$OUTDIR/collectives.txt" 2>&1
else
  mpirun --oversubscribe --allow-run-as-root -np "$NP" "$TESTS" "[.nccl]" -r compact > "$OUTDIR/collectives.txt" 2>&1
fi
rc=$?
tail -2 "$OUTDIR/collectives.txt"
grep -q "SKIPPED" "$OUTDIR/collectives.txt" && FAILED+=("collectives skipped: no GPU or no NCCL")
[[ $rc == 0 ]] || FAILED+=("collectives (collectives.txt)")

echo "== NCCL: the watchdog"
"$TESTS" "[.nccl-watchdog]" -r compact > "$OUTDIR/watchdog.txt" 2>&1
rc=$?
grep "did not complete" "$OUTDIR/watchdog.txt" | head -1
[[ $rc == 124 ]] && grep -q "did not complete within dist.timeout_s" "$OUTDIR/watchdog.txt" \
  || FAILED+=("watchdog: exit code $rc, expected 124 (watchdog.txt)")

echo "== NCCL: training, dist.backend=nccl against single"
TMP="$(mktemp -d)"
gpu_train_shard "$TMP"
train() {  # train NAME LAUNCHER... -- SETTINGS...
  local name="$1"; shift
  local launcher=()
  while [[ "$1" != "--" ]]; do launcher+=("$1"); shift; done
  shift
  # head_dim 64: CUDA trains through the fused attention kernels only (64 or 128).
  "${launcher[@]}" "$KDTRAIN" train --preset tiny-llama --attention affine --set model.head_dim=64 \
    --set data.train="$TMP/train.bin" \
    --set train.steps=20 --set schedule.warmup=5 --set train.seq_len=128 --set train.global_batch=8 \
    --set train.micro_batch=4 --set log.interval=10 --set train.device=cuda --set dist.bucket_mb=0.05 \
    "$@" --run-dir "$OUTDIR/$name" > "$OUTDIR/$name.log" 2>&1 || FAILED+=("training $name ($name.log)")
  grep -E "data parallel|gradient reduction" "$OUTDIR/$name.log" | head -2
}
same_bits() {  # same_bits A B: metrics (but timing) and final weights identical
  python3 - "$OUTDIR/$1" "$OUTDIR/$2" "$ROOT/scripts/report" <<'PY' || FAILED+=("$1 differs from $2")
import sys, pathlib
sys.path.insert(0, sys.argv[3])
from metric_keys import arithmetic_rows
a, b = (pathlib.Path(p) for p in sys.argv[1:3])
rows = lambda d: arithmetic_rows(d / "metrics.jsonl")
latest = lambda d: d / "checkpoints" / (d / "checkpoints" / "latest").read_text().strip() / "model.safetensors"
ok = rows(a) == rows(b) and len(rows(a)) == 20 and latest(a).read_bytes() == latest(b).read_bytes()
print(f"   {a.name} vs {b.name}: {'the same bits' if ok else 'DIFFERENT'}")
sys.exit(0 if ok else 1)
PY
}
train single -- --set dist.backend=single
train nccl -- --set dist.backend=nccl
train nccl_after -- --set dist.backend=nccl --set dist.overlap=false
train nccl_bf16 -- --set dist.backend=nccl --set dist.reduce_dtype=bf16
same_bits single nccl
same_bits single nccl_after
if command -v mpirun > /dev/null; then
  train nccl_mpirun mpirun --allow-run-as-root -np 1 -- --set dist.backend=nccl
  same_bits single nccl_mpirun
fi
rm -rf "$TMP"

if [[ ${#FAILED[@]} == 0 ]]; then
  echo "nccl: passed"
else
  printf 'nccl: FAILED (%s)\n' "$(IFS=';'; echo "${FAILED[*]}")"
  exit 1
fi
