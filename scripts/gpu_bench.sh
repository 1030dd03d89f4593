#!/usr/bin/env bash
# Side-by-side benchmark on one GPU (docs/performance.md): kdtrain bench and
# scripts/bench_pytorch.py (eager and torch.compile) for all five attention
# variants at llama3.2-1b, seq 2048, plus scripts/bench_attention.py. Writes
# every raw JSON and a summary to $OUT (or ./gpu_out)/bench/, and with
# --update-docs merges the summary keys into docs/gpu/latest.json (other keys kept).
#
#   MICRO_BATCH=8 STEPS=10 scripts/gpu_bench.sh [--update-docs]
# CPU smoke run of the script itself (numbers meaningless):
#   DEVICE=cpu PRESET=tiny-llama SEQ=32 MICRO_BATCH=2 STEPS=2 WARMUP=1 MODES=eager \
#     TEACHER=tiny-llama ATTN_ARGS="--tokens 64 --seq-len 32 --head-dims 16 --channels 64 --gqa 2 \
#     --iters 1 --kdtrain-preset tiny-llama" OUT=/tmp/gb scripts/gpu_bench.sh
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUTDIR="${OUT:-$ROOT/gpu_out}/bench"
mkdir -p "$OUTDIR"
exec > >(tee "$OUTDIR/gpu_bench.log") 2>&1

PRESET="${PRESET:-llama3.2-1b}"
SEQ="${SEQ:-2048}"
MB="${MICRO_BATCH:-8}"
STEPS="${STEPS:-10}"
WARMUP="${WARMUP:-3}"
DEVICE="${DEVICE:-cuda}"          # cpu: a smoke run of this script with tiny shapes
MODES="${MODES:-eager compile}"  # bench_pytorch.py modes
ATTN_ARGS="${ATTN_ARGS:-}"       # extra bench_attention.py arguments (tiny shapes on cpu)
TEACHER="${TEACHER:-llama3.2-3b}" # with-teacher pass (kdtrain and torch.compile); "" skips it
PKG="$ROOT/.carry/gpu"
if [[ -x "$PKG/bin/kdtrain" ]]; then
  export LD_LIBRARY_PATH="$PKG/lib:${LD_LIBRARY_PATH:-}"
  KDTRAIN="$PKG/bin/kdtrain"
else
  KDTRAIN="${KDTRAIN_BINARY:-$ROOT/build/kdtrain}"
fi
[[ -x "$KDTRAIN" ]] || { echo "gpu_bench: no kdtrain binary ($KDTRAIN)"; exit 2; }
echo "== kdtrain GPU bench $(date -u +%FT%TZ)  commit $(git rev-parse HEAD 2>/dev/null)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true

for V in baseline sink affine gated affine-gated; do
  echo "== $V: kdtrain bench"
  "$KDTRAIN" bench --preset "$PRESET" --attention "$V" --micro-batch "$MB" --seq-len "$SEQ" \
    --steps "$STEPS" --warmup "$WARMUP" --device "$DEVICE" --json > "$OUTDIR/kdtrain_$V.json" \
    || echo "kdtrain bench $V failed"
  tail -c 600 "$OUTDIR/kdtrain_$V.json"; echo
  for MODE in $MODES; do
    echo "== $V: bench_pytorch.py ($MODE)"
    FLAG=""; [[ $MODE == compile ]] && FLAG="--compile"
    python3 scripts/bench_pytorch.py --preset "$PRESET" --attention "$V" --micro-batch "$MB" \
      --seq-len "$SEQ" --steps "$STEPS" --warmup "$WARMUP" --device "$DEVICE" $FLAG --json \
      > "$OUTDIR/torch_${MODE}_$V.json" || echo "bench_pytorch $V $MODE failed"
  done
done
if [[ -n "$TEACHER" ]]; then
  for V in baseline sink affine gated affine-gated; do
    echo "== $V with teacher $TEACHER"
    "$KDTRAIN" bench --preset "$PRESET" --attention "$V" --micro-batch "$MB" --seq-len "$SEQ" \
      --steps "$STEPS" --warmup "$WARMUP" --device "$DEVICE" --teacher "$TEACHER" --json \
      > "$OUTDIR/kdtrain_teacher_$V.json" || echo "kdtrain bench $V teacher failed"
    python3 scripts/bench_pytorch.py --preset "$PRESET" --attention "$V" --micro-batch "$MB" \
      --seq-len "$SEQ" --steps "$STEPS" --warmup "$WARMUP" --device "$DEVICE" --teacher "$TEACHER" \
      $([[ " $MODES " == *" compile "* ]] && echo --compile) --json \
      > "$OUTDIR/torch_teacher_$V.json" || echo "bench_pytorch $V teacher failed"
  done
fi
echo "== attention only (PyTorch and kdtrain bench --attention-only)"
python3 scripts/bench_attention.py --device "$DEVICE" --compile --kdtrain "$KDTRAIN" $ATTN_ARGS --json \
  > "$OUTDIR/attention.json" || echo "bench_attention failed"

python3 - "$OUTDIR" "$PRESET" "$SEQ" "${1:-}" <<'PY'
import json, os, sys
out, preset, seq, update = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "--update-docs"
V = ["baseline", "sink", "affine", "gated", "affine-gated"]
def load(name):
    try:
        with open(os.path.join(out, name)) as f:
            return json.loads(f.read().strip().splitlines()[-1])
    except Exception:
        return None
kd = {v: load(f"kdtrain_{v}.json") for v in V}
tc = {v: load(f"torch_compile_{v}.json") for v in V}
te = {v: load(f"torch_eager_{v}.json") for v in V}
att = load("attention.json")
def ratio(a, b):
    return a / b if a and b else None
kt = {v: load(f"kdtrain_teacher_{v}.json") for v in V}
tt = {v: load(f"torch_teacher_{v}.json") for v in V}
summary = {
    "bench_config": {"preset": preset, "seq_len": seq,
                     "micro_batch": kd["baseline"]["micro_batch"] if kd["baseline"] else None},
    # per variant, a fraction; student only (no teacher)
    "mfu_1b_t2048": {v: kd[v]["mfu"] if kd[v] else None for v in V},
    "mfu_1b_t2048_with_teacher": {v: kt[v]["mfu"] if kt[v] else None for v in V},
    "step_speedup_vs_torch_compile": {
        v: ratio(kd[v] and kd[v]["tokens_per_s"], tc[v] and tc[v]["tokens_per_s"]) for v in V},
    "step_speedup_vs_torch_eager": {
        v: ratio(kd[v] and kd[v]["tokens_per_s"], te[v] and te[v]["tokens_per_s"]) for v in V},
    "step_speedup_vs_torch_with_teacher": {
        v: ratio(kt[v] and kt[v]["tokens_per_s"], tt[v] and tt[v]["tokens_per_s"]) for v in V},
    "variant_step_slowdown_kdtrain": {
        v: ratio(kd[v] and kd[v]["step_ms"], kd["baseline"] and kd["baseline"]["step_ms"]) for v in V},
    "attn_fwdbwd_vs_sdpa": (att or {}).get("attn_fwdbwd_vs_sdpa"),
    "variant_attn_slowdown": (att or {}).get("variant_attn_slowdown"),
    "variant_attn_speedup_vs_torch_best": (att or {}).get("variant_speedup_vs_torch_best"),
}
with open(os.path.join(out, "summary.json"), "w") as f:
    json.dump(summary, f, indent=2)
print(json.dumps(summary, indent=2))
if update:
    path = "docs/gpu/latest.json"
    os.makedirs(os.path.dirname(path), exist_ok=True)
    doc = json.load(open(path)) if os.path.exists(path) else {}
    doc.update({k: summary[k] for k in ("attn_fwdbwd_vs_sdpa", "variant_attn_slowdown",
                                        "step_speedup_vs_torch_compile", "mfu_1b_t2048")})
    doc["bench_commit"] = os.popen("git rev-parse HEAD").read().strip()
    doc["bench_gpu"] = os.popen("nvidia-smi --query-gpu=name --format=csv,noheader").read().strip().splitlines()[:1]
    json.dump(doc, open(path, "w"), indent=2)
    print("updated", path)
PY
