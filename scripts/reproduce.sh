#!/usr/bin/env bash
# The paper's study, end to end.
#
# The whole study (Tables 1-5, Figures 2-10; scripts/report/reproduce_tables.py, which
# runs every row below and then scripts/report/report.py):
#   scripts/reproduce.sh --tables --teachers DIR --out OUT [--fineweb FILE...] [--c4 FILE]
#       [--device cuda] [--launch "mpirun -np 8"] [--only "1B-affine 1B-sink"] [--smoke] ...
#   (scripts/report/reproduce_tables.py --help lists every option)
#
# One row of a table:
#   prepare data -> train (KD from the teacher) -> export -> C4 perplexity ->
#   zero-shot (six lm-eval tasks) -> attention analysis -> report.
#
#   scripts/reproduce.sh --config configs/paper/llama3.2-1b.json --attention affine \
#       --data-dir DIR --teacher HF_DIR --out ROW
#       [--tokenizer DIR] [--steps N] [--device cpu|cuda] [--launch "mpirun -np 8"]
#       [--set section.key=value ...] [--fineweb FILE...] [--c4 FILE] [--val-tokens N] [--max-tokens N]
#       [--limit N] [--batch-size N] [--eval-data DIR] [--eval-windows N]
#       [--analyze-seqs N] [--report DIR | --no-report] [--no-zero-shot] [--kdtrain BIN]
#   scripts/reproduce.sh --prepare-only --data-dir DIR --tokenizer TOK [--fineweb ...] [--c4 F]
#       (stage 1 only: the data of a tokenizer)
#
# ROW holds the row: the training run in ROW/run and, beside it, what is derived
# from it (info.json, hf/, eval_c4.json, zero_shot.json, analysis/, report/;
# scripts/report/study_layout.py defines the layout; only `kdtrain train` writes
# inside ROW/run; a ROW made before this layout, holding the run's files, is
# migrated first: study_layout.py migrate). Every stage is skipped when its output exists (delete
# the file to redo it); an interrupted training run is resumed with `kdtrain
# train --resume`. A row remembers what trained its run (ROW/reproduce_stamp: the
# config file, the variant and every override); a different request for the same
# row is refused rather than mixed in. Data: DIR/fineweb_edu (prepare_fineweb_edu.py,
# --val-tokens for its validation shard, --max-tokens to stop the input there)
# and DIR/c4 (prepare_c4.py), tokenized with --tokenizer (default: the teacher's
# tokenizer files, else ../shared/data's Llama-3 / Qwen2 tokenizer by the
# config's model family). --fineweb / --c4 name
# the raw inputs (default: the small slices in ../shared/data, enough for a test,
# not for the paper's 18.9B tokens). docs/reproduce.md explains each stage.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SHARED="$ROOT/../shared/data"

if [[ ${1:-} == --tables ]]; then
  shift
  exec python3 "$ROOT/scripts/report/reproduce_tables.py" "$@"
fi

CONFIG=""; VARIANT=""; DATA_DIR=""; TEACHER=""; ROW=""; TOKENIZER=""; STEPS=""; DEVICE=""
LAUNCH=""; FINEWEB=(); C4=""; LIMIT=""; BATCH=""; REPORT=""; EVAL_WINDOWS=""; ANALYZE_SEQS=""
OVERRIDES=(); VAL_TOKENS=""; MAX_TOKENS=""; EVAL_DATA=""; NO_REPORT=0; PREPARE_ONLY=0; NO_ZERO_SHOT=0
KDTRAIN="${KDTRAIN:-$ROOT/build/kdtrain}"
usage() { sed -n "2,37p" "$0"; }
while (($#)); do
  case "$1" in
    --config) CONFIG="$2"; shift 2 ;;
    --attention) VARIANT="$2"; shift 2 ;;
    --data-dir) DATA_DIR="$2"; shift 2 ;;
    --teacher) TEACHER="$2"; shift 2 ;;
    --out) ROW="$2"; shift 2 ;;
    --tokenizer) TOKENIZER="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --device) DEVICE="$2"; shift 2 ;;
    --launch) LAUNCH="$2"; shift 2 ;;
    --set) OVERRIDES+=(--set "$2"); shift 2 ;;
    --fineweb) shift; while (($#)) && [[ $1 != --* ]]; do FINEWEB+=("$1"); shift; done ;;
    --c4) C4="$2"; shift 2 ;;
    --val-tokens) VAL_TOKENS="$2"; shift 2 ;;
    --max-tokens) MAX_TOKENS="$2"; shift 2 ;;
    --limit) LIMIT="$2"; shift 2 ;;
    --batch-size) BATCH="$2"; shift 2 ;;
    --eval-data) EVAL_DATA="$2"; shift 2 ;;
    --report) REPORT="$2"; shift 2 ;;
    --no-report) NO_REPORT=1; shift ;;
    --no-zero-shot) NO_ZERO_SHOT=1; shift ;;
    --prepare-only) PREPARE_ONLY=1; shift ;;
    --eval-windows) EVAL_WINDOWS="$2"; shift 2 ;;
    --analyze-seqs) ANALYZE_SEQS="$2"; shift 2 ;;
    --kdtrain) KDTRAIN="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "reproduce.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
die() { echo "reproduce.sh: $*" >&2; exit 1; }
START=$(date +%s)
log() { printf '[reproduce %s +%ds] %s\n' "$(date -u +%H:%M:%S)" "$(($(date +%s) - START))" "$*"; }
# stage NAME DONE_FILE CMD...: run CMD unless DONE_FILE exists.
stage() {
  local name="$1" done_file="$2"; shift 2
  if [[ -e $done_file ]]; then log "$name: skipped, $done_file exists"; return 0; fi
  local t0; t0=$(date +%s)
  log "$name ..."
  "$@"
  log "$name: done in $(($(date +%s) - t0))s"
}
((${#FINEWEB[@]})) || FINEWEB=("$SHARED/text/fineweb_edu_sample10BT.rows000-099.csv")
: "${C4:=$SHARED/text/c4_validation_2k.rows0000-0999.jsonl}"
FW="$DATA_DIR/fineweb_edu"; C4DIR="$DATA_DIR/c4"
C4_SHARDS="$C4DIR/c4_val_*.bin"
# ---- 1. data (FineWeb-Edu train/val shards and C4 validation shards of one tokenizer)
prepare_data() {
  local prep=(--tokenizer "$TOKENIZER" --overwrite)
  [[ -n $VAL_TOKENS ]] && prep+=(--val-tokens "$VAL_TOKENS")
  [[ -n $MAX_TOKENS ]] && prep+=(--max-tokens "$MAX_TOKENS")
  stage "prepare FineWeb-Edu -> $FW" "$FW/manifest.json" \
    python3 "$ROOT/scripts/data/prepare_fineweb_edu.py" "${prep[@]}" --input "${FINEWEB[@]}" --out "$FW"
  stage "prepare C4 validation -> $C4DIR" "$C4DIR/manifest.json" \
    python3 "$ROOT/scripts/data/prepare_c4.py" --tokenizer "$TOKENIZER" --input "$C4" --out "$C4DIR" --overwrite
}
if ((PREPARE_ONLY)); then
  [[ -n $DATA_DIR && -n $TOKENIZER ]] || die "--prepare-only needs --data-dir and --tokenizer"
  [[ -e $TOKENIZER ]] || die "--tokenizer $TOKENIZER not found"
  prepare_data
  exit 0
fi
[[ -n $CONFIG && -n $VARIANT && -n $DATA_DIR && -n $TEACHER && -n $ROW ]] ||
  die "--config, --attention, --data-dir, --teacher and --out are required (--help)"
[[ -f $CONFIG ]] || die "--config $CONFIG: no such file"
[[ -d $TEACHER ]] || die "--teacher $TEACHER: not a directory (a Hugging Face or kdtrain checkpoint)"
[[ -x $KDTRAIN ]] || die "$KDTRAIN is not built (cmake -S . -B build && cmake --build build)"
"$KDTRAIN" info --variants | awk '{print $1}' | grep -qxF -- "$VARIANT" || die "--attention $VARIANT: unknown variant"
# A row made before the run/ layout (the run's files and its results side by side in ROW)
# moves its run into ROW/run first, or is refused naming what is in the way.
python3 "$ROOT/scripts/report/study_layout.py" migrate "$ROW" || die "--out $ROW: not migrated (above)"
# ROW_RUN, ROW_EVAL_C4, ROW_HF, ...: the row's paths (scripts/report/study_layout.py).
eval "$(python3 "$ROOT/scripts/report/study_layout.py" "$ROW")"
RUN="$ROW_RUN"

cfg() { python3 -c "import json,sys; c=json.load(open(sys.argv[1])); print(c.get(sys.argv[2], {}).get(sys.argv[3], ''))" "$CONFIG" "$1" "$2"; }
: "${DEVICE:=$(cfg train device)}"; : "${DEVICE:=cpu}"
: "${REPORT:=$ROW_REPORT}"
if [[ -z $TOKENIZER ]]; then
  if [[ -f $TEACHER/tokenizer.json || -f $TEACHER/tokenizer.model ]]; then
    TOKENIZER="$TEACHER"
  else
    family=$(python3 -c "
import json, subprocess, sys
out = subprocess.run([sys.argv[1], 'info', '--config', sys.argv[2], '--json'], capture_output=True, text=True)
try:
    info = json.loads(out.stdout)
    print(info.get('architecture', {}).get('family', ''))
except Exception:
    print('')" "$KDTRAIN" "$CONFIG")
    case "$family" in
      qwen2) TOKENIZER="$SHARED/tokenizers/qwen2" ;;
      *) TOKENIZER="$SHARED/tokenizers/llama3" ;;
    esac
  fi
fi
[[ -e $TOKENIZER ]] || die "tokenizer $TOKENIZER not found (pass --tokenizer)"

log "row: $(basename "$CONFIG" .json) / $VARIANT -> $RUN (device $DEVICE, tokenizer $TOKENIZER)"

prepare_data

# ---- 2. train
# The shard names are the config's own (prepare_fineweb_edu.py writes exactly those);
# only their directory moves to where stage 1 prepared them.
SETS=(--set "kd.teacher=$TEACHER" --set "data.train=$FW/$(basename "$(cfg data train)")"
      --set "data.val=$FW/$(basename "$(cfg data val)")" --set "train.device=$DEVICE")
if [[ -n $STEPS ]]; then
  SETS+=(--set "train.steps=$STEPS")
  warmup=$(cfg schedule warmup); warmup=${warmup:-100}
  if ((warmup > STEPS)); then SETS+=(--set "schedule.warmup=$((STEPS / 10))"); fi
  interval=$(cfg checkpoint interval); interval=${interval:-0}
  if ((interval > STEPS)); then SETS+=(--set "checkpoint.interval=0"); fi
  ev=$(cfg eval interval); ev=${ev:-0}
  if ((ev > STEPS)); then SETS+=(--set "eval.interval=0"); fi
fi
SETS+=(${OVERRIDES[@]+"${OVERRIDES[@]}"})  # after the defaults above: the caller's --set wins
# What trains this run: a different request for the same directory is refused.
STAMP=$({ cat "$CONFIG"; printf '%s\n' "$VARIANT" "${SETS[@]}"; } | sha256sum | cut -d' ' -f1)
if [[ -f $ROW_REPRODUCE_STAMP && $(cat "$ROW_REPRODUCE_STAMP") != "$STAMP" ]]; then
  die "$RUN was trained from another config, variant or --set ($ROW_REPRODUCE_STAMP differs);" \
      "delete it or use another --out"
fi
if [[ -f $RUN/config.json ]]; then
  have=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['attention']['variant'])" "$RUN/config.json")
  [[ $have == "$VARIANT" ]] || die "$RUN holds a '$have' run, not '$VARIANT' (use another --out)"
fi
# The final step as the run resolved it (its config.json, written by kdtrain train).
final_of_run() { python3 -c "import json,sys; print('step_%08d' % json.load(open(sys.argv[1]))['train']['steps'])" "$RUN/config.json"; }
# shellcheck disable=SC2206
LAUNCHER=($LAUNCH)
if [[ -f $RUN/checkpoints/latest && $(cat "$RUN/checkpoints/latest") == "$(final_of_run)" ]]; then
  log "train: skipped, $RUN/checkpoints/$(final_of_run) exists"
elif [[ -f $RUN/checkpoints/latest ]]; then
  log "train: resuming $RUN from $(cat "$RUN/checkpoints/latest") ..."
  ${LAUNCHER[@]+"${LAUNCHER[@]}"} "$KDTRAIN" train --resume "$RUN"
else
  log "train: ${STEPS:-$(cfg train steps)} steps ..."
  mkdir -p "$RUN"  # train takes a new or empty directory
  rc=0
  ${LAUNCHER[@]+"${LAUNCHER[@]}"} "$KDTRAIN" train --config "$CONFIG" --attention "$VARIANT" \
    "${SETS[@]}" --run-dir "$RUN" || rc=$?
  # The stamp goes beside the run once train has made $RUN a run directory.
  [[ -f $RUN/config.json ]] && echo "$STAMP" > "$ROW_REPRODUCE_STAMP"
  ((rc == 0)) || die "training $RUN failed (exit $rc); rerun to resume"
fi
FINAL=$(final_of_run)
[[ $(cat "$RUN/checkpoints/latest") == "$FINAL" ]] ||
  die "training stopped at $(cat "$RUN/checkpoints/latest"), expected $FINAL (rerun to resume)"
CKPT="$RUN/checkpoints/$FINAL"
SEQ_LEN=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['train']['seq_len'])" "$RUN/config.json")

# ---- 3. export, evaluate, analyse
stage "info" "$ROW_INFO" \
  bash -c '"$1" info --config "$2" --json > "$3.tmp" && mv "$3.tmp" "$3"' _ "$KDTRAIN" "$RUN/config.json" "$ROW_INFO"
stage "export -> $ROW_HF" "$ROW_HF/config.json" \
  "$KDTRAIN" export --checkpoint "$CKPT" --out "$ROW_HF" --tokenizer "$TOKENIZER" --force
EV=(--seq-len "$SEQ_LEN" --device "$DEVICE")
[[ -n $EVAL_WINDOWS ]] && EV+=(--max-windows "$EVAL_WINDOWS")
stage "C4 perplexity (seq $SEQ_LEN)" "$ROW_EVAL_C4" \
  "$KDTRAIN" eval --checkpoint "$CKPT" --data "$C4_SHARDS" "${EV[@]}" --out "$ROW_EVAL_C4"
ZS=(--device "$DEVICE")
[[ -n $LIMIT ]] && ZS+=(--limit "$LIMIT")
[[ -n $BATCH ]] && ZS+=(--batch-size "$BATCH")
[[ -n $EVAL_DATA ]] && ZS+=(--eval-data "$EVAL_DATA")
if ((NO_ZERO_SHOT)); then
  log "zero-shot: left to the caller (--no-zero-shot)"
else
  stage "zero-shot (six tasks)" "$ROW_ZERO_SHOT" \
    python3 "$ROOT/scripts/report/run_zero_shot.py" --model "$ROW_HF" --out "$ROW_ZERO_SHOT" "${ZS[@]}"
fi
AN=(--device "$DEVICE")
[[ -n $ANALYZE_SEQS ]] && AN+=(--num-seqs "$ANALYZE_SEQS")
((SEQ_LEN < 1024)) && AN+=(--seq-len "$SEQ_LEN")  # the paper's 1024 unless trained shorter
stage "attention analysis" "$ROW_ANALYSIS/analysis.json" \
  "$KDTRAIN" analyze --checkpoint "$CKPT" --data "$C4_SHARDS" "${AN[@]}" --out "$ROW_ANALYSIS"

# ---- 4. report (always redone)
if ((NO_REPORT)); then log "finished"; exit 0; fi
log "report -> $REPORT"
python3 "$ROOT/scripts/report/report.py" "$ROW" --out "$REPORT" --kdtrain "$KDTRAIN" >/dev/null
cat "$REPORT"/table1.md 2>/dev/null || true
log "finished; to put rows together: scripts/reproduce.sh --tables, or python3 scripts/report/report.py ROW... --out DIR"
