#!/usr/bin/env bash
# The one command for a lent GPU: everything worth knowing from a short
# window, in order of value, inside WINDOW_SECONDS (default 450: the device tool lends
# 15 minutes, start-up included, and this must end within 8 on an H100 or H200):
#   (a) tests: the tensor-core wrapper probes on the GPU against the emulator ([cuda][tc]),
#       the flash kernels' CUDA tests ([flash]~[sim]), [cuda][attention], the real shapes;
#   (b) attention forward and backward timed separately at D 64 and 128: kdtrain (every
#       variant; the sm_90a wgmma forward where built), its mma.sync forward
#       (--attention-forward=mma_sync), the atomics timing build (attn_determinism_cost)
#       and any other packed build, against SDPA and FlexAttention (bench_attention.py);
#   (c) the llama3.2-1b step at T 2048, micro-batch 8, five variants, against
#       torch.compile (bench_pytorch.py); then, time allowing, with a teacher;
#   (d) NCCL at world size 1 (scripts/gpu/gpu_check_nccl.sh);
#   (e) compute-sanitizer racecheck and synccheck on the attention tests, in what is left.
# Each step runs under `timeout` with the smaller of its cap and the time left. After every
# step the summary is rebuilt (scripts/gpu/gpu_report.py window) and $OUT/window gets
# summary.json, table.txt, raw.tgz (every raw output) and window.log, so a run cut short
# still returns what it measured; --update-docs also rewrites docs/gpu/latest.json and
# the table of docs/performance.md each time, and copies both there too (six files, inside
# the device tool's eight). The table is printed last.
#
#   scripts/gpu/gpu_window.sh [--build] [--update-docs]
#
# Uses the build packed by scripts/gpu/package_gpu_build.sh (.carry/gpu.tar.xz; --build packs
# first), else build/. Environment: WINDOW_SECONDS, DEVICE=cuda, the step shape of
# gpu_bench_config (PRESET, SEQ, MICRO_BATCH, STEPS, WARMUP), ATTN_ARGS (extra
# bench_attention.py arguments), TORCH_VARIANTS, TEACHER (default llama3.2-3b; "" skips),
# SANITIZE=0, and the test filters PRIMITIVES, FLASH, ATTENTION, REALISTIC.
# DEVICE=cpu runs the same sequence on the CPU at tiny shapes (the CUDA tests against the
# CPU backend, KDTRAIN_CUDA_TESTS_ON_CPU=1): a smoke test of the script, run by CI
# (scripts/tests/test_gpu_scripts.py); nothing is learnt about a GPU.
source "$(dirname "${BASH_SOURCE[0]}")/gpu_env.sh"
gpu_output window window.log
gpu_options gpu_window "$@"
DEVICE="${DEVICE:-cuda}"
BUDGET="${WINDOW_SECONDS:-450}"
if [[ "$DEVICE" != cuda ]]; then  # tiny shapes: the sequence, not the numbers
  export KDTRAIN_CUDA_TESTS_ON_CPU=1
  PRESET="${PRESET:-tiny-llama}" SEQ="${SEQ:-32}" MICRO_BATCH="${MICRO_BATCH:-2}" STEPS="${STEPS:-1}" WARMUP="${WARMUP:-0}"
  ATTN_ARGS="${ATTN_ARGS:---tokens 64 --seq-len 32 --head-dims 16 --channels 64 --gqa 2 --iters 1 --warmup 0 --kdtrain-preset tiny-llama --variants baseline sink}"
  TORCH_MODE=eager TEACHER="${TEACHER-}" TORCH_VARIANTS="${TORCH_VARIANTS:-baseline sink}"
  FLASH="${FLASH:-[flash][schedule]}" ATTENTION="${ATTENTION:-cuda attention matches the CPU reference for every variant}"
  REALISTIC="${REALISTIC:-[path]}"
fi
PRIMITIVES="${PRIMITIVES:-[cuda][tc]}"
FLASH="${FLASH:-[flash]~[sim]}"
ATTENTION="${ATTENTION:-[cuda][attention]~[realistic]}"
REALISTIC="${REALISTIC:-[realistic]}"
TORCH_MODE="${TORCH_MODE:-compile}"
TEACHER="${TEACHER-llama3.2-3b}"
gpu_build
gpu_bench_config
[[ -x "$KDTRAIN" && -x "$TESTS" ]] || { echo "gpu_window: no build ($KDTRAIN; run scripts/gpu/package_gpu_build.sh)"; exit 2; }
VARIANTS="$("$KDTRAIN" info --variants | awk '{print $1}' | tr '\n' ' ')"  # every variant, from the binary
TORCH_VARIANTS="${TORCH_VARIANTS:-$VARIANTS}"
RAW="$(mktemp -d)"  # raw outputs, packed into $OUTDIR/raw.tgz after every step
trap 'rm -rf "$RAW"' EXIT
START=$(date +%s)
export ROOT RAW START BUDGET DEVICE KDTRAIN TESTS KDTRAIN_ATOMIC_DQ VARIANTS TORCH_MODE TEACHER ATTN_ARGS \
  PRIMITIVES FLASH ATTENTION REALISTIC
left() { echo $(( BUDGET - ($(date +%s) - START) )); }
echo "== kdtrain GPU window  commit $COMMIT  $(date -u +%FT%TZ)  device $DEVICE  budget ${BUDGET}s"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || true

# save: the summary of everything so far into $OUTDIR (and the docs with --update-docs).
save() {
  python3 scripts/gpu/gpu_report.py window "$RAW" --commit "$COMMIT" --gpu "$GPU" \
    ${UPDATE_DOCS:+--update-docs "$UPDATE_DOCS" --update-table "$UPDATE_TABLE"} > "$RAW/table.txt" 2>&1
  cp "$RAW/summary.json" "$RAW/table.txt" "$OUTDIR/" 2>/dev/null
  if [[ -n "$UPDATE_DOCS" && -f "$UPDATE_DOCS" ]]; then cp "$UPDATE_DOCS" "$UPDATE_TABLE" "$OUTDIR/"; fi
  tar -czf "$OUTDIR/raw.tgz.part" -C "$RAW" . && mv "$OUTDIR/raw.tgz.part" "$OUTDIR/raw.tgz"
}

# step NAME CAP FUNCTION [ARGS...]: FUNCTION under the smaller of CAP seconds and the time
# left (skipped under 5 s), its status and seconds appended to phases.jsonl, then save.
step() {
  local name="$1" cap="$2" limit rc status t0
  shift 2
  limit=$(left)
  (( cap < limit )) && limit=$cap
  if (( limit < 5 )); then
    status="skipped: out of time"
  else
    echo "== $name (up to ${limit}s, $(left)s left)"
    t0=$(date +%s)
    # A fresh bash under timeout (which ends its whole process group), given the functions
    # and the benchmark arguments; the scalars it reads are exported below.
    timeout "$limit" bash -c "$(declare -p COMMON); $(declare -f); \"\$@\"" step "$@"
    rc=$?
    status="rc $rc"
    [[ $rc == 0 ]] && status="ok"
    [[ $rc == 124 ]] && status="cut at ${limit}s"
  fi
  printf '{"phase": "%s", "status": "%s", "seconds": %s}\n' "$name" "$status" "$(( $(date +%s) - ${t0:-$(date +%s)} ))" \
    >> "$RAW/phases.jsonl"
  save
}

# (a) correctness first: a wrong kernel makes every later number meaningless.
tests_a() {
  gpu_run_tests "$RAW" primitives "$PRIMITIVES"
  gpu_run_tests "$RAW" flash "$FLASH"
  gpu_run_tests "$RAW" attention "$ATTENTION"
  gpu_run_tests "$RAW" realistic "$REALISTIC"
}
# (b) attention alone: the strong PyTorch forms (SDPA, FlexAttention for the sink) against
# kdtrain, forward and backward apart. kdtrain's rows take the forward kernel it chooses
# (the sm_90a wgmma forward where built); "mma-sync" forces the mma.sync forward
# on the baseline (kdtrain bench --attention-forward); then the atomics build and any other packed
# build (bin/kdtrain_<label>).
attention_b() {
  local builds=(--kdtrain-build "mma-sync=$KDTRAIN --attention-forward=mma_sync") bin
  [[ -n "$KDTRAIN_ATOMIC_DQ" ]] && builds+=(--kdtrain-build "atomic-dq=$KDTRAIN_ATOMIC_DQ")
  for bin in "$(dirname "$KDTRAIN")"/kdtrain_*; do
    [[ -x "$bin" && "$bin" != *_tests && "$bin" != "$KDTRAIN_ATOMIC_DQ" ]] && builds+=(--kdtrain-build "${bin##*/kdtrain_}=$bin")
  done
  python3 scripts/peers/bench_attention.py --device "$DEVICE" $([[ $TORCH_MODE == compile ]] && echo --compile) \
    --cases strong --kdtrain "$KDTRAIN" "${builds[@]}" $ATTN_ARGS --json > "$RAW/attention.json"
}
# (c) the step: kdtrain for every variant, then torch.compile variant by variant.
step_kdtrain() { for V in $VARIANTS; do gpu_bench_kdtrain "$RAW" "$V" "$V"; done; }
step_torch() { gpu_bench_torch "$RAW" "${TORCH_MODE}_$1" "$1" "$TORCH_MODE"; }
# The cached-teacher step (top-64 log-probabilities, the sparse KD loss on the device),
# to hold against the student-only step of the same variant.
step_teacher_cache() { gpu_bench_kdtrain "$RAW" teacher_cache_baseline baseline --teacher-cache 64; }
# With the teacher, the student recomputes its MLP (train.recompute=mlp: the memory plan
# of the paper's 1B + 3B configuration).
step_teacher() {
  gpu_bench_kdtrain "$RAW" teacher_baseline baseline --teacher "$TEACHER" --set train.recompute=mlp
  gpu_bench_torch "$RAW" teacher_baseline baseline "$TORCH_MODE" --teacher "$TEACHER"
}
# (d) NCCL at world size 1; its last line is the verdict.
nccl_d() { OUT="$RAW/nccl_out" scripts/gpu/gpu_check_nccl.sh > "$RAW/nccl.log" 2>&1; }
# (e) the sanitizers on the attention tests, each with half of what is left.
sanitize_e() {
  gpu_run_sanitizer "$RAW" racecheck "$ATTENTION" $(( $(left) / 2 ))
  gpu_run_sanitizer "$RAW" synccheck "$ATTENTION" $(( $(left) - 5 ))
}

step "a tests" 150 tests_a
step "b attention" 120 attention_b
step "c kdtrain step" 90 step_kdtrain
for V in $TORCH_VARIANTS; do step "c torch $TORCH_MODE $V" 75 step_torch "$V"; done
step "c cached teacher" 45 step_teacher_cache
[[ -n "$TEACHER" && $(left) -gt 150 ]] && step "c with teacher $TEACHER" 90 step_teacher
if [[ "$DEVICE" == cuda ]]; then step "d nccl" 60 nccl_d; fi
step "e sanitizers" 600 sanitize_e
echo "== done in $(( $(date +%s) - START ))s; $OUTDIR: summary.json table.txt raw.tgz window.log"
cat "$RAW/table.txt"
