# Sourced by scripts/gpu/gpu_window.sh: its plan, the runner of one step and the steps.

# window_defaults: the budget, the device, the test filters and the step shape, from the
# environment. DEVICE=cpu: tiny shapes and the CUDA tests against the CPU backend, a smoke
# test of the sequence (nothing is learnt about a GPU).
window_defaults() {
  DEVICE="${DEVICE:-cuda}"
  BUDGET="${WINDOW_SECONDS:-500}"
  # Affine, the paper's variant, first; sink's step against torch.compile was measured on
  # 2026-11-28 (docs/gpu/), and the time of a third first variant is the tail's.
  FIRST_VARIANTS="${FIRST_VARIANTS:-baseline affine}"
  if [[ "$DEVICE" != cuda ]]; then
    export KDTRAIN_CUDA_TESTS_ON_CPU=1
    PRESET="${PRESET:-tiny-llama}" SEQ="${SEQ:-32}" MICRO_BATCH="${MICRO_BATCH:-2}" STEPS="${STEPS:-1}" WARMUP="${WARMUP:-0}"
    ATTN_ARGS="${ATTN_ARGS:---tokens 64 --seq-len 32 --head-dims 16 --channels 64 --gqa 2 --iters 1 --warmup 0 --kdtrain-preset tiny-llama --variants baseline sink}"
    TORCH_MODE=eager TEACHER="${TEACHER-}"
    FLASH="${FLASH-[flash][schedule]}" ATTENTION="${ATTENTION-cuda attention matches the CPU reference for every variant}"
    REALISTIC="${REALISTIC-[path]}" KERNELS="${KERNELS-[cuda][rope]}" WGMMA="${WGMMA-}"
  fi
  # Each GPU test case in one suite only (scripts/tests/test_gpu_window.py checks it).
  # Exported where set: a step runs in a fresh bash, which sees only what is exported (the
  # H200 window of 6c903e5 lost the wgmma suite, set here but missing from an export list).
  export PRIMITIVES="${PRIMITIVES-[cuda][tc],[cuda][wgmma]}"
  export WGMMA="${WGMMA-[cuda][flash][sm90a]}"
  export FLASH="${FLASH-[cuda][flash]~[sm90a]}"
  export ATTENTION="${ATTENTION-[cuda][attention]~[flash]~[realistic]}"
  export REALISTIC="${REALISTIC-[realistic]}"
  export KERNELS="${KERNELS-[cuda]~[tc]~[wgmma]~[flash]~[attention]}"
  export SANITIZE_FILTER="${SANITIZE_FILTER-[sanitize]}"
  TORCH_MODE="${TORCH_MODE:-compile}"
  TEACHER="${TEACHER-llama3.2-3b}"
  ATTN_ARGS="${ATTN_ARGS:-}" ATTN_BUILDS="${ATTN_BUILDS:-}"
  gpu_bench_config
}

# The seconds before the window starts its first step (versions, unpacking, ldd), counted
# against the budget: with the caps of the steps marked "first" it must fit WINDOW_SECONDS.
PRELUDE_ALLOWANCE=20

# plan: one line per step, in order: NAME|CAP|LEAST|first or tail|FUNCTION ARGS. The caps
# follow the seconds the H200 windows of 2026-11-28 measured (summary.json "phases"): the
# tests were cut at 90 before the real shapes and the rest of [cuda] ran; the
# kdtrain attention rows about 50 of b's 80 (the PyTorch rows take the rest, cut where
# they must), the kdtrain step 12 a variant, torch.compile 53 for the baseline and 63 for
# sink (a torch step cut before its end measures nothing, hence its least of 50), NCCL 13,
# the cached teacher 13; racecheck and synccheck could not finish [sanitize] in 30. The
# H200 window of 6c903e5 (docs/gpu/2026-11-28-6c903e5): [realistic] alone was cut at 116
# on its last shape, torch.compile 48 for the baseline and 69 for affine, NCCL 13; the cache
# write reached its 3 s cache pass 28 s in (the teacher's init, its ids, its load) and was
# cut in the forward pass; racecheck and synccheck, 20 each, were cut near their ends.
# "tail" steps run only when their whole cap still fits.
plan() {
  local V cap
  echo "a tests|114|10|first|tests_a"
  echo "b attention|${ATTN_SECONDS:-80}|15|first|attention_b"
  echo "c kdtrain step ${FIRST_VARIANTS}|28|15|first|step_kdtrain $FIRST_VARIANTS"
  for V in $FIRST_VARIANTS; do
    torch_wanted "$V" && echo "c torch $TORCH_MODE $V|$(torch_cap "$V")|50|first|step_torch $V"
  done
  [[ "$DEVICE" == cuda ]] && echo "d nccl|18|15|first|nccl_d"
  echo "c cached teacher|15|10|first|step_teacher_cache"
  echo "c cache write|50|40|first|cache_write_c"
  echo "e sanitizers|50|20|first|sanitize_e"
  [[ "$DEVICE" == cuda ]] && echo "b profile|30|12|tail|profile_b"
  [[ -n "${REST_VARIANTS// /}" ]] && echo "c kdtrain step ${REST_VARIANTS% }|40|30|tail|step_kdtrain $REST_VARIANTS"
  for V in $REST_VARIANTS; do
    torch_wanted "$V" && echo "c torch $TORCH_MODE $V|$(torch_cap "$V")|50|tail|step_torch $V"
  done
  [[ -n "$TEACHER" ]] && echo "c with teacher $TEACHER|90|90|tail|step_teacher"
  return 0
}

# torch_cap V: a torch.compile step's cap, TORCH_SECONDS (70) but 15 less for the
# baseline, whose model compiles fastest.
torch_cap() { local cap=${TORCH_SECONDS:-70}; [[ $1 == baseline ]] && cap=$((cap - 15)); echo "$cap"; }
torch_wanted() { [[ -z "${TORCH_VARIANTS:-}" || " $TORCH_VARIANTS " == *" $1 "* ]]; }

# plan_table: the plan with its caps, and the first steps' caps against the budget.
plan_table() {
  local all
  all="$(PYTHONPATH="$ROOT/scripts" python3 -c 'from kdtrain_hf.variants import ATTENTION_VARIANTS as v; print(*v)')"
  REST_VARIANTS="$(for V in $all; do [[ " $FIRST_VARIANTS " == *" $V "* ]] || echo "$V"; done | tr '\n' ' ')"
  local first=0 name cap least part
  printf '%-40s %5s %6s  %s\n' step cap least part
  while IFS="|" read -r name cap least part _; do
    printf '%-40s %5s %6s  %s\n' "$name" "$cap" "$least" "$part"
    [[ $part == first ]] && first=$(( first + cap ))
  done < <(plan)
  echo "first steps: ${first} s of caps + ${PRELUDE_ALLOWANCE} s before them, budget ${BUDGET} s"
  window_suites | sed 's/^/suite /'
  echo "suite sanitize|$SANITIZE_FILTER"
}

left() { echo $(( BUDGET - ($(date +%s) - START) )); }
step_left() { echo $(( STEP_DEADLINE - $(date +%s) )); }

# record_phase NAME STATUS SECONDS [CAP]: one line of phases.jsonl.
record_phase() {
  printf '{"phase": "%s", "status": "%s", "seconds": %s, "cap": %s}\n' "$1" "$2" "$3" "${4:-null}" >> "$RAW/phases.jsonl"
}

# save: the summary of everything so far into $OUTDIR; with --update-docs the docs too.
save() {
  python3 scripts/gpu/gpu_report.py window "$RAW" --commit "$COMMIT" --gpu "$GPU" --device "$DEVICE" \
    > "$RAW/table.txt" 2>&1
  cp "$RAW/summary.json" "$RAW/table.txt" "$OUTDIR/" 2>/dev/null
  [[ -f "$RAW/latest.json" ]] && cp "$RAW/latest.json" "$OUTDIR/"
  tar -czf "$OUTDIR/raw.tgz.part" -C "$RAW" . && mv "$OUTDIR/raw.tgz.part" "$OUTDIR/raw.tgz"
  if [[ -n "$UPDATE_DOCS" ]]; then
    python3 scripts/gpu/gpu_report.py import "$OUTDIR" --docs-root "$(dirname "$(dirname "$UPDATE_DOCS")")" \
      >> "$RAW/docs.log" 2>&1
  fi
}

# run_step NAME CAP LEAST FUNCTION [ARGS...]: FUNCTION under the smaller of CAP and the time
# left (skipped when that is under LEAST); its status ("ok", "rc N", "cut at N s" from this
# window's own timer, or why it was skipped) and seconds go to phases.jsonl; then, if it
# ran, save (a skipped step costs no time: the window saves once more at its end).
run_step() {
  local name="$1" cap="$2" least="$3" limit rc status t0
  shift 3
  if [[ -n "${ONLY:-}" && ! "$name" =~ ^(${ONLY}) ]]; then
    echo "== $name: skipped: not in ONLY"
    record_phase "$name" "skipped: not in ONLY" 0 "$cap"
    return
  fi
  limit=$(left)
  (( cap < limit )) && limit=$cap
  t0=$(date +%s)
  if (( limit < least )); then
    status="skipped: $( (( limit > 0 )) && echo "${limit} s" || echo "no time") left, needs ${least} s"
    echo "== $name: $status"
    record_phase "$name" "$status" 0 "$cap"
    return
  else
    echo "== $name (up to ${limit} s, $(left) s left)"
    export STEP_DEADLINE=$(( t0 + limit ))
    # A fresh bash under timeout (which ends its whole process group), given the functions
    # and the benchmark arguments; the scalars it reads are exported.
    timeout -k 5 "$limit" bash -c "$(declare -p COMMON); $(declare -f); \"\$@\"" step "$@"
    rc=$?
    status="rc $rc"
    [[ $rc == 0 ]] && status="ok"
    [[ $rc == 124 || $rc == 137 ]] && status="cut at ${limit} s"
  fi
  record_phase "$name" "$status" "$(( $(date +%s) - t0 ))" "$cap"
  save
}

# cuda_cannot_start: on a GPU run, a test said it found no CUDA device.
cuda_cannot_start() {
  [[ "$DEVICE" == cuda ]] && grep -qs "SKIPPED: no CUDA device" "$RAW"/tests_*.txt
}

# window_verdict: exit 0 when the tests passed and no step failed, else 1.
window_verdict() {
  python3 - "$RAW/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
failed_steps = [p["phase"] for p in s["phases"] if p["status"].startswith("rc ")]
ok = s["tests_status"] == "passed" and not failed_steps
print(f"gpu_window: tests {s['tests_status']}; steps failed: {', '.join(failed_steps) or 'none'}")
sys.exit(0 if ok else 1)
PY
}

# (a) correctness first: a wrong kernel makes every later number meaningless. Each suite is
# cut 3 s before the step's end, so its own timer (not the step's) records the cut.
tests_a() {
  local name filter limit
  while IFS='|' read -r name filter; do
    [[ -n "$filter" ]] || continue
    limit=$(( $(step_left) - 3 ))
    if (( limit < 3 )); then
      gpu_skip_tests "$RAW" "$name" "$filter" "out of time"
    else
      gpu_run_tests "$RAW" "$name" "$filter" "$limit"
    fi
  done < <(window_suites)
}

# window_suites: NAME|FILTER of each test suite of step a, in order: the instruction
# wrappers against the emulator, the kernels `auto` runs on sm_90a, the rest of [cuda] (the
# step's other kernels, the top K's among them), the real shapes through the backend, the
# other attention cases, the mma.sync flash kernels. The H200 windows of 6c903e5 measured
# 1, 31, (not reached), more than 116 (its shapes print their seconds now), 52 and more
# than 28 s: the rest of [cuda] had not run on a GPU since the suites were ordered, so
# it comes before the real shapes, which would fill the step alone.
window_suites() {
  printf '%s\n' "primitives|$PRIMITIVES" "wgmma|$WGMMA" "kernels|$KERNELS" "realistic|$REALISTIC" \
    "attention|$ATTENTION" "flash|$FLASH"
}

# (b) attention alone, forward and backward apart, each row written as it is measured.
# The builds in order of value, as a cut keeps the first: the atomics build (the default's
# determinism cost), every kernel choice (e.g. the lockstep forward against auto's), the
# atomics build of each backward choice (the cost by choice), then other packed builds.
attention_b() {
  local builds=() spec bin compile=""
  if [[ -n "$KDTRAIN_ATOMIC_DQ" ]]; then builds+=(--kdtrain-build "atomic-dq=$KDTRAIN_ATOMIC_DQ"); fi
  while IFS= read -r spec; do
    [[ -n "$spec" ]] && builds+=(--kdtrain-build "$spec")
  done < <(python3 scripts/gpu/kernel_choices.py "$KDTRAIN"; printf '%s\n' "$ATTN_BUILDS")
  if [[ -n "$KDTRAIN_ATOMIC_DQ" ]]; then
    while IFS= read -r spec; do  # the atomics build of each backward kernel (its determinism cost)
      [[ $spec == train.attention_backward:* ]] && builds+=(--kdtrain-build "atomic-dq+$spec")
    done < <(python3 scripts/gpu/kernel_choices.py "$KDTRAIN_ATOMIC_DQ")
  fi
  for bin in "$(dirname "$KDTRAIN")"/kdtrain_*; do
    [[ -x "$bin" && "$bin" != *_tests && "$bin" != "$KDTRAIN_ATOMIC_DQ" ]] && builds+=(--kdtrain-build "${bin##*/kdtrain_}=$bin")
  done
  [[ $TORCH_MODE == compile ]] && compile=--compile
  python3 scripts/peers/bench_attention.py --device "$DEVICE" $compile --cases strong --kdtrain "$KDTRAIN" \
    "${builds[@]}" $ATTN_ARGS --jsonl "$RAW/attention.jsonl" --json > "$RAW/attention.json"
}

# (b, tail) the attention kernels under Nsight Compute, for tuning between windows
# (docs/cuda.md, "The GPU window"): every kernel of one forward and backward (no warm-up)
# of PROFILES ("D VARIANT" pairs, by default baseline at 64, affine at 64, baseline at 128:
# the window of 6c903e5 was cut before its third, and affine is the variant furthest from
# its target while D 128's kernels were profiled there) at the
# benchmark's shape, the sections below, the clocks left as found (--clock-control none).
# RAW/profile_dD_VARIANT.{ncu-rep,csv,raw.csv}: the report, its details page and its raw
# metrics; ncu_summary.py reads the CSVs. A runtime whose counters ncu cannot read
# (gVisor: "Failed to initialize the profiler") stops the step at once, not as a failure.
profile_b() {
  local ncu d v base rc
  ncu="$(gpu_find_ncu)" || { echo "profile: no ncu on this machine"; return 0; }
  while read -r d v; do
    [[ -n "$d" ]] || continue
    (( $(step_left) >= 8 )) || { echo "profile: out of time before D $d $v"; return 0; }
    base="$RAW/profile_d${d}_$v"
    # ncu with the machine's libraries (as Python: the pack's libstdc++ must not come first),
    # kdtrain under it with the pack's.
    gpu_machine_libraries timeout -k 2 $(( $(step_left) - 4 )) "$ncu" --clock-control none \
      --target-processes all --kernel-name regex:'flash_forward|bwd_|scan_' --launch-count 12 \
      --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
      --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats \
      -f -o "$base" env LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}" "$KDTRAIN" bench --attention-only \
      --preset "${PROFILE_PRESET:-llama3.2-1b}" --attention "$v" --device cuda --micro-batch 8 --seq-len 2048 \
      --head-dim "$d" --steps 1 --warmup 0 --json > "$base.log" 2>&1
    rc=$?
    (( rc == 124 || rc == 137 )) && { echo "profile: cut at the step's end during D $d $v"; return 0; }
    if grep -qs "Failed to initialize the profiler" "$base.log"; then
      echo "profile: ncu cannot read the counters here: $(grep -m1 'Failed to initialize' "$base.log")"
      return 0
    fi
    [[ -f "$base.ncu-rep" ]] || { echo "profile: D $d $v wrote no report (rc $rc): $(tail -c 300 "$base.log")"; return 1; }
    gpu_machine_libraries "$ncu" --import "$base.ncu-rep" --csv --page details > "$base.csv" 2>> "$base.log"
    gpu_machine_libraries "$ncu" --import "$base.ncu-rep" --csv --page raw > "$base.raw.csv" 2>> "$base.log"
  done < <(printf '%s\n' "${PROFILES:-64 baseline
64 affine
128 baseline}")
  python3 scripts/gpu/ncu_summary.py "$RAW"
}

# (c) the step: kdtrain for the given variants, torch for one.
step_kdtrain() { local V rc=0; for V in "$@"; do gpu_bench_kdtrain "$RAW" "$V" "$V" || rc=1; done; return $rc; }
step_torch() { gpu_bench_torch "$RAW" "${TORCH_MODE}_$1" "$1" "$TORCH_MODE"; }
# The cached-teacher step (top-64 log-probabilities, the sparse KD loss on the device),
# to hold against the student-only step of the same variant.
step_teacher_cache() { gpu_bench_kdtrain "$RAW" teacher_cache_baseline baseline --teacher-cache 64; }
# With the teacher, the student recomputes its MLP (train.recompute=mlp: the memory plan
# of the paper's 1B + 3B configuration).
step_teacher() {
  local rc=0
  gpu_bench_kdtrain "$RAW" teacher_baseline baseline --teacher "$TEACHER" --set train.recompute=mlp || rc=1
  gpu_bench_torch "$RAW" teacher_baseline baseline "$TORCH_MODE" --teacher "$TEACHER" || rc=1
  return $rc
}

# (c) the cache writer against the teacher's forward (docs/distillation.md, "On a GPU"): a
# random-weight CACHE_TEACHER (PRESET: llama3.2-1b, the real 128k vocabulary, so the top K over
# V costs what it will) and CACHE_BATCHES batches of random ids, then `kdtrain teacher-cache
# --json` (its tokens/s) and `kdtrain eval` (the same teacher's forward and full-vocabulary
# log-softmax, no top K, nothing written) over the same windows, batch and T. The checkpoint
# and the cache (gigabytes) stay in SCRATCH, out of raw.tgz, and are deleted after.
cache_write_c() {
  local dir="$SCRATCH/cache_write" vocab rc=0
  local windows=$(( ${CACHE_BATCHES:-24} * MB ))
  rm -rf "$dir" && mkdir -p "$dir"
  {
    "$KDTRAIN" init --preset "${CACHE_TEACHER:-$PRESET}" --out "$dir/teacher" &&
      vocab="$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["vocab_size"])' \
        "$dir/teacher/config.json")" &&
      gpu_random_ids "$dir/ids.txt" "$vocab" $(( windows * SEQ + 1 )) &&
      "$KDTRAIN" data write --ids "$dir/ids.txt" --out "$dir/tokens.bin" --version 7
  } >> "$RAW/cache_write.log" 2>&1 || rc=1
  (( rc == 0 )) && { "$KDTRAIN" teacher-cache --device "$DEVICE" --teacher "$dir/teacher" --data "$dir/tokens.bin" \
      --seq-len "$SEQ" --batch-size "$MB" --top-k 64 --out "$dir/cache" --json > "$RAW/cache_write.json" \
      2>> "$RAW/cache_write.log" || rc=1; }
  (( rc == 0 )) && { "$KDTRAIN" eval --device "$DEVICE" --checkpoint "$dir/teacher" --data "$dir/tokens.bin" \
      --seq-len "$SEQ" --batch-size "$MB" --out "$RAW/cache_write_forward.json" >> "$RAW/cache_write.log" 2>&1 || rc=1; }
  # Last, so a cut loses only it: the same pass with --kernel-times, where the writer's time
  # goes (GEMMs, top K, attention; the rest is other kernels, copies and idle).
  (( rc == 0 )) && { "$KDTRAIN" teacher-cache --device "$DEVICE" --teacher "$dir/teacher" --data "$dir/tokens.bin" \
      --seq-len "$SEQ" --batch-size "$MB" --top-k 64 --out "$dir/cache_timed" --json --kernel-times \
      > "$RAW/cache_write_timed.json" 2>> "$RAW/cache_write.log" || rc=1; }
  rm -rf "$dir"
  (( rc == 0 )) || echo "cache write failed: $(tail -c 300 "$RAW/cache_write.log")"
  return $rc
}

# gpu_random_ids FILE VOCAB N: N token ids drawn uniformly from [0, VOCAB) (fixed seed), one a line.
gpu_random_ids() {
  python3 - "$@" <<'PY'
import random, sys
random.seed(0)
vocab, n = int(sys.argv[2]), int(sys.argv[3])
open(sys.argv[1], "w").write("\n".join(str(random.randrange(vocab)) for _ in range(n)) + "\n")
PY
}

# (d) NCCL at world size 1; its last line is the verdict. The runs' checkpoints (2 MB each)
# are dropped once compared, so raw.tgz stays small.
nccl_d() {
  OUT="$RAW/nccl_out" scripts/gpu/gpu_check_nccl.sh > "$RAW/nccl.log" 2>&1
  local rc=$?
  find "$RAW/nccl_out" -name checkpoints -type d -prune -exec rm -rf {} + 2>/dev/null
  return $rc
}

# (e) the sanitizers on the cases written for them, racecheck with 3/5 of what is left (on
# the H200 of 2026-11-28 it took 5 s a case where synccheck took 3.3); synccheck is skipped
# where the runtime refused racecheck.
sanitize_e() {
  [[ -n "$SANITIZE_FILTER" ]] || return 0
  if ! gpu_run_sanitizer "$RAW" racecheck "$SANITIZE_FILTER" $(( $(step_left) * 3 / 5 )); then
    cp "$RAW/racecheck.meta.json" "$RAW/synccheck.meta.json"
    return 0
  fi
  gpu_run_sanitizer "$RAW" synccheck "$SANITIZE_FILTER" $(( $(step_left) - 2 ))
}
