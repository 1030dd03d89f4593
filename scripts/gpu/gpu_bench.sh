#!/usr/bin/env bash
# Side-by-side benchmark on one GPU (docs/performance.md): kdtrain bench and
# scripts/peers/bench_pytorch.py (torch.compile) for all five attention variants at
# llama3.2-1b, T = 2048, the same with a teacher forward, and attention alone
# (scripts/peers/bench_attention.py against kdtrain bench --attention-only). Raw JSONs,
# summary.json and gpu_bench.log go to $OUT/bench (or ./gpu_out/bench); a short
# table is printed last. With --update-docs the measured keys (attn_fwdbwd_vs_sdpa,
# variant_attn_slowdown, step_speedup_vs_torch_compile, step_speedup_vs_torch_with_teacher,
# mfu_1b_t2048, peak device memory), with commit and GPU, are merged into
# docs/gpu/latest.json and the measured table of docs/performance.md is rewritten from
# it (scripts/gpu/gpu_report.py; run scripts/gpu/gpu_check.sh --update-docs from the same build
# for tests_passed / tests_failed).
#
#   scripts/gpu/gpu_bench.sh [--update-docs]
#
# Environment (defaults sized so gpu_check.sh + gpu_bench.sh fit in ~10 minutes; each
# phase prints its seconds): MICRO_BATCH=8 SEQ=2048 STEPS=6 WARMUP=2 PRESET=llama3.2-1b
# MODES="compile" (add "eager" for bench_pytorch.py without torch.compile)
# TORCH_VARIANTS="<all five>" TEACHER=llama3.2-3b TEACHER_VARIANTS="baseline" ("" skips)
# ATTN_ARGS (extra bench_attention.py arguments) DEVICE=cuda.
# CPU smoke run of the script itself (numbers meaningless):
#   DEVICE=cpu PRESET=tiny-llama SEQ=32 MICRO_BATCH=2 STEPS=2 WARMUP=1 MODES=eager \
#     TEACHER=tiny-llama ATTN_ARGS="--tokens 64 --seq-len 32 --head-dims 16 --channels 64 --gqa 2 \
#     --iters 1 --warmup 0 --kdtrain-preset tiny-llama" OUT=/tmp/gb scripts/gpu/gpu_bench.sh
source "$(dirname "${BASH_SOURCE[0]}")/gpu_env.sh"
gpu_output bench gpu_bench.log
gpu_options gpu_bench "$@"
DEVICE="${DEVICE:-cuda}"
gpu_bench_config
MODES="${MODES:-compile}"
ATTN_ARGS="${ATTN_ARGS:-}"
TEACHER="${TEACHER-llama3.2-3b}"
TEACHER_VARIANTS="${TEACHER_VARIANTS-baseline}"
gpu_build
[[ -x "$KDTRAIN" ]] || { echo "gpu_bench: no kdtrain binary ($KDTRAIN)"; exit 2; }
echo "== kdtrain GPU bench  commit $COMMIT  device $DEVICE"
gpu_environment_report "$OUTDIR/env.txt"
gpu_resolve_libraries "$OUTDIR/env.txt" "$KDTRAIN"
VARIANTS="$("$KDTRAIN" info --variants | awk '{print $1}' | tr '\n' ' ')"  # every variant, from the binary's table
TORCH_VARIANTS="${TORCH_VARIANTS:-$VARIANTS}"

PHASE_START=$(date +%s)
phase() { echo "== $* (+$(( $(date +%s) - PHASE_START ))s)"; }

for V in $VARIANTS; do
  phase "$V: kdtrain bench"
  gpu_bench_kdtrain "$OUTDIR" "$V" "$V"
done
for V in $TORCH_VARIANTS; do
  for MODE in $MODES; do
    phase "$V: bench_pytorch.py ($MODE)"
    gpu_bench_torch "$OUTDIR" "${MODE}_$V" "$V" "$MODE"
  done
done
if [[ -n "$TEACHER" ]]; then
  for V in $TEACHER_VARIANTS; do
    phase "$V with teacher $TEACHER: kdtrain bench, bench_pytorch.py (compile)"
    gpu_bench_kdtrain "$OUTDIR" "teacher_$V" "$V" --teacher "$TEACHER"
    gpu_bench_torch "$OUTDIR" "teacher_$V" "$V" "$([[ " $MODES " == *" compile "* ]] && echo compile || echo eager)" \
      --teacher "$TEACHER"
  done
fi
phase "attention alone: bench_attention.py (strong forms, compiled where it helps) and kdtrain bench --attention-only"
python3 scripts/peers/bench_attention.py --device "$DEVICE" --compile --cases strong --kdtrain "$KDTRAIN" $ATTN_ARGS \
  --json > "$OUTDIR/attention.json" || echo "bench_attention failed"

phase "summary ($OUTDIR/summary.json)"
python3 scripts/gpu/gpu_report.py bench "$OUTDIR" --commit "$COMMIT" --gpu "$GPU" \
  ${UPDATE_DOCS:+--update-docs "$UPDATE_DOCS" --update-table "$UPDATE_TABLE"}
