"""How stock transformers meets kdtrain's directories:

- a non-baseline checkpoint or export names KdtrainForCausalLM (model_type
  "kdtrain"), so AutoModelForCausalLM refuses it without trust_remote_code
  instead of loading it as plain LLaMA minus its sinks; with trust_remote_code
  it loads from the files beside it, every tensor in place;
- loading an export with a real 128k-vocabulary tokenizer prints no "incorrect
  regex pattern" warning (transformers 4.57.3 gives it when config.json lacks
  transformers_version; the control below shows the check would see it);
- a run directory exports its latest checkpoint."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
safetensors_numpy = pytest.importorskip("safetensors.numpy")

os.environ.setdefault("HF_HUB_OFFLINE", "1")
from repo_paths import KDTRAIN, SHARED  # noqa: E402
LLAMA3 = str(SHARED / "tokenizers" / "llama3")

pytestmark = pytest.mark.skipif(not os.access(KDTRAIN, os.X_OK), reason="kdtrain is not built")


def run(*args):
    r = subprocess.run([KDTRAIN, *args], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout + r.stderr


@pytest.mark.parametrize("variant", ["sink", "affine", "gated"])
def test_a_variant_checkpoint_is_refused_without_trust_remote_code(tmp_path, variant):
    ckpt = str(tmp_path / "ckpt")
    run("init", "--preset", "tiny-llama", "--attention", variant, "--out", ckpt)
    config = json.load(open(os.path.join(ckpt, "config.json")))
    assert config["architectures"] == ["KdtrainForCausalLM"]
    assert config["model_type"] == "kdtrain" and config["base_model_type"] == "llama"
    with pytest.raises(ValueError, match="trust_remote_code"):
        transformers.AutoModelForCausalLM.from_pretrained(ckpt)
    model = transformers.AutoModelForCausalLM.from_pretrained(ckpt, trust_remote_code=True).eval()
    assert type(model).__name__ == "KdtrainForCausalLM"
    # Every stored tensor is a tensor of the model, equal to the file's: nothing dropped.
    stored = safetensors_numpy.load_file(os.path.join(ckpt, "model.safetensors"))
    state = model.state_dict()
    for name, value in stored.items():
        assert name in state, name
        assert np.array_equal(state[name].numpy(), value), name
    extra = {"sink": ".self_attn.sinks", "affine": ".self_attn.alpha_proj.weight", "gated": ".self_attn.gate_proj.weight"}
    assert any(name.endswith(extra[variant]) for name in stored)


def test_a_baseline_checkpoint_stays_a_stock_llama(tmp_path):
    ckpt = str(tmp_path / "ckpt")
    run("init", "--preset", "tiny-llama", "--out", ckpt)
    config = json.load(open(os.path.join(ckpt, "config.json")))
    assert config["architectures"] == ["LlamaForCausalLM"] and "auto_map" not in config
    model = transformers.AutoModelForCausalLM.from_pretrained(ckpt)
    assert isinstance(model, transformers.LlamaForCausalLM)
    assert not os.path.exists(os.path.join(ckpt, "modeling_kdtrain.py"))


LOAD = """
import sys, transformers
transformers.logging.set_verbosity_warning()
tok = transformers.AutoTokenizer.from_pretrained(sys.argv[1])
model = transformers.AutoModelForCausalLM.from_pretrained(sys.argv[1], trust_remote_code=True)
print("ids", tok("Hello world")["input_ids"])
"""


@pytest.mark.skipif(not os.path.isdir(LLAMA3), reason="shared/data/tokenizers/llama3 absent")
@pytest.mark.parametrize("variant", ["baseline", "affine"])
def test_loading_an_export_prints_no_tokenizer_regex_warning(tmp_path, variant):
    ckpt, hf = str(tmp_path / "ckpt"), str(tmp_path / "hf")
    run("init", "--preset", "tiny-llama3", "--attention", variant, "--out", ckpt)
    run("export", "--checkpoint", ckpt, "--out", hf, "--tokenizer", LLAMA3)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    r = subprocess.run([sys.executable, "-c", LOAD, hf], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert "ids [128000, 9906, 1917]" in r.stdout
    assert "incorrect regex pattern" not in r.stderr, r.stderr
    # Control: the same export without transformers_version draws the warning, so the
    # check above is able to fail.
    bare = str(tmp_path / "bare")
    shutil.copytree(hf, bare)
    config = json.load(open(os.path.join(bare, "config.json")))
    del config["transformers_version"]
    json.dump(config, open(os.path.join(bare, "config.json"), "w"))
    r = subprocess.run([sys.executable, "-c", LOAD, bare], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    if transformers.__version__ == "4.57.3":  # the release with the check (requirements.txt pins it)
        assert "incorrect regex pattern" in r.stderr


def test_export_takes_a_run_directory(tmp_path):
    ckpt = str(tmp_path / "ckpt")
    run("init", "--preset", "tiny-llama", "--attention", "sink", "--out", ckpt)
    # A run directory: checkpoints/<name> and checkpoints/latest naming it.
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    shutil.copytree(ckpt, run_dir / "checkpoints" / "step_00000007")
    (run_dir / "checkpoints" / "latest").write_text("step_00000007\n")
    out = run("export", "--checkpoint", str(run_dir), "--out", str(tmp_path / "hf"))
    assert "exporting " + str(run_dir / "checkpoints" / "step_00000007") in out
    assert json.load(open(tmp_path / "hf" / "config.json"))["attention_variant"] == "sink"
    r = subprocess.run([KDTRAIN, "export", "--checkpoint", str(tmp_path / "nope"), "--out", str(tmp_path / "o")],
                       capture_output=True, text=True)
    assert r.returncode == 1 and f"no such file or directory: {tmp_path / 'nope'}" in r.stderr
