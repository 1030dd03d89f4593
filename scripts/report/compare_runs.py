#!/usr/bin/env python3
"""Prints one row per run directory (or study row, scripts/report/study_layout.py):
variant, delta params, final train loss, KD, CE, validation loss and mean
throughput, from metrics.jsonl and `kdtrain info`."""
import argparse
import json
import pathlib
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from study_layout import Row  # noqa: E402


def last_metrics(run_dir):
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line]
    val = [r for r in rows if "val_loss" in r]
    tail = rows[-10:]
    return {
        "loss": rows[-1]["loss"], "kd": rows[-1]["kd"], "ce": rows[-1]["ce"],
        "val_loss": val[-1]["val_loss"] if val else float("nan"),
        "tokens_per_s": sum(r["tokens_per_s"] for r in tail) / len(tail),
    }


def delta_params(kdtrain, run_dir):
    info = subprocess.run([kdtrain, "info", "--config", str(run_dir / "config.json"), "--json"],
                          check=True, capture_output=True, text=True)
    return json.loads(info.stdout)["delta_params"]


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("runs", nargs="+", type=pathlib.Path)
    parser.add_argument("--kdtrain", default="build/kdtrain")
    args = parser.parse_args()
    header = f"{'variant':<14}{'Δparams':>10}{'loss':>9}{'KD':>9}{'CE':>9}{'val loss':>10}{'tok/s':>10}"
    print(header)
    print("-" * len(header))
    for run in (Row(r).run for r in args.runs):
        config = json.loads((run / "config.json").read_text())
        m = last_metrics(run)
        print(f"{config['attention']['variant']:<14}{delta_params(args.kdtrain, run):>10,}"
              f"{m['loss']:>9.4f}{m['kd']:>9.4f}{m['ce']:>9.4f}{m['val_loss']:>10.4f}{m['tokens_per_s']:>10.0f}")


if __name__ == "__main__":
    main()
