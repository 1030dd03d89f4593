#!/usr/bin/env bash
# The small study: a scaled-down Table 1 on real text.
# A teacher is trained with cross-entropy, then one student per attention variant
# (baseline, sink, affine, gated, affine-gated; same seed, same data order) is
# distilled from it; each student is evaluated (C4 perplexity with `kdtrain eval`,
# the six zero-shot tasks with scripts/report/run_zero_shot.py on its Hugging Face
# export), analysed (`kdtrain analyze`), and scripts/report/report.py writes the tables
# and figures. Finished stages are skipped on a rerun (delete a file to redo it);
# a run whose config file or overrides changed is redone with its evaluations.
# Each run is a row OUT/runs/NAME: the training run in OUT/runs/NAME/run, what is
# derived from it beside it (eval_c4.json, hf/, zero_shot.json, analysis/, info.json,
# study_stamp; scripts/report/study_layout.py defines the layout). A study made before
# this layout (OUT/runs/NAME holding the run's files) is migrated first, keeping its runs.
#
#   scripts/small_study.sh [--out DIR] [--smoke] [--gpu] [--device cpu|cuda]
#                          [--limit N] [--teacher-config F] [--student-config F]
#                          [--tokenizer DIR] [--fineweb FILE...] [--c4 FILE]
#                          [--variants "baseline sink ..."] [--kdtrain BIN]
#                          [--student-set section.key=value ...]
#                          [--affine-divisors "sequence visible"] [--list-runs]
#
# Default (CPU): configs/study/cpu-{teacher,student}.json, bytes as tokens
# (vocabulary 256; a byte-level HF tokenizer is built for the export), the
# FineWeb-Edu sample of ../shared/data for training, the C4 validation slice for
# perplexity, zero-shot on the first --limit 100 items of each task.
# --gpu: configs/study/gpu-*.json, the Llama-3 tokenizer, --device cuda, all items.
# --smoke: 5 steps per run, --limit 2, tiny evaluations (the pytest uses it).
# --affine-divisors: the variants with the affine term train once per listed
# attention.affine_bias_divisor; the `sequence` run (the paper's divisor) keeps the
# variant's name, any other is named VARIANT-DIVISOR (affine-visible), whatever the order
# or selection. Default "sequence visible" (CPU), "sequence" (--gpu). --list-runs
# prints the runs the study would train (NAME VARIANT DIVISOR) and exits.
# docs/reproduce.md, "The small study", has the measured run.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
SHARED="$ROOT/../shared/data"

OUT=""; SMOKE=0; LIST_RUNS=0; GPU=0; DEVICE=""; LIMIT=""; TEACHER_CFG=""; STUDENT_CFG=""
TOKENIZER=""; FINEWEB=(); C4=""; STUDENT_SET=(); VARIANTS=""; AFFINE_DIVISORS=""
KDTRAIN="${KDTRAIN:-build/kdtrain}"
while (($#)); do
  case "$1" in
    --out) OUT="$2"; shift 2 ;;
    --smoke) SMOKE=1; shift ;;
    --gpu) GPU=1; shift ;;
    --device) DEVICE="$2"; shift 2 ;;
    --limit) LIMIT="$2"; shift 2 ;;
    --teacher-config) TEACHER_CFG="$2"; shift 2 ;;
    --student-config) STUDENT_CFG="$2"; shift 2 ;;
    --tokenizer) TOKENIZER="$2"; shift 2 ;;
    --fineweb) shift; while (($#)) && [[ $1 != --* ]]; do FINEWEB+=("$1"); shift; done ;;
    --c4) C4="$2"; shift 2 ;;
    --variants) VARIANTS="$2"; shift 2 ;;
    --kdtrain) KDTRAIN="$2"; shift 2 ;;
    --student-set) STUDENT_SET+=(--set "$2"); shift 2 ;;
    --affine-divisors) AFFINE_DIVISORS="$2"; shift 2 ;;
    --list-runs) LIST_RUNS=1; shift ;;
    -h|--help) sed -n '2,32p' "$0"; exit 0 ;;
    *) echo "small_study.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done

if ((GPU)); then
  : "${OUT:=small-study-gpu}" "${DEVICE:=cuda}" "${TEACHER_CFG:=configs/study/gpu-teacher.json}"
  : "${STUDENT_CFG:=configs/study/gpu-student.json}" "${TOKENIZER:=$SHARED/tokenizers/llama3}"
  VAL_TOKENS=1000000; EVAL_WINDOWS=0; : "${AFFINE_DIVISORS:=sequence}"
else
  : "${OUT:=small-study}" "${DEVICE:=cpu}" "${TEACHER_CFG:=configs/study/cpu-teacher.json}"
  : "${STUDENT_CFG:=configs/study/cpu-student.json}" "${LIMIT:=100}"
  VAL_TOKENS=20000; EVAL_WINDOWS=256; : "${AFFINE_DIVISORS:=sequence visible}"
fi
((${#FINEWEB[@]})) || FINEWEB=("$SHARED/text/fineweb_edu_sample10BT.rows000-099.csv")
: "${C4:=$SHARED/text/c4_validation_2k.rows0000-0999.jsonl}"
ANALYZE_SEQS=10
SMOKE_SET=()
if ((SMOKE)); then
  LIMIT=2; EVAL_WINDOWS=4; ANALYZE_SEQS=1
  SMOKE_SET=(--set train.steps=5 --set schedule.warmup=1 --set train.global_batch=4
             --set train.micro_batch=4)
fi

[[ -x $KDTRAIN ]] || { echo "small_study.sh: $KDTRAIN not built (cmake -S . -B build && cmake --build build)" >&2; exit 1; }
# Default: every variant, from the binary's own table.
VARIANT_TABLE="$("$KDTRAIN" info --variants)"  # name, then features
[[ -n $VARIANTS ]] || VARIANTS="$(awk '{print $1}' <<< "$VARIANT_TABLE" | tr '\n' ' ')"
# The variants with the affine term, from the same table's feature column.
AFFINE_VARIANTS=" $(awk '/ affine( |$)/ {print $1}' <<< "$VARIANT_TABLE" | tr '\n' ' ') "
[[ -n ${AFFINE_DIVISORS// } ]] || { echo "small_study.sh: --affine-divisors is empty" >&2; exit 2; }
for d in $AFFINE_DIVISORS; do  # kdtrain's own config check names the choices
  "$KDTRAIN" info --config "$STUDENT_CFG" --set "attention.affine_bias_divisor=$d" >/dev/null ||
    { echo "small_study.sh: --affine-divisors: '$d' refused" >&2; exit 2; }
done
# student_runs: "NAME VARIANT DIVISOR" lines, DIVISOR "-" for variants without the affine term.
student_runs() {
  local v d
  for v in $VARIANTS; do
    if [[ $AFFINE_VARIANTS == *" $v "* ]]; then
      for d in $AFFINE_DIVISORS; do
        if [[ $d == sequence ]]; then echo "$v $v $d"; else echo "$v-$d $v $d"; fi
      done
    else
      echo "$v $v -"
    fi
  done
}
if ((LIST_RUNS)); then echo "teacher teacher -"; student_runs; exit 0; fi
for f in "${FINEWEB[@]}" "$C4"; do
  [[ -f $f ]] || { echo "small_study.sh: missing input $f" >&2; exit 1; }
done
# Rows made before the run/ layout (OUT/runs/NAME holding the run's files and its results
# side by side) move their runs into OUT/runs/NAME/run first; a row that cannot is refused
# by name, before anything runs (scripts/report/study_layout.py migrate).
shopt -s nullglob; OLD_ROWS=("$OUT"/runs/*/); shopt -u nullglob
if ((${#OLD_ROWS[@]})); then
  python3 scripts/report/study_layout.py migrate "${OLD_ROWS[@]%/}" ||
    { echo "small_study.sh: $OUT/runs: rows not migrated (above)" >&2; exit 1; }
fi
mkdir -p "$OUT/runs"
TIMINGS="$OUT/timings.tsv"
[[ -f $TIMINGS ]] || printf 'stage\tseconds\n' > "$TIMINGS"
STUDY_START=$(date +%s)

log() { printf '[small-study %s] %s\n' "$(date -u +%H:%M:%S)" "$*"; }
# stage NAME DONE_FILE CMD...: runs CMD unless DONE_FILE exists, records the time.
stage() {
  local name="$1" done_file="$2"; shift 2
  if [[ -e $done_file ]]; then log "$name: done already ($done_file)"; return 0; fi
  log "$name ..."
  local t0; t0=$(date +%s.%N)
  "$@"
  local dt; dt=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$t0" "$(date +%s.%N)")
  printf '%s\t%s\n' "$name" "$dt" >> "$TIMINGS"
  log "$name: ${dt}s"
}
# row_paths ROW: ROW_RUN, ROW_EVAL_C4, ROW_HF, ... of ROW (scripts/report/study_layout.py).
row_paths() { eval "$(python3 scripts/report/study_layout.py "$1")"; }
cfg_value() { python3 -c "import json,sys; c=json.load(open(sys.argv[1])); print(c[sys.argv[2]][sys.argv[3]])" "$@"; }
# A run's stamp: sha256 of its config file's bytes and its command-line overrides
# (and, for students, the teacher's stamp). A run is finished when its latest
# checkpoint is the final step and its stamp is unchanged; otherwise its row is
# set aside (the run with its evaluations, set_aside) and redone. Needs row_paths of the row.
stamp_of() { { cat "$1"; shift; printf '%s\n' "$@"; } | sha256sum | cut -d' ' -f1; }
# STAMPS: the run's stamp, then any other stamp the same run may carry (a student migrated
# from the flat layout was stamped with its teacher at the teacher's flat place).
finished() {
  local steps="$1" stamps=" $2 " latest="$ROW_RUN/checkpoints/latest"
  [[ -f $latest ]] && [[ $(cat "$latest") == "$(printf 'step_%08d' "$steps")" ]] &&
    [[ -s $ROW_STUDY_STAMP ]] && [[ $stamps == *" $(cat "$ROW_STUDY_STAMP") "* ]]
}

# ---- 1. tokenizer and data
if [[ -z $TOKENIZER ]]; then
  TOKENIZER="$OUT/tokenizer"
  stage "byte tokenizer" "$TOKENIZER/tokenizer.json" python3 scripts/data/make_byte_tokenizer.py --out "$TOKENIZER"
  SEP=(--separator "$(python3 -c 'import sys; sys.path.insert(0, "scripts/data"); import make_byte_tokenizer as m; print(m.byte_alphabet()[m.NEWLINE])')" --separator-position after)
else
  SEP=()
fi
DATA="$OUT/data"
stage "prepare FineWeb-Edu" "$DATA/fineweb_edu/manifest.json" \
  python3 scripts/data/prepare_fineweb_edu.py --tokenizer "$TOKENIZER" --input "${FINEWEB[@]}" \
    --out "$DATA/fineweb_edu" --val-tokens "$VAL_TOKENS" --overwrite --quiet ${SEP[@]+"${SEP[@]}"}
stage "prepare C4 validation" "$DATA/c4/manifest.json" \
  python3 scripts/data/prepare_c4.py --tokenizer "$TOKENIZER" --input "$C4" --out "$DATA/c4" \
    --overwrite --quiet ${SEP[@]+"${SEP[@]}"}
TRAIN_SHARDS="$DATA/fineweb_edu/fineweb_edu_train_*.bin"
VAL_SHARDS="$DATA/fineweb_edu/fineweb_edu_val_*.bin"
C4_SHARDS="$DATA/c4/c4_val_*.bin"
COMMON=(--set "data.train=$TRAIN_SHARDS" --set "data.val=$VAL_SHARDS" --set "train.device=$DEVICE"
        ${SMOKE_SET[@]+"${SMOKE_SET[@]}"})
steps_of() {  # the resolved step count of a config with the study's overrides
  if ((SMOKE)); then echo 5; else cfg_value "$1" train steps; fi
}
SEQ_LEN=$(cfg_value "$STUDENT_CFG" train seq_len)
DEV=(--device "$DEVICE")
EVAL_ARGS=(--seq-len "$SEQ_LEN")
((EVAL_WINDOWS > 0)) && EVAL_ARGS+=(--max-windows "$EVAL_WINDOWS")
ZS_ARGS=(--device "$DEVICE" --dtype float32)  # fp32 even on CUDA: docs/reproduce.md, "GPU version"
[[ -n $LIMIT ]] && ZS_ARGS+=(--limit "$LIMIT")

# set_aside ROW: moves a row that is not finished (changed, or cut short) to
# OUT/superseded/NAME.TIME, never deleting a run; an empty row is removed.
set_aside() {
  local row="$1" dest
  [[ -e $row || -L $row ]] || return 0
  if [[ -d $row && ! -L $row && -z $(ls -A "$row") ]]; then rmdir "$row"; return 0; fi
  dest="$OUT/superseded/$(basename "$row").$(date -u +%Y%m%dT%H%M%SZ).$$"
  mkdir -p "$OUT/superseded"
  mv -n -T "$row" "$dest"
  [[ ! -e $row && ! -L $row ]] || { echo "small_study.sh: could not set $row aside to $dest" >&2; exit 1; }
  log "$(basename "$row"): changed or unfinished; the old row is kept in $dest"
}

# train_and_eval NAME TRAIN_STAGE ROW STAMPS CONFIG ARGS...: trains ROW's run with CONFIG and
# ARGS unless it finished with one of STAMPS ("STAMP [OLD_STAMP]"; a stale row is set aside
# first), records STAMP, sets CKPT to the final checkpoint and evaluates it on C4;
# leaves ROW's paths in ROW_*. Stages "NAME: TRAIN_STAGE", "NAME: C4 eval".
train_and_eval() {
  local name="$1" train_stage="$2" row="$3" stamp="$4" cfg="$5"
  shift 5
  row_paths "$row"
  if ! finished "$(steps_of "$cfg")" "$stamp"; then set_aside "$row"; fi
  mkdir -p "$row"
  stage "$name: $train_stage" "$ROW_RUN/checkpoints/latest" \
    "$KDTRAIN" train --config "$cfg" "$@" --run-dir "$ROW_RUN"
  echo "${stamp%% *}" > "$ROW_STUDY_STAMP"
  CKPT="$ROW_RUN/checkpoints/$(cat "$ROW_RUN/checkpoints/latest")"
  stage "$name: C4 eval" "$ROW_EVAL_C4" \
    "$KDTRAIN" eval --checkpoint "$CKPT" --data "$C4_SHARDS" "${EVAL_ARGS[@]}" "${DEV[@]}" \
      --out "$ROW_EVAL_C4"
}

# ---- 2. teacher (cross-entropy only)
TEACHER_ROW="$OUT/runs/teacher"
TEACHER_STAMP=$(stamp_of "$TEACHER_CFG" "${COMMON[@]}")
train_and_eval teacher train "$TEACHER_ROW" "$TEACHER_STAMP" "$TEACHER_CFG" "${COMMON[@]}"
TEACHER="$CKPT"
TEACHER_EVAL="$ROW_EVAL_C4"

# ---- 3. students, one per variant, then their evaluation and analysis
rows=()
while read -r -u 3 v variant divisor; do
  row="$OUT/runs/$v"
  rows+=("$row")
  extra=()
  [[ $divisor == - ]] || extra+=(--set "attention.affine_bias_divisor=$divisor")
  extra+=(${STUDENT_SET[@]+"${STUDENT_SET[@]}"})
  args=(--attention "$variant" "${COMMON[@]}" --set "kd.teacher=$TEACHER" ${extra[@]+"${extra[@]}"})
  st=$(stamp_of "$STUDENT_CFG" "${args[@]}" "teacher $TEACHER_STAMP")
  # The same student as stamped in the flat layout, its teacher at TEACHER_ROW/checkpoints.
  st_flat=$(stamp_of "$STUDENT_CFG" --attention "$variant" "${COMMON[@]}" \
    --set "kd.teacher=$TEACHER_ROW/checkpoints/${TEACHER##*/}" ${extra[@]+"${extra[@]}"} "teacher $TEACHER_STAMP")
  train_and_eval "$v" "train (KD from teacher)" "$row" "$st $st_flat" "$STUDENT_CFG" "${args[@]}"
  ckpt="$CKPT"
  stage "$v: info" "$ROW_INFO" \
    bash -c '"$1" info --config "$2" --json > "$3.tmp" && mv "$3.tmp" "$3"' _ "$KDTRAIN" "$ROW_RUN/config.json" "$ROW_INFO"
  stage "$v: export" "$ROW_HF/config.json" \
    "$KDTRAIN" export --checkpoint "$ckpt" --out "$ROW_HF" --tokenizer "$TOKENIZER" --force
  stage "$v: zero-shot" "$ROW_ZERO_SHOT" \
    python3 scripts/report/run_zero_shot.py --model "$ROW_HF" --out "$ROW_ZERO_SHOT" "${ZS_ARGS[@]}"
  stage "$v: analyze" "$ROW_ANALYSIS/analysis.json" \
    "$KDTRAIN" analyze --checkpoint "$ckpt" --data "$C4_SHARDS" --seq-len "$SEQ_LEN" \
      --num-seqs "$ANALYZE_SEQS" "${DEV[@]}" --out "$ROW_ANALYSIS"
done 3< <(student_runs)

# ---- 4. report (always redone: cheap)
log "report ..."
FLAGS=""  # (an assignment from $( ((GPU)) && ...) takes its status: 1 under set -e when GPU=0)
((SMOKE)) && FLAGS+=" --smoke"
((GPU)) && FLAGS+=" --gpu"
NOTE="A scaled-down Table 1 on real text (scripts/small_study.sh$FLAGS); docs/reproduce.md, \"The small study\"."
python3 scripts/report/report.py "${rows[@]}" --out "$OUT/report" --kdtrain "$KDTRAIN" \
  --title "Small study" --note "$NOTE" >/dev/null
printf 'total (this invocation)\t%s\n' "$(($(date +%s) - STUDY_START))" >> "$TIMINGS"
log "done in $(($(date +%s) - STUDY_START))s; report in $OUT/report"
echo
cat "$OUT/report/table1.md" "$OUT/report/table2.md" 2>/dev/null || true
python3 -c "import json,sys; e=json.load(open(sys.argv[1])); print(f\"teacher: C4 PPL {e['perplexity']:.3f} (mean CE {e['mean_ce']:.4f})\")" "$TEACHER_EVAL"
