"""The CLI helps a newcomer: `train --help` lists the config sections,
`kdtrain config --list` every key with its default and meaning, `kdtrain config
--dump` the resolved config of a command line without running it, and typos
name the nearest command or flag. Runs the built binary."""
import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
from repo_paths import KDTRAIN  # noqa: E402

pytestmark = pytest.mark.skipif(not KDTRAIN.exists(), reason="kdtrain is not built")


def kdtrain(*args, cwd=None):
    return subprocess.run([str(KDTRAIN), *map(str, args)], capture_output=True, text=True, cwd=cwd)


def test_train_help_lists_the_sections():
    r = kdtrain("train", "--help")
    assert r.returncode == 0
    for section in ("model", "attention", "kd", "optimizer", "schedule", "data", "train", "checkpoint",
                    "log", "eval", "dist"):
        assert f"\n  {section} " in r.stdout, section
    assert "kdtrain config --list" in r.stdout and "docs/config.md" in r.stdout


def test_config_list_gives_every_key_its_default_and_meaning():
    r = kdtrain("config", "--list")
    assert r.returncode == 0, r.stderr
    table = r.stdout.split("\n\n")[0].splitlines()  # the rows, before the closing notes
    assert table[0].split() == ["key", "default", "meaning"]
    rows = {line.split()[0]: line for line in table[1:]}
    dumped = json.loads(kdtrain("config", "--dump", "--preset", "tiny-llama").stdout)
    keys = {f"{s}.{k}" for s, sec in dumped.items() for k in sec if k != "rope_scaling"}
    keys |= {f"model.rope_scaling.{k}" for k in dumped["model"]["rope_scaling"]}
    assert set(rows) == keys
    assert rows["schedule.warmup"].split()[1] == "100"
    assert "peak learning rate" in rows["optimizer.lr"]


def test_config_dump_resolves_without_running(tmp_path):
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"model": {"preset": "tiny-llama"}, "optimizer": {"lr": 3e-4}}))
    r = kdtrain("config", "--dump", "--config", config, "--attention", "affine", "--set", "train.steps=20",
                cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    resolved = json.loads(r.stdout)  # stdout is only the JSON; notices go to stderr
    assert resolved["optimizer"]["lr"] == 3e-4
    assert resolved["attention"]["variant"] == "affine"
    assert resolved["model"]["hidden_size"] == 64
    assert resolved["schedule"]["warmup"] == 20 and "warmup clamped to 20 steps" in r.stderr
    assert os.listdir(tmp_path) == ["c.json"]  # nothing written
    r = kdtrain("config", "--dump", "--set", "optimizer.lr=abc")
    assert r.returncode == 1 and "optimizer.lr" in r.stderr
    r = kdtrain("config")
    assert r.returncode == 1 and "give --list or --dump" in r.stderr


def test_typos_name_the_nearest_command_and_flag():
    r = kdtrain("trian")
    assert r.returncode != 0 and "unknown command 'trian'; did you mean 'train'?" in r.stderr
    r = kdtrain("train", "--confg", "x.json")
    assert r.returncode != 0 and "did you mean '--config'?" in r.stderr
    r = kdtrain("config", "--lsit")
    assert r.returncode != 0 and "did you mean '--list'?" in r.stderr
    r = kdtrain("config", "--dump", "--preset", "llama3.2-1B")
    assert r.returncode != 0 and "did you mean 'llama3.2-1b'?" in r.stderr


def test_info_lists_the_presets_from_the_one_table():
    listed = json.loads(kdtrain("info", "--presets", "--json").stdout)
    assert [p["name"] for p in listed][:5] == ["qwen1.5-0.5b", "qwen1.5-1.8b", "llama3.2-1b", "llama3.2-3b",
                                               "llama3.1-8b"]
    by_name = {p["name"]: p for p in listed}
    assert by_name["llama3.2-1b"]["total_params"] == 1235814400  # as `kdtrain info --preset` counts it
    for p in listed:  # every listed name resolves
        assert kdtrain("config", "--dump", "--preset", p["name"]).returncode == 0, p["name"]


def test_missing_paths_say_so(tmp_path):
    missing = tmp_path / "nope"
    r = kdtrain("eval", "--checkpoint", missing, "--data", "x.bin")
    assert r.returncode == 1 and f"no such file or directory: {missing}" in r.stderr
    r = kdtrain("export", "--checkpoint", missing, "--out", tmp_path / "hf")
    assert r.returncode == 1 and f"no such file or directory: {missing}" in r.stderr
