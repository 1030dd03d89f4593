"""Which keys of a run's metrics.jsonl measure the machine (timings, memory) rather than the
run's arithmetic. Checks that two runs computed the same bits leave them out
(scripts/same_runs.sh, scripts/gpu/gpu_check_nccl.sh): the trainer logs a key's cost as
KEY_seconds (docs/evaluation.md), so that suffix is a timing wherever it appears."""
import json

MACHINE_KEYS = frozenset({"tokens_per_s", "step_time_s", "peak_memory_bytes"})


def is_machine_key(key):
    return key in MACHINE_KEYS or key.endswith("_seconds")


def arithmetic_rows(metrics_path):
    """The rows of a metrics.jsonl file without the machine's keys."""
    with open(metrics_path) as f:
        return [{k: v for k, v in json.loads(line).items() if not is_machine_key(k)} for line in f if line.strip()]
