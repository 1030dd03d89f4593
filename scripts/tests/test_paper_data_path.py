"""The data path of the paper configs: the prep commands documented in
docs/data.md, run on the shared FineWeb-Edu sample with the real Llama-3 and Qwen2
tokenizers, write exactly the shards configs/paper/*.json read, and each config
then starts training on them (with the tiny presets of the same vocabularies:
tiny-llama3, tiny-qwen2) with no data override. Skipped without ../shared/data."""
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DATA = Path(os.environ.get("KDTRAIN_SHARED_DATA", REPO.parent / "shared" / "data"))
FINEWEB = DATA / "text" / "fineweb_edu_sample10BT.rows000-099.csv"
LLAMA3 = DATA / "tokenizers" / "llama3"
QWEN2 = DATA / "tokenizers" / "qwen2"
from repo_paths import KDTRAIN  # noqa: E402

needs_data = pytest.mark.skipif(not (FINEWEB.is_file() and LLAMA3.is_dir() and QWEN2.is_dir()),
                                reason="../shared/data (FineWeb-Edu sample, tokenizers) absent")
needs_kdtrain = pytest.mark.skipif(not KDTRAIN.exists(), reason="kdtrain is not built")

# Paper config -> (the tokenizer its teacher uses, the tiny preset with that vocabulary).
PAPER = {
    "llama3.2-1b.json": (LLAMA3 / "tokenizer.json", "tiny-llama3"),
    "llama3.2-3b.json": (LLAMA3 / "tokenizer.json", "tiny-llama3"),
    "qwen1.5-0.5b.json": (QWEN2, "tiny-qwen2"),
}


def documented_prep_commands():
    """The commands of the block marked <!-- paper-data-prep --> in docs/data.md."""
    text = (REPO / "docs" / "data.md").read_text(encoding="utf-8")
    block = re.search(r"<!-- paper-data-prep -->\s*```bash\n(.*?)```", text, re.S)
    assert block, "docs/data.md: no ```bash block after <!-- paper-data-prep -->"
    joined = block.group(1).replace("\\\n", " ")
    return [shlex.split(line) for line in joined.splitlines() if line.strip()]


def kdtrain_info(preset):
    r = subprocess.run([str(KDTRAIN), "info", "--preset", preset, "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def vocab_size(info):
    return info["architecture"]["vocab_size"]


@needs_data
@needs_kdtrain
def test_tiny_presets_carry_the_real_vocabularies():
    tok = json.loads((LLAMA3 / "tokenizer.json").read_text())
    llama_ids = max(max(tok["model"]["vocab"].values()), max(t["id"] for t in tok["added_tokens"])) + 1
    assert vocab_size(kdtrain_info("tiny-llama3")) == llama_ids == 128256
    # Qwen's config.json pads the tokenizer's 151,646 ids to 151,936 rows.
    qwen_config = json.loads((QWEN2 / "config.json").read_text())
    assert vocab_size(kdtrain_info("tiny-qwen2")) == qwen_config["vocab_size"] == 151936
    for preset, paper in (("tiny-llama3", "llama3.2-1b"), ("tiny-qwen2", "qwen1.5-0.5b")):
        assert vocab_size(kdtrain_info(preset)) == vocab_size(kdtrain_info(paper))


@needs_data
@needs_kdtrain
def test_documented_prep_writes_what_the_paper_configs_read(tmp_path):
    commands = documented_prep_commands()
    assert len(commands) == 2
    outputs = {}
    for argv in commands:
        assert argv[:2] == ["python3", "scripts/data/prepare_fineweb_edu.py"], argv
        args = argv[2:]
        tokenizer = args[args.index("--tokenizer") + 1]
        real = LLAMA3 / "tokenizer.json" if tokenizer.endswith("tokenizer.json") else QWEN2
        args[args.index("--tokenizer") + 1] = str(real)
        args[args.index("--input") + 1] = str(FINEWEB)
        # The sample holds ~100k tokens; the default --val-tokens (10M) would be refused.
        args += ["--val-tokens", "20000", "--quiet"]
        r = subprocess.run([sys.executable, str(REPO / "scripts" / "data" / "prepare_fineweb_edu.py"), *args],
                           cwd=tmp_path, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        outputs[args[args.index("--out") + 1]] = real

    for config_name, (tokenizer, preset) in PAPER.items():
        config = json.loads((REPO / "configs" / "paper" / config_name).read_text())
        # The configs' globs match the files the commands wrote, in the directories they wrote.
        for split in ("train", "val"):
            pattern = config["data"][split]
            found = sorted(tmp_path.glob(pattern))
            assert found, f"{config_name}: data.{split} '{pattern}' matches nothing the prep wrote"
            assert outputs[os.path.dirname(pattern)] == tokenizer
        run = tmp_path / "runs" / config_name
        r = subprocess.run(
            [str(KDTRAIN), "train", "--config", str(REPO / "configs" / "paper" / config_name),
             "--preset", preset, "--run-dir", str(run), "--set", "kd.teacher=", "--set", "train.device=cpu",
             "--set", "train.steps=1", "--set", "train.seq_len=32", "--set", "train.global_batch=2",
             "--set", "train.micro_batch=2", "--set", "eval.batches=1"],
            cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        assert "run finished at step 1/1" in r.stdout + r.stderr
        assert "final val loss" in r.stdout + r.stderr
