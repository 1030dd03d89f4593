#!/usr/bin/env python3
"""Zero-shot accuracy on the paper's six tasks through lm-eval-harness, offline.

    python3 scripts/report/run_zero_shot.py --model HF_DIR --out ROW/zero_shot.json [--limit N]
    python3 scripts/report/run_zero_shot.py --model A/hf B/hf --out A/zero_shot.json B/zero_shot.json

Several models in one call are scored one after the other in one process, which
starts lm-eval, transformers and torch once (scripts/report/reproduce_tables.py does
this for a whole study); each output is written as soon as its model is done.

HF_DIR is a Hugging Face model directory (config.json, model.safetensors, a
tokenizer): a `kdtrain export` output, or any Llama/Qwen2 checkpoint. The task
definitions are the YAMLs in scripts/lm_eval_tasks/; their data are converted
here from the files under ../shared/data/evals/ (original or Hugging Face
formats) into one JSON-lines file per task, so nothing is downloaded.

Splits: lm-eval scores ARC-Easy and ARC-Challenge on their test splits and the
other four on validation. For each task the file holding the most rows of that
split under --eval-data is used (a full file in place of a shipped slice);
ARC-Easy falls back to its validation split when no test file is there, marked
as such. The output JSON (docs/evaluation.md) holds, per task, acc (and acc_norm
where lm-eval computes it), the metric the paper's column uses, the split, the
source file, how many examples were scored and the split's full size, and the
average of the metrics over the six tasks. Values are fractions in [0, 1].
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/, for kdtrain_hf

REPO = Path(__file__).resolve().parents[2]
TASK_DIR = REPO / "scripts" / "lm_eval_tasks"
DEFAULT_EVAL_DATA = REPO.parent / "shared" / "data" / "evals"
DATA_PLACEHOLDER = "KDTRAIN_EVAL_DATA"
LM_EVAL_VERSION = "0.4.9"

# Column order of the paper's Tables 1 and 2, the lm-eval task, and the metric of
# the column: length-normalised accuracy where lm-eval reports it for the
# sentence-completion tasks with unequal choice lengths (HellaSwag, ARC-c), plain
# accuracy elsewhere (the usual convention for these six; docs/evaluation.md).
TASKS = {
    "winogrande": {"task": "kd_winogrande", "metric": "acc", "column": "Wino"},
    "piqa": {"task": "kd_piqa", "metric": "acc", "column": "PIQA"},
    "hellaswag": {"task": "kd_hellaswag", "metric": "acc_norm", "column": "Hella"},
    "arc_challenge": {"task": "kd_arc_challenge", "metric": "acc_norm", "column": "ARC-c"},
    "arc_easy": {"task": "kd_arc_easy", "metric": "acc", "column": "ARC-e"},
    "boolq": {"task": "kd_boolq", "metric": "acc", "column": "BoolQ"},
}


# ---------------------------------------------------------------------------
# Data: source files -> one JSON-lines file per task (the YAMLs' data_files)
# ---------------------------------------------------------------------------

def read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def write_jsonl(path: Path, rows: list[dict]) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def arc_from_ai2(row: dict) -> dict:
    """Original AI2 ARC row {id, question{stem, choices[{text, label}]}, answerKey} -> HF schema."""
    q = row["question"]
    return {
        "id": row["id"],
        "question": q["stem"],
        "choices": {"text": [c["text"] for c in q["choices"]],
                    "label": [c["label"] for c in q["choices"]]},
        "answerKey": row["answerKey"],
    }


def arc_rows(path: Path) -> list[dict]:
    rows = read_jsonl(path)
    return [arc_from_ai2(r) if isinstance(r["question"], dict) else r for r in rows]


def hellaswag_clean(text: str) -> str:
    """lm-eval's hellaswag text clean-up: strip, ' [title]' -> '. ', drop [markup], collapse double spaces."""
    text = text.strip().replace(" [title]", ". ")
    text = re.sub(r"\[.*?\]", "", text)
    return text.replace("  ", " ")


def hellaswag_rows(path: Path) -> list[dict]:
    """The original jsonl {activity_label, ctx_a, ctx_b, endings, label} prepared as
    lm-eval's hellaswag does (ctx_b capitalised), or the llama.cpp text format: per
    task 6 lines — 'activity: context', gold 0-3, four endings."""
    if path.suffix == ".jsonl":
        return [{"query": hellaswag_clean(f"{r['activity_label']}: {r['ctx_a']} "
                                          f"{r['ctx_b'].capitalize()}"),
                 "choices": [hellaswag_clean(e) for e in r["endings"]],
                 "label": int(r["label"])} for r in read_jsonl(path)]
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    while lines and lines[-1] == "":
        lines.pop()
    if len(lines) % 6:
        raise ValueError(f"{path}: {len(lines)} lines, not a multiple of 6")
    rows = []
    for k in range(0, len(lines), 6):
        label = int(lines[k + 1])
        if not 0 <= label <= 3:
            raise ValueError(f"{path}:{k + 2}: gold label {label} is not 0-3")
        rows.append({"query": hellaswag_clean(lines[k]),
                     "choices": [hellaswag_clean(e) for e in lines[k + 2:k + 6]],
                     "label": label})
    return rows


def piqa_rows(jsonl: Path, labels: Path) -> list[dict]:
    rows = read_jsonl(jsonl)
    with open(labels, encoding="utf-8") as f:
        gold = [int(x) for x in f.read().split()]
    if len(gold) != len(rows):
        raise ValueError(f"{labels}: {len(gold)} labels for {len(rows)} rows of {jsonl}")
    return [{"goal": r["goal"], "sol1": r["sol1"], "sol2": r["sol2"], "label": g}
            for r, g in zip(rows, gold)]


def boolq_rows(path: Path) -> list[dict]:
    out = []
    for r in read_jsonl(path):
        label = r["label"] if "label" in r else int(bool(r["answer"]))
        out.append({"question": r["question"], "passage": r["passage"], "label": int(label)})
    return out


def winogrande_rows(path: Path) -> list[dict]:
    """Partial evaluation as lm-eval's winogrande: contexts end where '_' stood."""
    out = []
    for r in read_jsonl(path):
        s = r["sentence"]
        cut = s.index("_")
        out.append({"contexts": [s[:cut] + r["option1"], s[:cut] + r["option2"]],
                    "continuation": s[cut + 1:].strip(),
                    "label": {"1": 0, "2": 1}[str(r["answer"])]})
    return out


# The split lm-eval 0.4.9 scores for each task, its full size, and the files under
# --eval-data that may hold it (glob patterns, in the formats the readers above take).
SPLITS = {
    "arc_easy": [("test", 2376, ["arc/ARC-Easy-Test*.jsonl"]),
                 ("validation", 570, ["arc/ARC-Easy-Dev*.jsonl", "arc/ARC-Easy-validation*.jsonl"])],
    "arc_challenge": [("test", 1172, ["arc/ARC-Challenge-Test*.jsonl"])],
    "boolq": [("validation", 3270, ["boolq/*validation*.jsonl", "boolq/dev*.jsonl"])],
    "piqa": [("validation", 1838, ["piqa/valid.*jsonl"])],
    "hellaswag": [("validation", 10042, ["hellaswag/*val*.jsonl", "hellaswag/*val*.txt"])],
    "winogrande": [("validation", 1267, ["winogrande/*validation*.jsonl", "winogrande/dev*.jsonl"])],
}
OFFICIAL_SPLIT = {task: options[0][0] for task, options in SPLITS.items()}


def read_task(task: str, path: Path) -> list[dict]:
    if task in ("arc_easy", "arc_challenge"):
        return arc_rows(path)
    if task == "piqa":  # valid[.rows...].jsonl + valid-labels[.rows...].lst
        labels = path.with_name(path.name.replace("valid", "valid-labels", 1)).with_suffix(".lst")
        if not labels.is_file():
            raise FileNotFoundError(f"{path}: its labels {labels.name} are not beside it")
        return piqa_rows(path, labels)
    return {"boolq": boolq_rows, "hellaswag": hellaswag_rows,
            "winogrande": winogrande_rows}[task](path)


@dataclass
class TaskData:
    path: Path          # the converted JSON-lines file lm-eval reads
    source: Path        # the file it came from
    split: str          # the split that file holds
    split_size: int     # that split's full size
    rows: int           # rows in the file

    @property
    def official(self) -> bool:
        """The split lm-eval scores for this task."""
        return self.split == OFFICIAL_SPLIT[self.path.stem]


def prepare_tasks(src: Path, dst: Path) -> dict[str, TaskData]:
    """Writes <dst>/<task>.jsonl for the six tasks: for each, lm-eval's own split if a
    file of it is under src, the one with the most rows (a full split over a slice)."""
    src, dst = Path(src), Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    out = {}
    for task, options in SPLITS.items():
        for split, size, patterns in options:
            files = sorted({f for p in patterns for f in src.glob(p) if not f.name.endswith(".lst")})
            if not files:
                continue
            candidates = [(read_task(task, f), f) for f in files]
            rows, source = max(candidates, key=lambda c: len(c[0]))
            path = dst / f"{task}.jsonl"
            write_jsonl(path, rows)
            out[task] = TaskData(path, source, split, size, len(rows))
            break
        else:
            wanted = ", ".join(p for _, _, ps in options for p in ps)
            raise FileNotFoundError(f"--eval-data {src}: no file for {task} (looked for {wanted})")
    return out


def prepare_data(src: Path, dst: Path) -> dict[str, Path]:
    """prepare_tasks, returning only the converted files."""
    return {task: t.path for task, t in prepare_tasks(src, dst).items()}


def render_tasks(data_dir: Path, dst: Path) -> Path:
    """Copies the task YAMLs to dst with the data directory filled in."""
    dst.mkdir(parents=True, exist_ok=True)
    for yaml in sorted(TASK_DIR.glob("*.yaml")):
        text = yaml.read_text(encoding="utf-8").replace(DATA_PLACEHOLDER, str(Path(data_dir).resolve()))
        (dst / yaml.name).write_text(text, encoding="utf-8")
    return dst


# ---------------------------------------------------------------------------
# Running lm-eval
# ---------------------------------------------------------------------------

def offline_environment() -> None:
    for key in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        os.environ[key] = "1"


def summarize(results: dict, limit: int | None, data: dict[str, TaskData] | None = None) -> dict:
    """The output JSON from lm-eval's results dict (and what each task was scored on)."""
    out = {"tasks": {}, "limit": limit}
    primaries = []
    for name, spec in TASKS.items():
        r = results[spec["task"]]
        entry = {"metric": spec["metric"], "column": spec["column"]}
        if data:
            d = data[name]
            scored = min(limit, d.rows) if limit else d.rows
            entry.update({"split": d.split, "official_split": d.official, "source": d.source.name,
                          "examples": scored, "split_size": d.split_size,
                          "complete": scored == d.split_size})
        for m in ("acc", "acc_norm"):
            if f"{m},none" in r:
                entry[m] = float(r[f"{m},none"])
                if f"{m}_stderr,none" in r and isinstance(r[f"{m}_stderr,none"], (int, float)):
                    entry[f"{m}_stderr"] = float(r[f"{m}_stderr,none"])
        entry["value"] = entry[spec["metric"]]
        primaries.append(entry["value"])
        out["tasks"][name] = entry
    out["average"] = sum(primaries) / len(primaries)
    return out


def affine_bias_n(model: str):
    """The N an affine export divides its bias by: "i + 1" (`visible`), the fixed training
    length (an int), "keys" (the keys of each call), or None for a model without the
    affine term (docs/model.md, "The affine divisor at inference")."""
    try:
        config = json.loads((Path(model) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    from kdtrain_hf.variants import (AFFINE_BIAS_DIVISOR_BEFORE_KEY, AFFINE_INFERENCE_NS, FEATURES,
                                     affine_fixed_n)
    feats = FEATURES.get(config.get("attention_variant", "baseline"))
    if not (feats and feats.affine):
        return None
    divisor = config.get("affine_bias_divisor", AFFINE_BIAS_DIVISOR_BEFORE_KEY)
    if divisor != "sequence":
        return "i + 1"
    fixed = affine_fixed_n(divisor, config.get("affine_inference_n", AFFINE_INFERENCE_NS[0]),
                           config.get("affine_train_length"))
    return fixed if fixed is not None else "keys"


def padding_changes_scores(model: str) -> bool:
    """True for an affine model whose N is the keys of each call: lm-eval right-pads a batch
    without an attention mask, so the pad keys would count in N and change the real tokens'
    scores. Such a model is scored one request at a time. With N fixed (the training length)
    or N_i = i + 1 a row depends only on its prefix and batches score as single requests."""
    return affine_bias_n(model) == "keys"


# On the CPU a batch's logits, B x T x V in fp32 with their log-softmax copies, cost more than
# batching saves once the vocabulary is large: measured (docs/evaluation.md, "Batch size"),
# batch 8 scored 1.15-1.25x faster than batch 1 at V 256 and 0.6-0.75x as fast at V 128,256.
CPU_BATCHING_MAX_VOCAB = 32768


def default_batch_size(model: str, device: str) -> int:
    """8, or 1 on the CPU for a model whose vocabulary exceeds CPU_BATCHING_MAX_VOCAB."""
    if device.startswith("cuda"):
        return 8
    try:
        vocab = json.loads((Path(model) / "config.json").read_text(encoding="utf-8")).get("vocab_size", 0)
    except (OSError, ValueError):
        vocab = 0
    return 1 if vocab > CPU_BATCHING_MAX_VOCAB else 8


def run(model: str, out: Path, limit: int | None = None, eval_data: Path = DEFAULT_EVAL_DATA,
        batch_size: int = 8, device: str = "cpu", dtype: str = "float32",
        samples: Path | None = None, work_dir: Path | None = None) -> dict:
    offline_environment()
    import lm_eval  # imported late: the offline variables must be set first
    from lm_eval.tasks import TaskManager

    unpadded = padding_changes_scores(model)
    if unpadded and batch_size != 1:
        print(f"[zero-shot] {model}: affine with N = the keys of each call: batch size 1 (padding "
              "would change N and so the scores)", file=sys.stderr)
        batch_size = 1
    start = time.monotonic()
    cleanup = work_dir is None
    work = Path(work_dir) if work_dir else Path(tempfile.mkdtemp(prefix="kdtrain_zero_shot_"))
    try:
        data_dir = work / "data"
        data = prepare_tasks(Path(eval_data), data_dir)
        tasks_dir = render_tasks(data_dir, work / "tasks")
        manager = TaskManager(include_path=str(tasks_dir), include_defaults=False)
        model_args = f"pretrained={model},trust_remote_code=True,dtype={dtype},device={device}"
        results = lm_eval.simple_evaluate(
            model="hf", model_args=model_args, tasks=[t["task"] for t in TASKS.values()],
            num_fewshot=0, batch_size=batch_size, limit=limit, task_manager=manager,
            log_samples=samples is not None, random_seed=0, numpy_random_seed=0,
            torch_random_seed=0, fewshot_random_seed=0)
    finally:
        if cleanup:
            shutil.rmtree(work, ignore_errors=True)

    summary = summarize(results["results"], limit, data)
    summary["model"] = str(model)
    summary["lm_eval_version"] = getattr(lm_eval, "__version__", LM_EVAL_VERSION)
    summary["eval_data"] = str(Path(eval_data).resolve())
    summary["batch_size"] = batch_size
    summary["affine_bias_n"] = affine_bias_n(model)
    summary["seconds"] = round(time.monotonic() - start, 1)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(out.suffix + ".tmp")
    tmp.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, out)
    if samples is not None:
        per_item = {}
        for name, spec in TASKS.items():
            per_item[name] = [
                {"doc_id": s["doc_id"], "target": s["target"],
                 "loglikelihoods": [float(r[0]) for r in s["filtered_resps"]]}
                for s in sorted(results["samples"][spec["task"]], key=lambda s: s["doc_id"])]
        Path(samples).write_text(json.dumps(per_item) + "\n", encoding="utf-8")
    return summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, nargs="+", help="Hugging Face model directory (or several)")
    p.add_argument("--out", required=True, nargs="+", type=Path,
                   help="output JSON (e.g. ROW/zero_shot.json), one per --model")
    p.add_argument("--limit", type=int, default=None, help="first N items of each task (testing)")
    p.add_argument("--eval-data", type=Path, default=DEFAULT_EVAL_DATA,
                   help=f"evaluation slices (default {DEFAULT_EVAL_DATA})")
    p.add_argument("--batch-size", type=int, default=None,
                   help="requests per forward (default 8; 1 on the CPU for a vocabulary over "
                        f"{CPU_BATCHING_MAX_VOCAB}, where batching is slower)")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:0, ...")
    p.add_argument("--dtype", default=None,
                   help="float32 or bfloat16 (default: bfloat16 on CUDA, float32 on the CPU)")
    p.add_argument("--samples", type=Path, default=None,
                   help="also write every item's per-choice log-likelihoods here")
    p.add_argument("--work-dir", type=Path, default=None,
                   help="keep the converted data and rendered task YAMLs here")
    a = p.parse_args(argv)
    if len(a.model) != len(a.out):
        p.error(f"{len(a.model)} --model directories but {len(a.out)} --out files: one output per model")
    if a.batch_size is not None and a.batch_size < 1:
        p.error(f"--batch-size {a.batch_size}: must be at least 1")
    if len(a.model) > 1 and (a.samples or a.work_dir):
        p.error("--samples and --work-dir take one --model")
    a.dtype = a.dtype or ("bfloat16" if a.device.startswith("cuda") else "float32")
    for model in a.model:
        if not Path(model, "config.json").exists():
            p.error(f"--model {model}: no config.json (a Hugging Face model directory is expected)")
    for model, out in zip(a.model, a.out):
        batch_size = a.batch_size or default_batch_size(model, a.device)
        summary = run(model, out, a.limit, a.eval_data, batch_size, a.device, a.dtype,
                      a.samples, a.work_dir)
        print(f"{model}:")
        for name, e in summary["tasks"].items():
            print(f"{e['column']:>6} {e['metric']:<8} {100 * e['value']:6.2f}   "
                  f"{e['split']} {e['examples']}/{e['split_size']} ({e['source']})")
        print(f"{'Avg.':>6} {'':<8} {100 * summary['average']:6.2f}   -> {out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
