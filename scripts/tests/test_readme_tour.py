"""README.md's tour runs as written: the ```bash block under "## A
tour" is extracted and run top to bottom with bash -e in a scratch directory
that holds only what a fresh clone has after setup (build/, configs/, scripts/,
as links) and the one file the reader supplies, some.txt. Then what the tour
promises is checked in its output: validation on the console, the summary, a
finished run that says how to extend it, defaults that fit the tiny model."""
import csv
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
from repo_paths import BUILD  # noqa: E402
SHARED_TEXT = REPO.parent / "shared" / "data" / "text" / "fineweb_edu_sample10BT.rows000-099.csv"
LICENSES = Path("/usr/share/common-licenses")


def tour_block() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## A tour\n", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```bash\n(.*?)```", section, re.S)
    assert match, "README.md: no ```bash block under '## A tour'"
    return match.group(1)


def some_text() -> str:
    """About 60 kB of real prose: the FineWeb-Edu sample when ../shared is there,
    else the licence texts every Debian system ships."""
    if SHARED_TEXT.is_file():
        with open(SHARED_TEXT, newline="", encoding="utf-8") as f:
            docs = [row["text"] for row in csv.DictReader(f)]
    else:
        docs = [p.read_text(errors="replace") for p in sorted(LICENSES.glob("*")) if p.is_file()]
    return "\n\n".join(docs)[:60_000]


def test_tour_has_no_placeholder():
    block = tour_block()
    assert "..." not in block and "<" not in block, "the tour must run as written"
    assert "some.txt" in block


@pytest.mark.skipif(not (BUILD / "kdtrain").exists(), reason="kdtrain is not built")
def test_readme_tour_runs_as_written(tmp_path):
    for name, target in (("build", BUILD), ("configs", REPO / "configs"), ("scripts", REPO / "scripts")):
        (tmp_path / name).symlink_to(target)
    (tmp_path / "some.txt").write_text(some_text(), encoding="utf-8")
    script = tmp_path / "tour.sh"
    script.write_text("set -euo pipefail\nset -x\n" + tour_block())
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "2"))
    r = subprocess.run(["bash", str(script)], cwd=tmp_path, capture_output=True, text=True,
                       timeout=1200, env=env)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-6000:]

    # Validation loss reaches the console, and every run ends with a summary.
    assert re.search(r"step 50/100 \| val loss \d+\.\d+ \(ce\)", out), out[-3000:]
    assert "run finished at step 100/100: 100 steps" in out
    assert re.search(r"final val loss +\d+\.\d+ \(ce\) at step 100", out)
    assert "checkpoint: demo/run/checkpoints/step_00000100" in out
    # The finished run, resumed, says so and how to extend it; the extension runs.
    assert "demo/run is finished: its checkpoint is at step 100 and train.steps is 100" in out
    assert "kdtrain train --resume demo/run --set train.steps=N (N > 100)" in out
    assert "run finished at step 120/120: 20 steps" in out
    config = json.loads((tmp_path / "demo/run/config.json").read_text())
    assert config["train"]["steps"] == 120  # the run directory records the extension
    # eval and analyze take the checkpoint's training length; export takes the run directory.
    assert "--seq-len 64: the length the checkpoint trained at" in out
    assert "exporting demo/run/checkpoints/step_00000120 (the run's latest checkpoint)" in out
    hf = json.loads((tmp_path / "demo/hf/config.json").read_text())
    assert hf["architectures"] == ["KdtrainForCausalLM"]
    assert (tmp_path / "demo/analysis/analysis.json").is_file()
    assert (tmp_path / "dump.safetensors").is_file()
    assert (tmp_path / "report/table1.md").is_file()
    assert list((tmp_path / "demo/tensorboard").glob("events.out.tfevents.*"))
    # Only train wrote inside the run directory: the derived results lie beside it.
    assert {p.name for p in (tmp_path / "demo/run").iterdir()} <= {"config.json", "metrics.jsonl", "checkpoints",
                                                                 "kdtrain.lock"}
