"""One row of a study (a kdtrain run directory and the results beside it,
scripts/report/study_layout.py) as scripts/report/report.py reads it
(docs/evaluation.md, "Run directory layout"). Missing files leave fields None;
they are never an error.
"""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/, for kdtrain_hf
from kdtrain_hf.variants import AFFINE_BIAS_DIVISOR_BEFORE_KEY, ATTENTION_VARIANTS, VARIANT_ROWS, features  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from study_layout import Row  # noqa: E402

METHOD = {row.name: row.method for row in VARIANT_ROWS}
VARIANT_ORDER = list(ATTENTION_VARIANTS)
MODEL_LABEL = {"qwen1.5-0.5b": "0.5B", "llama3.2-1b": "1B", "llama3.2-3b": "3B"}
MODEL_ORDER = ["0.5B", "1B", "3B"]
ALPHA_LABEL = {"linear_clip": "linear clip", "sigmoid": "sigmoid"}
PAPER_ALPHA = "linear_clip"     # the paper's choice (§6): Tables 1 and 2 use it
PAPER_DIVISOR = "sequence"      # the paper's affine bias divisor (Eq. 8: the key sequence length)
LOGIT_KEY = "attn_logit_mean_abs"  # metrics.jsonl key of the per-step probe: 128 positions of one sequence
LOGIT_ALL_KEY = "attn_logit_mean_abs_all"  # Fig. 2's quantity: every position of a micro-batch, at eval steps
# The training loss on the paper's scale (docs/evaluation.md, "Loss"): the teacher
# soft cross-entropy KL + H(teacher) of a distilled run, the CE of a run without one.
SOFT_CE_KEY = "soft_ce"


def read_json(path: Path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def read_metrics(path: Path) -> list[dict]:
    """metrics.jsonl rows; a resumed run may repeat steps — the last record of a step wins."""
    if not path.exists():
        return []
    by_step: dict[int, dict] = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise SystemExit(f"{path}:{n}: not JSON ({e})")
            if "step" in row:
                by_step[int(row["step"])] = row
    return [by_step[s] for s in sorted(by_step)]


def delta_params_from_config(model: dict, variant: str) -> float | None:
    """ΔParams over the baseline in parameters, from the architecture (docs/model.md's variant table)."""
    try:
        L, C = model["num_hidden_layers"], model["hidden_size"]
        H, D = model["num_attention_heads"], model["head_dim"]
    except (KeyError, TypeError):
        return None
    f = features(variant)
    extra = L * H * f.sink          # sinks: one logit per head
    extra += L * C * H * f.affine   # W_alpha: d_model x H
    extra += L * C * H * D * f.gate  # W_g: d_model x H*D
    return float(extra)


def kdtrain_info(binary: str, config: Path) -> dict | None:
    try:
        out = subprocess.run([binary, "info", "--config", str(config), "--json"], check=True,
                             capture_output=True, text=True, timeout=60)
        return json.loads(out.stdout)
    except (OSError, subprocess.SubprocessError, json.JSONDecodeError) as e:
        print(f"report: kdtrain info on {config} failed ({e}); ΔParams from the config",
              file=sys.stderr)
        return None


class Run:
    def __init__(self, path: Path, kdtrain: str | None = None):
        row = Row(path)
        self.path = row.path
        self.name = row.name
        self.config = read_json(row.run / "config.json") or {}
        self.metrics = read_metrics(row.run / "metrics.jsonl")
        self.eval_c4 = read_json(row.result("eval_c4"))
        self.zero_shot = read_json(row.result("zero_shot"))
        self.analysis = read_json(row.analysis_json())
        self.info = read_json(row.result("info"))
        self.row = read_json(row.result("study_row")) or {}
        if self.info is None and kdtrain and (row.run / "config.json").exists():
            self.info = kdtrain_info(kdtrain, row.run / "config.json")
        model = self.config.get("model", {})
        attention = self.config.get("attention", {})
        self.variant = attention.get("variant") or (self.analysis or {}).get("attention") or "baseline"
        self.alpha = attention.get("alpha_activation", PAPER_ALPHA) if features(self.variant).affine else None
        # A run config without the key predates it: kdtrain divided by the visible keys then.
        self.divisor = (attention.get("affine_bias_divisor", AFFINE_BIAS_DIVISOR_BEFORE_KEY)
                        if features(self.variant).affine else None)
        preset = model.get("preset", "")
        self.model = self.row.get("size") or MODEL_LABEL.get(preset, preset or "custom")
        kd = self.config.get("kd", {})
        self.distilled = bool(kd.get("teacher") or kd.get("teacher_cache")) and kd.get("weight", 0) > 0

    # ---- labels
    def method(self, with_alpha: bool = False) -> str:
        """The paper's method name; the α activation is added when asked or when it is
        not the paper's, and the affine bias divisor when it is not the paper's, so two
        affine runs are always distinguishable."""
        label = METHOD.get(self.variant, self.variant)
        if self.alpha and (with_alpha or self.alpha != PAPER_ALPHA):
            label += f" (α: {ALPHA_LABEL.get(self.alpha, self.alpha)})"
        if self.divisor and self.divisor != PAPER_DIVISOR:
            label += f" (β/N: {self.divisor})"
        return label

    @property
    def limit(self) -> int | None:
        return (self.zero_shot or {}).get("limit")

    # ---- numbers
    def delta_params_m(self) -> float | None:
        if self.info and "delta_params" in self.info:
            return self.info["delta_params"] / 1e6
        d = delta_params_from_config(self.config.get("model", {}), self.variant)
        return None if d is None else d / 1e6

    def series(self, key: str) -> tuple[list[int], list[float]]:
        steps, values = [], []
        for row in self.metrics:
            v = row.get(key)
            if isinstance(v, (int, float)) and math.isfinite(v):
                steps.append(int(row["step"]))
                values.append(float(v))
        return steps, values

    def loss_key(self) -> str:
        """The metrics key on the paper's loss scale: soft_ce (distilled), else loss
        (the CE of a run without a teacher; for a distilled run that predates the
        soft_ce key, the KD loss — flagged by loss_on_paper_scale())."""
        return SOFT_CE_KEY if any(SOFT_CE_KEY in r for r in self.metrics) else "loss"

    def loss_on_paper_scale(self) -> bool:
        return self.loss_key() == SOFT_CE_KEY or not self.distilled

    def final(self, key: str, last: int) -> float | None:
        """Mean of the last `last` logged values of key."""
        _, values = self.series(key)
        if not values:
            return None
        tail = values[-last:]
        return sum(tail) / len(tail)

    def final_loss(self, last: int) -> float | None:
        return self.final(self.loss_key(), last)

    def last_step(self) -> int:
        return int(self.metrics[-1]["step"]) if self.metrics else 0

    def sort_key(self):
        model = MODEL_ORDER.index(self.model) if self.model in MODEL_ORDER else len(MODEL_ORDER)
        order = VARIANT_ORDER.index(self.variant) if self.variant in VARIANT_ORDER else len(VARIANT_ORDER)
        return (model, self.model, order, self.alpha != PAPER_ALPHA, self.divisor != PAPER_DIVISOR, self.name)
