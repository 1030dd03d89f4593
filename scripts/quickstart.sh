#!/usr/bin/env bash
# The quick start (README command 1): on a fresh machine, offline, builds kdtrain
# if needed, prepares a real-text corpus, trains a small teacher with CE, then
# distills a smaller student with each of the five attention variants and
# prints the comparison table. About 10 minutes on 2 cores.
#
#   scripts/quickstart.sh [--out DIR]      (default: quickstart/)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT=quickstart
while (($#)); do
  case "$1" in
    --out) OUT="$2"; shift 2 ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) echo "quickstart.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
KDTRAIN=build/kdtrain
[[ -x $KDTRAIN ]] || scripts/setup.sh --no-python

echo "== 1/3 corpus"
python3 scripts/data/quickstart_corpus.py --out "$OUT/data"
for split in train val; do
  "$KDTRAIN" data write --bytes "$OUT/data/$split.txt" --out "$OUT/data/$split.bin" --version 1
done
DATA=(--set "data.train=$OUT/data/train.bin" --set "data.val=$OUT/data/val.bin")

echo "== 2/3 teacher (CE only)"
rm -rf "$OUT/runs"
"$KDTRAIN" train --config configs/quickstart/teacher.json "${DATA[@]}" --run-dir "$OUT/runs/teacher"
TEACHER="$OUT/runs/teacher/checkpoints/$(cat "$OUT/runs/teacher/checkpoints/latest")"

echo "== 3/3 students distilled from $TEACHER"
runs=()
for variant in $("$KDTRAIN" info --variants | awk '{print $1}'); do
  echo "-- student: $variant"
  "$KDTRAIN" train --config configs/quickstart/student.json --attention "$variant" "${DATA[@]}" \
    --set "kd.teacher=$TEACHER" --run-dir "$OUT/runs/$variant"
  runs+=("$OUT/runs/$variant")
done

echo
echo "== variant comparison (tiny-llama student, byte-level, $(python3 -c 'import json,sys;print(json.load(open(sys.argv[1]))["train"]["steps"])' configs/quickstart/student.json) steps)"
python3 scripts/report/compare_runs.py --kdtrain "$KDTRAIN" "${runs[@]}"
