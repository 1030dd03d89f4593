#!/usr/bin/env bash
# Behaviour check for refactors: two kdtrain binaries (say, main's and a branch's)
# train the same tiny runs, and their metrics.jsonl (timings and memory aside)
# and checkpoint files must be identical byte for byte; the exported Python
# sources a checkpoint carries (scripts/kdtrain_hf/, embedded in the binary) are
# code, and a change to them is reported, not failed. The settings files
# (config.json, run_config.json) are compared key by key: every key the before
# side writes must agree, and a key only the after side writes (a new setting)
# is listed. Runs: a CE teacher, then a KD student of every variant with
# validation and several checkpoints, each resumed once halfway; with mpirun
# present, an affine student on 2 ranks (ZeRO-1 and all-reduce). About 2
# minutes on 2 cores.
#
#   scripts/same_runs.sh BEFORE_BINARY AFTER_BINARY [--out DIR]   (default: a temp dir)
set -euo pipefail
(($# >= 2)) || { sed -n '2,15p' "$0"; exit 2; }
BEFORE="$(realpath "$1")"
AFTER="$(realpath "$2")"
shift 2
OUT="$(mktemp -d)"
while (($#)); do
  case "$1" in
    --out) OUT="$2"; shift 2 ;;
    *) echo "same_runs.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT"
OUT="$(realpath "$OUT")"

# Pseudo-text bytes, the same for both binaries.
python3 - "$OUT/text.txt" <<'EOF'
import random, sys
rng = random.Random(7)
words = ["the", "model", "attends", "to", "a", "sink", "and", "an", "affine", "gate", "of", "values"]
open(sys.argv[1], "w").write(" ".join(rng.choice(words) for _ in range(6000)))
EOF
"$BEFORE" data write --bytes "$OUT/text.txt" --out "$OUT/train.bin" --version 1 >/dev/null

COMMON=(--preset tiny-llama --set "data.train=$OUT/train.bin" --set "data.val=$OUT/train.bin"
        --set train.seq_len=32 --set train.global_batch=4 --set train.micro_batch=2
        --set train.threads=1 --set schedule.warmup=2 --set checkpoint.interval=2
        --set checkpoint.keep=10 --set eval.interval=3 --set eval.batches=2)

# run BINARY SIDE NAME ARGS...: trains 4 steps, then resumes to 8.
run() {
  local bin="$1" side="$2" name="$3"
  shift 3
  local dir="$OUT/$side/$name"
  local launch=()
  [[ $name == mpi* ]] && launch=(mpirun --oversubscribe --allow-run-as-root -np 2)
  (cd "$OUT" && "${launch[@]}" "$bin" train "${COMMON[@]}" "$@" --set train.steps=4 --run-dir "$dir" \
     >"$dir.log" 2>&1 &&
   "${launch[@]}" "$bin" train "${COMMON[@]}" "$@" --set train.steps=8 --resume "$dir" --run-dir "$dir" \
     >>"$dir.log" 2>&1) || { echo "FAILED: $side $name (see $dir.log)"; return 1; }
}

variants=$("$AFTER" info --variants | awk '{print $1}')
for side in before after; do
  bin="$BEFORE"
  [[ $side == after ]] && bin="$AFTER"
  mkdir -p "$OUT/$side"
  # The teacher of both sides is the before side's, so each student compares alone.
  run "$bin" "$side" teacher --attention baseline
  teacher="$OUT/before/teacher/checkpoints/$(cat "$OUT/before/teacher/checkpoints/latest")"
  for v in $variants; do run "$bin" "$side" "$v" --attention "$v" --set "kd.teacher=$teacher"; done
  if command -v mpirun >/dev/null; then
    run "$bin" "$side" mpi-zero1 --attention affine --set "kd.teacher=$teacher" --set dist.zero1=true
    run "$bin" "$side" mpi-allreduce --attention sink --set "kd.teacher=$teacher" --set dist.zero1=false
  fi
done

python3 - "$OUT" "$(dirname "$0")/report" <<'EOF'
import json, pathlib, sys
sys.path.insert(0, sys.argv[2])
from metric_keys import arithmetic_rows
out = pathlib.Path(sys.argv[1])
CONFIGS = ("config.json", "run_config.json")  # settings: compared key by key, below


def flat(doc, prefix=""):
    items = {}
    for k, v in doc.items():
        items.update(flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {prefix + k: v})
    return items


def config_diff(a, b, added):
    """Keys both config files hold must agree; a key only the after side writes (a new
    setting, at its default since the runs pass none) is reported, not failed."""
    x, y = (flat(json.loads(f.read_text())) for f in (a, b))
    added.update(set(y) - set(x))
    return sorted(k for k in x if k not in y or x[k] != y[k])


bad, added_keys = 0, set()
for before in sorted(p for p in (out / "before").iterdir() if p.is_dir()):
    after = out / "after" / before.name
    rows = [arithmetic_rows(d / "metrics.jsonl") for d in (before, after)]
    same = rows[0] == rows[1] and len(rows[0]) == 8
    ck = [before / "checkpoints", after / "checkpoints"]
    names = [sorted(str(p.relative_to(c)) for p in c.rglob("*") if p.is_file()) for c in ck]
    differ, code = [], set()
    for f in sorted(set(names[0]) | set(names[1])):
        if f not in names[0] or f not in names[1]:
            differ.append(f)
        elif f.endswith(".py"):  # scripts/kdtrain_hf/ as embedded in the binary: code, not state
            if (ck[0] / f).read_bytes() != (ck[1] / f).read_bytes():
                code.add(f.rsplit("/", 1)[-1])
        elif f.endswith(CONFIGS):
            keys = config_diff(ck[0] / f, ck[1] / f, added_keys)
            differ += [f"{f} ({', '.join(keys)})"] if keys else []
        elif f.endswith("checksums.json"):  # the same, but for the entries compared above
            sums = [{k: v for k, v in json.loads((c / f).read_text())["files"].items()
                     if not k.endswith((".py",) + CONFIGS)} for c in ck]
            differ += [f] if sums[0] != sums[1] else []
        elif (ck[0] / f).read_bytes() != (ck[1] / f).read_bytes():
            differ.append(f)
    ok = same and not differ
    bad += not ok
    print(f"{before.name:<14} metrics {'same' if same else 'DIFFER'} ({len(rows[0])} rows), "
          f"{len(names[0])} checkpoint files {'same' if not differ else 'DIFFER: ' + ', '.join(differ)}"
          + (f" (embedded Python sources changed: {', '.join(sorted(code))})" if code else ""))
if added_keys:
    print(f"settings only the after side writes (new keys at their defaults): {', '.join(sorted(added_keys))}")
print("identical" if bad == 0 else f"{bad} run(s) differ")
sys.exit(1 if bad else 0)
EOF
