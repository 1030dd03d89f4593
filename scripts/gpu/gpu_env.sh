# Sourced first by scripts/gpu/gpu_window.sh, gpu_check.sh, gpu_check_nccl.sh and gpu_bench.sh:
# what the GPU scripts share. Sourcing sets `-uo pipefail`, ROOT (the repository root) and
# makes it the working directory; the functions below do the rest.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT" || exit 2
source "$ROOT/scripts/gpu/gpu_prelude.sh"

# gpu_output NAME [LOG]: OUTDIR = $OUT/NAME (or ./gpu_out/NAME), emptied; with LOG,
# everything the script prints from here on also goes to $OUTDIR/LOG.
gpu_output() {
  OUTDIR="${OUT:-$ROOT/gpu_out}/$1"
  rm -rf "$OUTDIR"
  mkdir -p "$OUTDIR"
  if [[ -n "${2:-}" ]]; then exec > >(tee "$OUTDIR/$2") 2>&1; fi
}

# gpu_options SCRIPT ARGS...: the scripts' arguments. --update-docs sets UPDATE_DOCS and
# UPDATE_TABLE (docs/gpu/latest.json and docs/performance.md under GPU_DOCS_ROOT, default
# docs/, for scripts/gpu/gpu_report.py); --build (gpu_check and gpu_window) packs the
# build first; anything else ends the script.
gpu_options() {
  local script="$1" arg docs="${GPU_DOCS_ROOT:-$ROOT/docs}"
  shift
  UPDATE_DOCS="" UPDATE_TABLE=""
  for arg in "$@"; do
    case "$script $arg" in
      "gpu_check --build"|"gpu_window --build") "$ROOT/scripts/gpu/package_gpu_build.sh" || exit 2 ;;
      *" --update-docs") UPDATE_DOCS="$docs/gpu/latest.json" UPDATE_TABLE="$docs/performance.md" ;;
      *) echo "$script: unknown argument '$arg' (--help lists them)"; exit 2 ;;
    esac
  done
}

# gpu_build: finds the build to run and names the commit and the GPU. Sets KDTRAIN,
# TESTS, KDTRAIN_ATOMIC_DQ (the atomics timing build, or empty), COMMIT, GPU (empty unless
# DEVICE=cuda and nvidia-smi names one) and LD_LIBRARY_PATH for a packed build.
#
# The packed build (scripts/gpu/package_gpu_build.sh) travels as .carry/gpu.tar.xz (the
# device tool carries at most 64 MiB; unpacked it is about 80) and is unpacked here
# into .carry/gpu when that is missing or older than the archive. GPU_PACK_DIR names an
# unpacked pack elsewhere (the scripts' own tests use it). Without one, the binaries of
# build/ (KDTRAIN_BUILD_DIR) are used.
gpu_build() {
  local pkg="${GPU_PACK_DIR:-$ROOT/.carry/gpu}"
  if [[ -z "${GPU_PACK_DIR:-}" && -f "$ROOT/.carry/gpu.tar.xz" && ( ! -f "$pkg/COMMIT" || "$ROOT/.carry/gpu.tar.xz" -nt "$pkg/COMMIT" ) ]]; then
    rm -rf "$pkg"
    tar -C "$ROOT/.carry" -xJf "$ROOT/.carry/gpu.tar.xz" || { echo "cannot unpack .carry/gpu.tar.xz"; exit 2; }
    touch "$pkg/COMMIT"
  fi
  if [[ -x "$pkg/bin/kdtrain" ]]; then
    # The pack's libraries are for its binaries; Python keeps the machine's (python3 below).
    export GPU_PYTHON_LIBRARY_PATH="${GPU_PYTHON_LIBRARY_PATH-${LD_LIBRARY_PATH:-}}"
    export LD_LIBRARY_PATH="$pkg/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    KDTRAIN="$pkg/bin/kdtrain"
    TESTS="$pkg/bin/kdtrain_tests"
    COMMIT="$(cat "$pkg/COMMIT")"
    PACK="$pkg"
  else
    PACK=""
    local build="${KDTRAIN_BUILD_DIR:-$ROOT/build}"
    KDTRAIN="${KDTRAIN_BINARY:-$build/kdtrain}"
    TESTS="$build/kdtrain_tests"
    COMMIT="$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)"
  fi
  # The timing-only build with float-atomic dq accumulation (KDTRAIN_ATTN_ATOMIC_DQ), when packed.
  KDTRAIN_ATOMIC_DQ="${KDTRAIN_ATOMIC_DQ_BINARY:-}"
  [[ -z "$KDTRAIN_ATOMIC_DQ" && -x "$pkg/bin/kdtrain_atomic_dq" ]] && KDTRAIN_ATOMIC_DQ="$pkg/bin/kdtrain_atomic_dq"
  GPU=""
  if [[ "${DEVICE:-cuda}" == cuda ]]; then
    GPU="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
  fi
}

# python3: Python without the pack's libraries (its Debian libstdc++ and libgomp must not
# come before the ones torch and Triton were built against), told the binaries' library
# path in KDTRAIN_LD_LIBRARY_PATH for the kdtrain it starts (bench_attention.py,
# kernel_choices.py). Without a pack it is plain python3.
python3() {
  if [[ -n "${GPU_PYTHON_LIBRARY_PATH+set}" ]]; then
    # KDTRAIN_LD_LIBRARY_PATH first: bash expands a command's assignments left to right,
    # so after LD_LIBRARY_PATH=... it would read Python's path, not the pack's.
    KDTRAIN_LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}" LD_LIBRARY_PATH="$GPU_PYTHON_LIBRARY_PATH" command python3 "$@"
  else
    command python3 "$@"
  fi
}

# gpu_train_shard DIR: DIR/train.bin, a version-1 token shard of 60000 random common
# English words (fixed seed), for the scripts' short training runs.
gpu_train_shard() {
  python3 - "$1/train.txt" <<'PY'
import random, sys
random.seed(0)
words = "the of and to in is was for on that with as by at from his her an which were this are be".split()
open(sys.argv[1], "w").write(" ".join(random.choice(words) for _ in range(60000)))
PY
  "$KDTRAIN" data write --bytes "$1/train.txt" --out "$1/train.bin" --version 1 > /dev/null
}

# gpu_run_tests DIR NAME FILTER [LIMIT]: the test binary on FILTER -> DIR/tests_NAME.txt
# (compact reporter; -d yes prints each test case's end, so a run cut short still says
# which cases ended), DIR/tests_NAME.names (the cases FILTER selects) and
# DIR/tests_NAME.meta.json (filter, listed count, limit; after the run also exit code,
# seconds and `cut`), then its summary line. LIMIT > 0: the run is cut by `timeout` after
# LIMIT seconds; `cut` comes from that timer, never from Catch2's output (Catch2 traps the
# SIGTERM and reports a failed test case). A meta without an exit code is a run that
# never returned (the step around it was cut).
gpu_run_tests() {
  local dir="$1" name="$2" filter="$3" limit="${4:-0}" start listed rc cut=false
  start=$(date +%s)
  "$TESTS" "$filter" --list-test-names-only 2>/dev/null | grep . > "$dir/tests_$name.names"
  listed=$(wc -l < "$dir/tests_$name.names")
  local head="\"filter\": \"$filter\", \"listed\": $listed, \"limit\": $limit"
  echo "{$head}" > "$dir/tests_$name.meta.json"
  if (( limit > 0 )); then
    timeout -k 2 "$limit" "$TESTS" "$filter" -r compact -d yes > "$dir/tests_$name.txt" 2>&1
    rc=$?
    [[ $rc == 124 || $rc == 137 ]] && cut=true
  else
    "$TESTS" "$filter" -r compact -d yes > "$dir/tests_$name.txt" 2>&1
    rc=$?
  fi
  echo "{$head, \"exit_code\": $rc, \"cut\": $cut, \"seconds\": $(( $(date +%s) - start ))}" \
    > "$dir/tests_$name.meta.json"
  [[ $cut == true ]] || grep -v "^[0-9.]* s: " "$dir/tests_$name.txt" | tail -2
  python3 "$ROOT/scripts/gpu/gpu_report.py" suite "$dir" --name "$name" --device "${DEVICE:-cuda}"
}

# gpu_skip_tests DIR NAME FILTER WHY: the suite was not started (no time left): its listed
# cases and the reason -> DIR/tests_NAME.names and .meta.json.
gpu_skip_tests() {
  local dir="$1" name="$2" filter="$3" why="$4"
  "$TESTS" "$filter" --list-test-names-only 2>/dev/null | grep . > "$dir/tests_$name.names"
  echo "{\"filter\": \"$filter\", \"listed\": $(wc -l < "$dir/tests_$name.names"), \"skipped\": \"$why\"}" \
    > "$dir/tests_$name.meta.json"
  echo "   $name: not run ($why)"
}

# gpu_run_sanitizer DIR TOOL FILTER TIMEOUT: compute-sanitizer --tool TOOL on the tests of
# FILTER -> DIR/TOOL.txt and DIR/TOOL.meta.json (or why it was not run: SANITIZE=0, no
# GPU, no compute-sanitizer). Some GPU runtimes refuse the tool at once ("Device not
# supported", then error 999): that is recorded as not run, and the return status is 3 so
# the caller skips the other tools.
gpu_run_sanitizer() {
  local dir="$1" tool="$2" filter="$3" limit="$4" start rc timed_out=false sanitizer
  sanitizer="$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)"
  if [[ "${SANITIZE:-1}" == 0 || "${DEVICE:-cuda}" != cuda || -z "$sanitizer" ]]; then
    local why="compute-sanitizer not found"
    [[ "${SANITIZE:-1}" == 0 ]] && why="SANITIZE=0"
    [[ "${DEVICE:-cuda}" != cuda ]] && why="DEVICE=${DEVICE}"
    printf '{"skipped": "%s"}\n' "$why" > "$dir/$tool.meta.json"
    echo "   not run: $why"
    return
  fi
  start=$(date +%s)
  timeout -k 2 "$limit" "$sanitizer" --tool "$tool" --print-limit 20 "$TESTS" "$filter" -r compact \
    > "$dir/$tool.txt" 2>&1
  rc=$?
  if grep -q "Device not supported" "$dir/$tool.txt"; then
    printf '{"skipped": "%s"}\n' "this GPU runtime refuses compute-sanitizer (Device not supported)" > "$dir/$tool.meta.json"
    echo "   not run: Device not supported ($(( $(date +%s) - start )) s)"
    return 3
  fi
  [[ $rc == 124 || $rc == 137 ]] && timed_out=true
  printf '{"filter": "%s", "exit_code": %s, "timed_out": %s, "seconds": %s}\n' "$filter" "$rc" \
    "$timed_out" "$(( $(date +%s) - start ))" > "$dir/$tool.meta.json"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^(Passed|Failed)" "$dir/$tool.txt" | tail -3
  return 0
}

# gpu_bench_config: the step benchmark's shape from the environment (defaults: the
# llama3.2-1b student at T 2048, micro-batch 8, 6 timed steps after 2) into COMMON, the
# arguments kdtrain bench and scripts/peers/bench_pytorch.py share.
gpu_bench_config() {
  PRESET="${PRESET:-llama3.2-1b}"
  SEQ="${SEQ:-2048}"
  MB="${MICRO_BATCH:-8}"
  STEPS="${STEPS:-6}"
  WARMUP="${WARMUP:-2}"
  COMMON=(--preset "$PRESET" --micro-batch "$MB" --seq-len "$SEQ" --steps "$STEPS" --warmup "$WARMUP"
          --device "${DEVICE:-cuda}" --json)
}

# gpu_bench_kdtrain DIR NAME VARIANT [ARGS...]: kdtrain bench -> DIR/kdtrain_NAME.json.
gpu_bench_kdtrain() {
  local dir="$1" name="$2" v="$3"
  shift 3
  "$KDTRAIN" bench --attention "$v" "${COMMON[@]}" "$@" > "$dir/kdtrain_$name.json" \
    || { echo "kdtrain bench $name failed: $(tail -c 300 "$dir/kdtrain_$name.json")"; return 1; }
}

# gpu_bench_torch DIR NAME VARIANT MODE [ARGS...]: scripts/peers/bench_pytorch.py (MODE compile
# or eager) -> DIR/torch_NAME.json.
gpu_bench_torch() {
  local dir="$1" name="$2" v="$3" mode="$4" flag=""
  shift 4
  [[ "$mode" == compile ]] && flag="--compile"
  python3 "$ROOT/scripts/peers/bench_pytorch.py" --attention "$v" "${COMMON[@]}" $flag "$@" > "$dir/torch_$name.json" \
    || { echo "bench_pytorch $name failed"; return 1; }
}
