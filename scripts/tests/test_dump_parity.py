"""`kdtrain dump` (fp32 CPU backend) against the float64 reference model.

For tiny-llama and tiny-qwen x every attention variant (affine and affine-gated with
both alpha activations; affine under both bias divisors at two sequence lengths,
and a checkpoint without the divisor key, read as `visible` by both sides):
`kdtrain init` a checkpoint, re-draw its weights, run
`kdtrain dump --grads` and scripts/peers/reference_model.py on the same shard, and compare
logits, loss and every parameter gradient.

Why the weights are re-drawn: a fresh checkpoint has alpha_ma = 0 (so the affine
bias term beta*prefix-sum(V) would only see -alpha/N), and 0.02-scale matrices give
near-uniform attention that can hide RoPE or mask mistakes. We write random alpha_ma
in (0.2, 0.9), N(0,1) sinks and biases, norms around 1 and N(0, 1/in_features)
matrices (embedding too, so logits stay O(1) and the softmax is not saturated).

Tolerances (kdtrain computes in fp32, the reference in float64), per tensor:
    max |kdtrain - reference| <= 1e-4 * max |reference|     (logits, every gradient)
    |loss_kdtrain - loss_reference| <= 1e-5 * max(1, loss_reference)

Skips, naming the reason, while `build/kdtrain` lacks working `init` / `dump`
subcommands (set KDTRAIN_BUILD_DIR to test another build directory).
"""
import json
import math
import os
import subprocess
import zlib
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import reference_model as ref  # noqa: E402
from kdtrain_hf.variants import VARIANT_CASES, features  # noqa: E402

from safetensors import safe_open  # noqa: E402
from safetensors.numpy import load_file, save_file  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
from repo_paths import KDTRAIN  # noqa: E402

B, T = 2, 13
REL_TOL = 1e-4
LOSS_TOL = 1e-5
TEXT = (b"Affine-scaled attention relaxes the softmax constraint: each query's weights "
        b"need not sum to one, and a running mean keeps the total mass stable.")

# Every variant, the affine ones under each alpha activation (None: the variant has no alpha).
CASES = [(v, a if features(v).affine else None) for v, a in VARIANT_CASES]
PRESETS = ["tiny-llama", "tiny-qwen"]


def _help_text(*subcommand):
    try:
        proc = subprocess.run([str(KDTRAIN), *subcommand, "--help"], capture_output=True,
                              text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, str(exc)
    return (proc.stdout + proc.stderr if proc.returncode == 0 else None), proc.stderr.strip()


def _skip_reason():
    """Why the parity test cannot run yet, or None. `--help` alone is not enough: a stub
    subcommand has help too, so the options the test needs must be listed."""
    if not KDTRAIN.exists():
        return f"{KDTRAIN} not built"
    needs = {"init": ["--preset", "--attention", "--seed", "--out", "--set"],
             "dump": ["--checkpoint", "--data", "--batch-size", "--seq-len", "--out", "--grads"]}
    for sub, options in needs.items():
        text, err = _help_text(sub)
        if text is None:
            return f"`kdtrain {sub} --help` fails ({err[:200]})"
        missing = [o for o in options if o not in text]
        if missing:
            return f"`kdtrain {sub}` is not implemented yet (no {', '.join(missing)} in its --help)"
    return None


SKIP_REASON = _skip_reason()
pytestmark = pytest.mark.skipif(SKIP_REASON is not None, reason=f"dump parity: {SKIP_REASON}")


def _run(args, what):
    proc = subprocess.run([str(KDTRAIN), *args], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        pytest.fail(f"{what} failed (rc {proc.returncode}): kdtrain {' '.join(args)}\n"
                    f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}")


def _redraw_weights(ckpt: Path, seed: int):
    """Rewrites model.safetensors in place (atomically) with the random values described
    in the module docstring, keeping names, shapes, dtypes and header metadata."""
    path = ckpt / "model.safetensors"
    with safe_open(str(path), framework="numpy") as f:
        metadata = f.metadata()
    tensors = load_file(str(path))
    rng = np.random.default_rng(seed)
    for name, t in tensors.items():
        shape = t.shape
        if name.endswith("alpha_ma"):
            new = rng.uniform(0.2, 0.9, shape)
        elif name.endswith("sinks") or name.endswith(".bias"):
            new = rng.standard_normal(shape)
        elif name.endswith("norm.weight") or name.endswith("layernorm.weight"):
            new = 1.0 + 0.1 * rng.standard_normal(shape)
        elif t.ndim == 2:  # embedding included: a tied head then gives O(1) logits
            new = rng.standard_normal(shape) / math.sqrt(shape[1])
            if name.endswith("alpha_proj.weight"):
                new *= 3.0  # alpha spread over the activation's range
        else:
            raise AssertionError(f"unexpected tensor {name} {shape} in {path}")
        tensors[name] = new.astype(t.dtype)
    tmp = ckpt / ".model.safetensors.tmp"
    save_file(tensors, str(tmp), metadata=metadata)
    os.replace(tmp, path)
    _record_checksum(ckpt, "model.safetensors")


def _record_checksum(ckpt, name):
    """The checkpoint lists every file's size and xxh64 (docs/reliability.md); a file
    rewritten here gets its entry rewritten too, or kdtrain refuses it as corrupt."""
    import json
    import xxhash
    listing = ckpt / "checksums.json"
    if not listing.exists():
        return
    doc = json.loads(listing.read_text())
    data = (ckpt / name).read_bytes()
    doc["files"][name] = {"bytes": len(data), "xxh64": xxhash.xxh64(data).hexdigest()}
    listing.write_text(json.dumps(doc))


def _compare(name, got, want, rel_tol):
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, f"{name}: shape {got.shape} vs reference {want.shape}"
    assert np.all(np.isfinite(got)), f"{name}: kdtrain output has NaN/inf"
    scale = float(np.abs(want).max()) if want.size else 0.0
    err = float(np.abs(got - want).max()) if want.size else 0.0
    assert err <= rel_tol * max(scale, 1e-8), (
        f"{name}: max abs error {err:.3e} > {rel_tol:g} x scale {scale:.3e}")
    return err / max(scale, 1e-30)


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("variant,activation", CASES)
def test_dump_matches_reference(preset, variant, activation, tmp_path):
    check_dump(preset, variant, activation, None, T, tmp_path)


# Both readings of the affine bias divisor, at two sequence lengths (N = T differs
# from i + 1 on every row but the last); "absent": a config.json from before the key.
@pytest.mark.parametrize("divisor", ["sequence", "visible", "absent"])
@pytest.mark.parametrize("seq_len", [5, T])
@pytest.mark.parametrize("variant", ["affine", "affine-gated"])
def test_dump_matches_reference_under_each_divisor(variant, seq_len, divisor, tmp_path):
    check_dump("tiny-llama", variant, "linear_clip", divisor, seq_len, tmp_path)


def check_dump(preset, variant, activation, divisor, seq_len, tmp_path):
    ckpt = tmp_path / "ckpt"
    init_args = ["init", "--preset", preset, "--attention", variant, "--seed", "1234",
                 "--out", str(ckpt)]
    if activation == "sigmoid":
        init_args += ["--set", "attention.alpha_activation=sigmoid"]
    if divisor in ("sequence", "visible"):
        init_args += ["--set", f"attention.affine_bias_divisor={divisor}"]
    _run(init_args, "kdtrain init")

    config = json.loads((ckpt / "config.json").read_text())
    assert config.get("attention_variant") == variant, "config.json must record attention_variant"
    if activation is not None:
        assert config.get("alpha_activation") == activation, "config.json must record alpha_activation"
    assert config.get("affine_bias_divisor") == divisor or divisor in (None, "absent")
    if divisor == "absent":
        del config["affine_bias_divisor"]
        (ckpt / "config.json").write_text(json.dumps(config, indent=2))
        _record_checksum(ckpt, "config.json")
        assert ref.load_checkpoint(str(ckpt))[0].affine_bias_divisor == "visible"
    _redraw_weights(ckpt, seed=zlib.crc32(f"{preset}/{variant}/{activation}".encode()))
    T = seq_len

    shard = tmp_path / "data.bin"
    ref.write_shard(str(shard), np.frombuffer(TEXT, dtype=np.uint8), version=1)
    dumped = tmp_path / "kdtrain.safetensors"
    _run(["dump", "--checkpoint", str(ckpt), "--data", str(shard), "--batch-size", str(B),
          "--seq-len", str(T), "--out", str(dumped), "--grads"], "kdtrain dump")
    got = load_file(str(dumped))

    cfg, params = ref.load_checkpoint(str(ckpt))
    inputs, targets = ref.batch_from_tokens(ref.read_shard(str(shard)), B, T, cfg.vocab_size)
    logits, loss, grads = ref.loss_and_grads(cfg, params, inputs, targets)

    logits_err = _compare("logits", got["logits"], logits.numpy(), REL_TOL)
    got_loss = float(np.asarray(got["loss"], dtype=np.float64).reshape(-1)[0])
    assert abs(got_loss - loss.item()) <= LOSS_TOL * max(1.0, abs(loss.item())), (
        f"loss {got_loss} vs reference {loss.item()}")

    got_grads = {k[len("grad."):] for k in got if k.startswith("grad.")}
    assert got_grads == set(grads), (
        f"gradient names differ: only kdtrain {sorted(got_grads - set(grads))[:5]}, "
        f"only reference {sorted(set(grads) - got_grads)[:5]}")
    worst = max(_compare("grad." + n, got["grad." + n], g.numpy(), REL_TOL) for n, g in grads.items())
    print(f"{preset}/{variant}/{activation}: loss {loss.item():.6f}, logits rel err "
          f"{logits_err:.2e}, worst grad rel err {worst:.2e}")


def test_dump_reads_uint32_shards(tmp_path):
    """The same tokens as a version-7 (uint32) shard give bit-identical dumps."""
    ckpt = tmp_path / "ckpt"
    _run(["init", "--preset", "tiny-llama", "--attention", "affine", "--seed", "7", "--out", str(ckpt)],
         "kdtrain init")
    tokens = np.frombuffer(TEXT, dtype=np.uint8)
    outputs = []
    for version in (1, 7):
        shard = tmp_path / f"data_v{version}.bin"
        ref.write_shard(str(shard), tokens, version=version)
        out = tmp_path / f"dump_v{version}.safetensors"
        _run(["dump", "--checkpoint", str(ckpt), "--data", str(shard), "--batch-size", str(B),
              "--seq-len", str(T), "--out", str(out)], f"kdtrain dump (shard version {version})")
        outputs.append(load_file(str(out)))
    assert set(outputs[0]) == set(outputs[1])
    for name in outputs[0]:
        assert np.array_equal(outputs[0][name], outputs[1][name]), name


# The affine N outside training (docs/model.md, "The affine divisor at inference"): a
# `sequence` checkpoint whose config.json records its training length TRAIN_LENGTH, read
# with affine_inference_n train_length (N fixed at TRAIN_LENGTH) or keys (N = the keys
# of the call). kdtrain's logits and gradients equal the float64 reference's under
# both, for the full-length call and a shorter one. Under train_length every row of the
# shorter call equals the same row of the full call (what a KV cache and padding rely
# on; kdtrain has no cache of its own), to the fp32 bound of the logits (each is within
# REL_TOL of the same float64 value); under keys they differ, at every layer count the
# presets give (tiny-llama has more than one).
TRAIN_LENGTH = T
SHORT = 5


@pytest.mark.parametrize("inference_n", ["train_length", "keys"])
@pytest.mark.parametrize("variant", ["affine", "affine-gated"])
def test_dump_under_each_inference_n_rows_depend_on_the_prefix_only_when_n_is_fixed(
        variant, inference_n, tmp_path):
    ckpt = tmp_path / "ckpt"
    _run(["init", "--preset", "tiny-llama", "--attention", variant, "--seed", "99", "--out", str(ckpt),
          "--set", "attention.affine_bias_divisor=sequence", "--set", f"attention.affine_inference_n={inference_n}"],
         "kdtrain init")
    config = json.loads((ckpt / "config.json").read_text())
    assert config["affine_inference_n"] == inference_n and config["num_hidden_layers"] >= 2
    config["affine_train_length"] = TRAIN_LENGTH
    (ckpt / "config.json").write_text(json.dumps(config, indent=2))
    _record_checksum(ckpt, "config.json")
    _redraw_weights(ckpt, seed=zlib.crc32(f"fixed-n/{variant}".encode()))
    cfg, params = ref.load_checkpoint(str(ckpt))
    assert (cfg.affine_inference_n, cfg.affine_train_length) == (inference_n, TRAIN_LENGTH)

    shard = tmp_path / "data.bin"
    ref.write_shard(str(shard), np.frombuffer(TEXT, dtype=np.uint8), version=1)
    logits = {}
    for length in (TRAIN_LENGTH, SHORT):
        dumped = tmp_path / f"dump_{length}.safetensors"
        _run(["dump", "--checkpoint", str(ckpt), "--data", str(shard), "--batch-size", "1",
              "--seq-len", str(length), "--out", str(dumped), "--grads"], "kdtrain dump")
        got = load_file(str(dumped))
        inputs, targets = ref.batch_from_tokens(ref.read_shard(str(shard)), 1, length, cfg.vocab_size)
        want, _, grads = ref.loss_and_grads(cfg, params, inputs, targets)
        _compare(f"logits (T={length})", got["logits"], want.numpy(), REL_TOL)
        for n, g in grads.items():
            _compare(f"grad.{n} (T={length})", got["grad." + n], g.numpy(), REL_TOL)
        logits[length] = np.asarray(got["logits"], dtype=np.float64)
    prefix = logits[TRAIN_LENGTH][:, :SHORT]
    diff = np.abs(logits[SHORT] - prefix).max() / np.abs(prefix).max()
    if inference_n == "train_length":
        assert diff <= 2 * REL_TOL, f"rows of the {SHORT}-token call moved by {diff:.2e} of the logits' scale"
    else:
        assert diff > 100 * REL_TOL, f"under keys the {SHORT}-token call should differ, moved by {diff:.2e}"
