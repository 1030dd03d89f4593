#!/usr/bin/env bash
# One command on a GPU machine (docs/cuda.md): runs every CUDA test, a short GPU
# training run next to the same run on the CPU, and writes one log plus
# latest.json to $OUT (or ./gpu_out). Uses the build packed by
# scripts/package_gpu_build.sh (.carry/gpu), or builds here with --build.
#
#   scripts/gpu_check.sh [--build]
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUTDIR="${OUT:-$ROOT/gpu_out}"
mkdir -p "$OUTDIR"
LOG="$OUTDIR/gpu_check.log"
exec > >(tee "$LOG") 2>&1

if [[ "${1:-}" == "--build" ]]; then
  scripts/package_gpu_build.sh
fi
PKG="$ROOT/.carry/gpu"
[[ -x "$PKG/bin/kdtrain" ]] || { echo "gpu_check: no packed build in $PKG (run scripts/package_gpu_build.sh)"; exit 2; }
export LD_LIBRARY_PATH="$PKG/lib:${LD_LIBRARY_PATH:-}"
KDTRAIN="$PKG/bin/kdtrain"
COMMIT="$(cat "$PKG/COMMIT" 2>/dev/null || git rev-parse HEAD)"

echo "== kdtrain GPU check  commit $COMMIT  $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
GPU="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"

echo "== CUDA tests"
"$PKG/bin/kdtrain_tests" "[cuda]" -r compact > "$OUTDIR/cuda_tests.txt" 2>&1
TESTS_RC=$?
tail -5 "$OUTDIR/cuda_tests.txt"
SUMMARY="$(grep -E '^(Passed|Failed|All tests)' "$OUTDIR/cuda_tests.txt" | tail -1)"
PASSED="$(echo "$SUMMARY" | grep -oE '[0-9]+ test case' | head -1 | grep -oE '[0-9]+' || echo 0)"
FAILED="$(grep -oE '[0-9]+ failed' "$OUTDIR/cuda_tests.txt" | tail -1 | grep -oE '[0-9]+' || echo 0)"

echo "== short training run: cuda vs cpu (tiny-llama, affine)"
TMP="$(mktemp -d)"
python3 - "$TMP/train.txt" <<'PY'
import random, sys
random.seed(0)
words = "the of and to in is was for on that with as by at from his her an which were this are be".split()
open(sys.argv[1], "w").write(" ".join(random.choice(words) for _ in range(60000)))
PY
"$KDTRAIN" data write --bytes "$TMP/train.txt" --out "$TMP/train.bin" --version 1
for device in cpu cuda; do
  "$KDTRAIN" train --preset tiny-llama --attention affine --set data.train="$TMP/train.bin" \
    --set train.steps=50 --set schedule.warmup=5 --set train.seq_len=128 --set train.global_batch=8 \
    --set train.micro_batch=8 --set log.interval=10 --set train.device=$device --run-dir "$TMP/$device" \
    || echo "gpu_check: training on $device failed"
done
python3 - "$TMP" "$OUTDIR/latest.json" "$COMMIT" "$GPU" "$PASSED" "$FAILED" <<'PY'
import json, sys, pathlib
tmp, out, commit, gpu, passed, failed = sys.argv[1:]
def losses(d):
    p = pathlib.Path(tmp) / d / "metrics.jsonl"
    return [json.loads(l)["loss"] for l in p.read_text().splitlines()] if p.exists() else []
cpu, cuda = losses("cpu"), losses("cuda")
worst = max((abs(a - b) / abs(b) for a, b in zip(cuda, cpu)), default=None)
result = {"commit": commit, "gpu": gpu, "tests_passed": int(passed or 0), "tests_failed": int(failed or 0),
          "train_50_steps_max_rel_loss_diff_cuda_vs_cpu": worst,
          "train_steps_cuda": len(cuda), "train_steps_cpu": len(cpu)}
pathlib.Path(out).write_text(json.dumps(result, indent=2) + "\n")
print(json.dumps(result, indent=2))
PY
rm -rf "$TMP"
exit $TESTS_RC
