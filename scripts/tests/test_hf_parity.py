"""Hugging Face interop parity.

Import: random tiny LlamaForCausalLM (GQA, llama3 rope scaling, tied) and
Qwen2ForCausalLM (bias, untied) built with transformers in fp32 and saved with
save_pretrained; `kdtrain dump` on that directory must give transformers'
logits within 1e-4 (max-abs), also for a sharded save and a bf16 save.

Export: `kdtrain export` of every variant on both tiny presets, with weights,
sinks and alpha_ma perturbed so every term matters, loads in transformers (stock
classes for baseline, trust_remote_code otherwise) with logits equal to kdtrain
dump's within 1e-4; a bf16 export holds exactly kdtrain's round-to-nearest-even
bits and survives a reload bit for bit.

Skips cleanly when torch / transformers / safetensors are missing or when the
kdtrain binary (build/kdtrain, $KDTRAIN_BUILD_DIR/kdtrain or $KDTRAIN_BINARY)
lacks a needed subcommand.
"""
import json
import os
import subprocess

import pytest

np = pytest.importorskip("numpy")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
safetensors_numpy = pytest.importorskip("safetensors.numpy")
from kdtrain_hf.variants import VARIANT_CASES  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from repo_paths import KDTRAIN, SHARED  # noqa: E402
TOL = 1e-4
# transformers >= 4.56 renamed from_pretrained's torch_dtype to dtype.
DTYPE_KW = "dtype" if tuple(int(x) for x in transformers.__version__.split(".")[:2]) >= (4, 56) else "torch_dtype"
VOCAB = 97  # tiny HF models; the tiny presets have 256


def has_subcommand(name: str) -> bool:
    if not os.access(KDTRAIN, os.X_OK):
        return False
    result = subprocess.run([KDTRAIN, name, "--help"], capture_output=True, text=True)
    return result.returncode == 0


def need(*subcommands):
    missing = [s for s in subcommands if not has_subcommand(s)]
    if missing:
        pytest.skip(f"{KDTRAIN} lacks subcommand(s) {missing}")


def run(*args) -> str:
    result = subprocess.run([KDTRAIN, *args], capture_output=True, text=True)
    assert result.returncode == 0, f"kdtrain {' '.join(args)} failed:\n{result.stdout}{result.stderr}"
    return result.stdout


def write_shard(path: str, tokens) -> None:
    """llm.c shard, v7 (uint32 tokens): 256 x int32 header, then the tokens."""
    header = np.zeros(256, dtype=np.int32)
    header[:3] = (20240801, 7, len(tokens))
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, dtype=np.uint32).tobytes())


def dump_logits(checkpoint: str, shard: str, B: int, T: int, out: str) -> np.ndarray:
    run("dump", "--checkpoint", checkpoint, "--data", shard, "--batch-size", str(B),
        "--seq-len", str(T), "--out", out)
    return safetensors_numpy.load_file(out)["logits"].astype(np.float64)


def shard_tokens(vocab: int, n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, vocab, size=n)


def randomize_(model, seed: int) -> None:
    """O(1) activations instead of init's std 0.02, so a wrong term shows."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif name.endswith(".bias"):
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5)


def tiny_llama():
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=48, intermediate_size=80, num_hidden_layers=2,
        num_attention_heads=6, num_key_value_heads=2, head_dim=8, max_position_embeddings=128,
        rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=True,
        rope_scaling={"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 16},
        attn_implementation="eager")
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    randomize_(model, 1)
    return model


def tiny_qwen2():
    config = transformers.Qwen2Config(
        vocab_size=VOCAB, hidden_size=40, intermediate_size=72, num_hidden_layers=2,
        num_attention_heads=5, num_key_value_heads=5, max_position_embeddings=128,
        rms_norm_eps=1e-6, rope_theta=1e6, tie_word_embeddings=False, attn_implementation="eager")
    torch.manual_seed(0)
    model = transformers.Qwen2ForCausalLM(config).eval()
    randomize_(model, 2)
    return model


HF_MODELS = {"llama": tiny_llama, "qwen2": tiny_qwen2}


def hf_logits(model, tokens: np.ndarray, B: int, T: int) -> np.ndarray:
    ids = torch.tensor(tokens[: B * T].reshape(B, T), dtype=torch.long)
    with torch.no_grad():
        return model(input_ids=ids).logits.double().numpy()


def max_abs(a: np.ndarray, b: np.ndarray) -> float:
    assert a.shape == b.shape, (a.shape, b.shape)
    return float(np.max(np.abs(a - b)))


# --------------------------------------------------------------------------- import


@pytest.mark.parametrize("family", sorted(HF_MODELS))
@pytest.mark.parametrize("save", ["single", "sharded", "bf16"])
def test_hf_checkpoint_dump_matches_transformers(tmp_path, family, save):
    need("dump")
    model = HF_MODELS[family]()
    hf_dir = str(tmp_path / "hf")
    if save == "bf16":
        # The reference is the same bf16 weights, upcast: the file is what differs.
        model = model.to(torch.bfloat16)
        model.save_pretrained(hf_dir, safe_serialization=True)
        model = type(model).from_pretrained(hf_dir, attn_implementation="eager",
                                            **{DTYPE_KW: torch.float32}).eval()
        saved = json.load(open(os.path.join(hf_dir, "config.json")))
        assert saved.get("dtype", saved.get("torch_dtype")) == "bfloat16"
    elif save == "sharded":
        model.save_pretrained(hf_dir, safe_serialization=True, max_shard_size="40KB")
        assert os.path.exists(os.path.join(hf_dir, "model.safetensors.index.json"))
        shards = [f for f in os.listdir(hf_dir) if f.endswith(".safetensors")]
        assert len(shards) > 1
    else:
        model.save_pretrained(hf_dir, safe_serialization=True)
    B, T = 2, 24
    tokens = shard_tokens(VOCAB, B * T + 1, seed=3)
    shard = str(tmp_path / "tokens.bin")
    write_shard(shard, tokens)
    ours = dump_logits(hf_dir, shard, B, T, str(tmp_path / "dump.safetensors"))
    theirs = hf_logits(model, tokens, B, T)
    assert np.abs(theirs).max() > 0.5, "logits too small for the comparison to mean anything"
    assert max_abs(ours, theirs) < TOL


def test_info_reads_hf_checkpoint(tmp_path):
    need("info")
    model = tiny_llama()
    hf_dir = str(tmp_path / "hf")
    model.to(torch.bfloat16).save_pretrained(hf_dir, safe_serialization=True, max_shard_size="40KB")
    out = json.loads(run("info", "--checkpoint", hf_dir, "--json"))
    expected = sum(p.numel() for p in model.parameters())  # tied head counted once
    assert out["total_params"] == expected
    assert out["attention"] == "baseline"
    assert out["checkpoint"]["origin"] == "Hugging Face LlamaForCausalLM"
    assert out["checkpoint"]["tensor_dtypes"] == {"BF16": len(list(model.parameters()))}
    assert len(out["checkpoint"]["weight_files"]) > 1
    text = run("info", "--checkpoint", hf_dir)
    assert f"{expected:14d}" in text


def test_unsupported_hf_config_is_refused(tmp_path):
    need("dump")
    model = tiny_llama()
    hf_dir = str(tmp_path / "hf")
    model.save_pretrained(hf_dir, safe_serialization=True)
    path = os.path.join(hf_dir, "config.json")
    config = json.load(open(path))
    config["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0}
    json.dump(config, open(path, "w"))
    shard = str(tmp_path / "tokens.bin")
    write_shard(shard, shard_tokens(VOCAB, 9, seed=0))
    result = subprocess.run([KDTRAIN, "dump", "--checkpoint", hf_dir, "--data", shard, "--batch-size",
                             "1", "--seq-len", "8", "--out", str(tmp_path / "d.safetensors")],
                            capture_output=True, text=True)
    assert result.returncode != 0
    assert "rope_scaling.rope_type" in result.stderr and "yarn" in result.stderr
    assert path in result.stderr


# --------------------------------------------------------------------------- export


def make_kdtrain_checkpoint(directory: str, preset: str, variant: str, activation: str, seed: int,
                            divisor: str = "sequence") -> None:
    """kdtrain init, then every tensor re-drawn at O(1) scale: sinks ~ N(0, 1),
    alpha_ma in (0.2, 0.9) and alpha_proj wide enough that linear_clip saturates
    for some tokens, so the affine bias term and the clip are both exercised."""
    run("init", "--preset", preset, "--attention", variant, "--seed", str(seed), "--out", directory,
        "--set", f"attention.alpha_activation={activation}", "--set", f"attention.affine_bias_divisor={divisor}")
    path = os.path.join(directory, "model.safetensors")
    tensors = safetensors_numpy.load_file(path)
    rng = np.random.default_rng(seed)
    out = {}
    for name, t in tensors.items():
        if name.endswith("norm.weight"):
            v = 1.0 + 0.2 * rng.standard_normal(t.shape)
        elif name.endswith(".bias"):
            v = 0.3 * rng.standard_normal(t.shape)
        elif name.endswith(".sinks"):
            v = rng.standard_normal(t.shape)
        elif name.endswith(".alpha_ma"):
            v = rng.uniform(0.2, 0.9, size=t.shape)
        elif name.endswith("alpha_proj.weight"):
            v = 4.0 * rng.standard_normal(t.shape) / t.shape[-1] ** 0.5
        else:
            v = rng.standard_normal(t.shape) / t.shape[-1] ** 0.5
        out[name] = v.astype(np.float32)
    safetensors_numpy.save_file(out, path, metadata={"format": "pt"})
    record_checksum(directory, "model.safetensors")


def record_checksum(directory: str, name: str) -> None:
    """A rewritten file gets its checksums.json entry rewritten (docs/reliability.md),
    or kdtrain refuses the checkpoint as corrupt."""
    import xxhash
    listing = os.path.join(directory, "checksums.json")
    if not os.path.exists(listing):
        return
    doc = json.load(open(listing))
    data = open(os.path.join(directory, name), "rb").read()
    doc["files"][name] = {"bytes": len(data), "xxh64": xxhash.xxh64(data).hexdigest()}
    with open(listing, "w") as f:
        json.dump(doc, f)


def load_exported(hf_dir: str, dtype=torch.float32):
    config = json.load(open(os.path.join(hf_dir, "config.json")))
    arch = config["architectures"][0]
    if arch == "KdtrainForCausalLM":
        model = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, trust_remote_code=True,
                                                                  **{DTYPE_KW: dtype})
    else:
        # Stock classes, no remote code.
        cls = {"LlamaForCausalLM": transformers.LlamaForCausalLM,
               "Qwen2ForCausalLM": transformers.Qwen2ForCausalLM}[arch]
        assert "auto_map" not in config
        model = cls.from_pretrained(hf_dir, attn_implementation="eager", **{DTYPE_KW: dtype})
    return model.eval(), config


@pytest.mark.parametrize("preset", ["tiny-llama", "tiny-qwen"])
@pytest.mark.parametrize("variant,activation", VARIANT_CASES)
def test_export_matches_dump(tmp_path, preset, variant, activation):
    need("init", "dump", "export")
    ckpt = str(tmp_path / "ckpt")
    make_kdtrain_checkpoint(ckpt, preset, variant, activation, seed=11)
    B, T = 2, 40
    tokens = shard_tokens(256, B * T + 1, seed=5)
    shard = str(tmp_path / "tokens.bin")
    write_shard(shard, tokens)
    ours = dump_logits(ckpt, shard, B, T, str(tmp_path / "dump.safetensors"))

    hf_dir = str(tmp_path / "hf")
    run("export", "--checkpoint", ckpt, "--out", hf_dir)
    model, config = load_exported(hf_dir)
    expected_arch = {"baseline": {"tiny-llama": "LlamaForCausalLM", "tiny-qwen": "Qwen2ForCausalLM"}[preset]}
    assert config["architectures"] == [expected_arch.get(variant, "KdtrainForCausalLM")]
    if variant != "baseline":
        assert config["attention_variant"] == variant
        assert config["alpha_activation"] == activation
        assert type(model).__name__ == "KdtrainForCausalLM"
    theirs = hf_logits(model, tokens, B, T)
    assert np.abs(theirs).max() > 0.5
    assert max_abs(ours, theirs) < TOL

    # labels give the mean next-token loss, as transformers' own models do
    ids = torch.tensor(tokens[: B * T].reshape(B, T))
    with torch.no_grad():
        out = model(input_ids=ids, labels=ids, use_cache=False)
    assert isinstance(out, transformers.modeling_outputs.CausalLMOutputWithPast)
    logp = torch.log_softmax(out.logits[:, :-1].double(), dim=-1)
    nll = -logp.gather(-1, ids[:, 1:, None]).mean()
    assert abs(float(out.loss) - float(nll)) < 1e-5


def bf16_rne_bits(values: np.ndarray) -> np.ndarray:
    """fp32 -> bf16 bit patterns, round to nearest even (no NaNs here)."""
    bits = values.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


@pytest.mark.parametrize("preset,variant", [("tiny-llama", "baseline"), ("tiny-qwen", "affine-gated")])
def test_bf16_export_round_trip_is_exact(tmp_path, preset, variant):
    need("init", "dump", "export")
    from safetensors import safe_open

    ckpt = str(tmp_path / "ckpt")
    make_kdtrain_checkpoint(ckpt, preset, variant, "linear_clip", seed=7)
    source = safetensors_numpy.load_file(os.path.join(ckpt, "model.safetensors"))
    hf_dir = str(tmp_path / "hf")
    run("export", "--checkpoint", ckpt, "--out", hf_dir, "--dtype", "bf16")
    config = json.load(open(os.path.join(hf_dir, "config.json")))
    assert config["torch_dtype"] == "bfloat16"

    with safe_open(os.path.join(hf_dir, "model.safetensors"), framework="pt") as f:
        exported = {name: f.get_tensor(name) for name in f.keys()}
    assert set(exported) == set(source)
    for name, values in source.items():
        t = exported[name]
        assert t.dtype == torch.bfloat16, name
        bits = t.view(torch.int16).numpy().view(np.uint16)
        assert np.array_equal(bits, bf16_rne_bits(values)), name
        # torch's own fp32 -> bf16 conversion is round to nearest even as well
        assert torch.equal(torch.from_numpy(values).to(torch.bfloat16).view(torch.int16), t.view(torch.int16))

    # transformers loads the bf16 weights bit for bit ...
    model, _ = load_exported(hf_dir, dtype=torch.bfloat16)
    state = model.state_dict()
    for name, t in exported.items():
        assert torch.equal(state[name].view(torch.int16), t.view(torch.int16)), name
    # ... and kdtrain reading the bf16 export computes what transformers does in fp32.
    B, T = 1, 32
    tokens = shard_tokens(256, B * T + 1, seed=9)
    shard = str(tmp_path / "tokens.bin")
    write_shard(shard, tokens)
    ours = dump_logits(hf_dir, shard, B, T, str(tmp_path / "dump.safetensors"))
    model32, _ = load_exported(hf_dir, dtype=torch.float32)
    assert max_abs(ours, hf_logits(model32, tokens, B, T)) < TOL
    # Re-exporting the bf16 export is bit-identical.
    again = str(tmp_path / "again")
    run("export", "--checkpoint", hf_dir, "--out", again, "--dtype", "bf16")
    assert open(os.path.join(again, "model.safetensors"), "rb").read() == \
        open(os.path.join(hf_dir, "model.safetensors"), "rb").read()


def make_word_tokenizer(directory):
    """A 256-id word-level tokenizer: "w<i>" is id i for i < 253, then <eos>,
    <pad>, <unk> (special tokens that are no prefix of a word)."""
    tokenizers = pytest.importorskip("tokenizers")
    vocab = {f"w{i}": i for i in range(253)}
    vocab.update({"<eos>": 253, "<pad>": 254, "<unk>": 255})
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>",
                                                eos_token="<eos>", pad_token="<pad>")
    directory.mkdir()
    fast.save_pretrained(str(directory))
    return directory


def record_train_length(ckpt: str, length: int) -> None:
    """What a training checkpoint records (its run_config.json's train.seq_len, which the
    export turns into affine_train_length), written into config.json directly."""
    path = os.path.join(ckpt, "config.json")
    config = json.load(open(path))
    config["affine_train_length"] = length
    with open(path, "w") as f:
        json.dump(config, f)
    record_checksum(ckpt, "config.json")


@pytest.mark.parametrize("divisor", ["visible", "sequence", "sequence-fixed"])
def test_export_copies_tokenizer_and_scores_like_lm_eval(tmp_path, divisor):
    """The path lm-eval-harness's `--model hf` takes: AutoTokenizer and
    AutoModelForCausalLM from one directory (trust_remote_code), right-padded
    batches without a mask, log-softmax of the logits. Under the `sequence` divisor with N
    the keys of the call (here: no training length recorded) the pad keys count in N, so
    run_zero_shot.py scores such a model one request at a time; with N fixed at the
    recorded training length ("sequence-fixed") padding changes nothing."""
    import run_zero_shot
    need("init", "export")
    ckpt = str(tmp_path / "ckpt")
    make_kdtrain_checkpoint(ckpt, "tiny-llama", "affine", "linear_clip", seed=3,
                            divisor=divisor.replace("-fixed", ""))
    if divisor == "sequence-fixed":
        record_train_length(ckpt, 16)
    tok_dir = make_word_tokenizer(tmp_path / "tok")
    hf_dir = str(tmp_path / "hf")
    run("export", "--checkpoint", ckpt, "--out", hf_dir, "--tokenizer", str(tok_dir))
    assert os.path.exists(os.path.join(hf_dir, "tokenizer.json"))

    tokenizer = transformers.AutoTokenizer.from_pretrained(hf_dir)
    model = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, trust_remote_code=True,
                                                              **{DTYPE_KW: "auto"}).eval()
    texts = ["w5 w9 w17 w3 w88 w120", "w7 w2"]
    enc = [tokenizer(t)["input_ids"] for t in texts]
    assert enc[0] == [5, 9, 17, 3, 88, 120]
    width = max(len(e) for e in enc)
    batch = torch.tensor([e + [254] * (width - len(e)) for e in enc])
    with torch.no_grad():
        padded = torch.log_softmax(model(batch).logits.double(), dim=-1)
        alone = torch.log_softmax(model(torch.tensor([enc[1]])).logits.double(), dim=-1)
    # Right padding never changes the scores of the real tokens of a causal model; with N
    # the keys of the call it does (N = the padded width), hence batch size 1 in run_zero_shot.py.
    causal = divisor != "sequence"
    assert torch.allclose(padded[1, : len(enc[1])], alone[0], atol=1e-6) == causal
    assert run_zero_shot.padding_changes_scores(hf_dir) == (not causal)
    assert run_zero_shot.affine_bias_n(hf_dir) == {"visible": "i + 1", "sequence": "keys",
                                                   "sequence-fixed": 16}[divisor]

    # Left padding with an attention mask: padded keys are invisible.
    left = torch.tensor([[254] * (width - len(enc[1])) + enc[1]])
    mask = torch.tensor([[0] * (width - len(enc[1])) + [1] * len(enc[1])])
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        masked = torch.log_softmax(model(left, attention_mask=mask, position_ids=positions).logits.double(), -1)
    assert torch.allclose(masked[0, -len(enc[1]):], alone[0], atol=1e-5)

    # Greedy generation runs without a KV cache.
    with torch.no_grad():
        generated = model.generate(torch.tensor([enc[0]]), max_new_tokens=3, do_sample=False)
    assert generated.shape == (1, len(enc[0]) + 3)


def shared_tokenizer(name: str) -> str:
    path = str(SHARED / "tokenizers" / name)
    if not os.path.isdir(path):
        pytest.skip(f"shared/data/tokenizers/{name} not present")
    return path


@pytest.mark.parametrize("name,preset,vocab,expected", [
    ("llama3", "tiny-llama", 128256, [128000, 9906, 1917]),
    ("qwen3", "tiny-qwen", 151936, [9707, 1879]),
])
def test_export_with_real_tokenizer(tmp_path, name, preset, vocab, expected):
    """The real Llama-3 and Qwen tokenizers travel with an export of a model of
    their vocabulary size and tokenize as the shared/data manifest says."""
    need("init", "export")
    real = shared_tokenizer(name)
    ckpt = str(tmp_path / "ckpt")
    run("init", "--preset", preset, "--attention", "affine", "--out", ckpt, "--set", f"model.vocab_size={vocab}")
    hf_dir = str(tmp_path / "hf")
    run("export", "--checkpoint", ckpt, "--out", hf_dir, "--tokenizer", real, "--dtype", "bf16")
    tokenizer = transformers.AutoTokenizer.from_pretrained(hf_dir)
    assert tokenizer("Hello world")["input_ids"] == expected
    model = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, trust_remote_code=True,
                                                              **{DTYPE_KW: "auto"})
    assert model.dtype == torch.bfloat16
    with torch.no_grad():
        logits = model(torch.tensor([expected])).logits
    assert logits.shape == (1, len(expected), vocab) and bool(torch.isfinite(logits).all())


def test_export_refuses_foreign_tokenizer(tmp_path):
    """A tokenizer with more ids than the model's vocabulary is refused."""
    need("init", "export")
    real = shared_tokenizer("qwen2")
    ckpt = str(tmp_path / "ckpt")
    run("init", "--preset", "tiny-qwen", "--out", ckpt)
    hf_dir = str(tmp_path / "hf")
    result = subprocess.run([KDTRAIN, "export", "--checkpoint", ckpt, "--out", hf_dir, "--tokenizer", real],
                            capture_output=True, text=True)
    assert result.returncode != 0
    assert "vocab_size 256" in result.stderr
    assert not os.path.exists(hf_dir)


def test_lm_eval_harness_scores_an_exported_variant(tmp_path):
    """lm-eval-harness itself (when installed): HFLM with trust_remote_code
    computes log-likelihoods equal to the model's own."""
    need("init", "export")
    pytest.importorskip("lm_eval")
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    ckpt = str(tmp_path / "ckpt")
    make_kdtrain_checkpoint(ckpt, "tiny-qwen", "sink", "linear_clip", seed=4)
    tok_dir = make_word_tokenizer(tmp_path / "tok")
    hf_dir = str(tmp_path / "hf")
    run("export", "--checkpoint", ckpt, "--out", hf_dir, "--tokenizer", str(tok_dir))

    lm = HFLM(pretrained=hf_dir, trust_remote_code=True, batch_size=2, device="cpu")
    requests = [Instance("loglikelihood", {}, ("w4 w8 w15", " w16 w23"), 0),
                Instance("loglikelihood", {}, ("w42", " w7"), 1)]
    scores = lm.loglikelihood(requests)
    model = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, trust_remote_code=True).eval()
    for (context, continuation), (logprob, _) in zip([r.args for r in requests], scores):
        ids = [int(w[1:]) for w in (context + continuation).split()]
        n_cont = len(continuation.split())
        with torch.no_grad():
            logp = torch.log_softmax(model(torch.tensor([ids])).logits[0].double(), -1)
        want = sum(float(logp[i - 1, ids[i]]) for i in range(len(ids) - n_cont, len(ids)))
        assert abs(logprob - want) < 1e-4


# --------------------------------------------------------------------------- training


def tiny_llama_preset_shaped():
    """A transformers LLaMA with exactly the tiny-llama preset's architecture, so
    it can initialise that student (model.init) as well as teach it."""
    config = transformers.LlamaConfig(
        vocab_size=256, hidden_size=64, intermediate_size=176, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=512,
        rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=True,
        rope_scaling={"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 64})
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    randomize_(model, 5)
    return model


def test_hf_checkpoint_as_teacher_and_init(tmp_path):
    """kd.teacher and model.init both read a sharded bf16 transformers save with
    no conversion step. The student starts as a copy of the teacher, so the
    first step's KD (forward KL) is 0 and its CE is the teacher's."""
    need("train")
    model = tiny_llama_preset_shaped().to(torch.bfloat16)
    hf_dir = str(tmp_path / "hf")
    model.save_pretrained(hf_dir, safe_serialization=True, max_shard_size="100KB")
    assert os.path.exists(os.path.join(hf_dir, "model.safetensors.index.json"))
    shard = str(tmp_path / "train.bin")
    write_shard(shard, shard_tokens(256, 4096, seed=1))
    run_dir = str(tmp_path / "run")
    overrides = [f"kd.teacher={hf_dir}", f"model.init={hf_dir}", f"data.train={shard}",
                 "kd.weight=1.0", "train.steps=1", "train.global_batch=2", "train.micro_batch=2",
                 "train.seq_len=32", "schedule.warmup=0", "checkpoint.interval=0", "eval.interval=0"]
    run("train", "--preset", "tiny-llama", "--run-dir", run_dir,
        *[arg for o in overrides for arg in ("--set", o)])
    records = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))
               if '"step"' in line]
    first = [r for r in records if r.get("step") == 1 and "kd" in r][0]
    assert abs(first["kd"]) < 1e-6
    assert 1.0 < first["ce"] < 20.0


@pytest.mark.parametrize("inference_n", ["train_length", "keys"])
def test_export_under_each_inference_n_against_the_float64_reference(tmp_path, inference_n):
    """A multi-layer affine-gated `sequence` model whose checkpoint records its training
    length L, exported with --affine-n. In float64 the export's full forward equals
    scripts/peers/reference_model.py's at L and at a shorter length (each with the N of the
    choice). Cached generation (one DynamicCache, chunks of new tokens) equals the
    reference's full forward over the whole sequence with N fixed; with N the call's keys
    it does not (layer 2's cached states were computed with shorter calls' N).
    Tolerance 1e-9: both sides float64 from the same fp32 weights, differing only in
    summation order (~1e-14 relative), with headroom."""
    import reference_model as ref
    need("init", "export")
    L = 16
    ckpt = str(tmp_path / "ckpt")
    make_kdtrain_checkpoint(ckpt, "tiny-llama", "affine-gated", "linear_clip", seed=31)
    record_train_length(ckpt, L)
    hf_dir = str(tmp_path / "hf")
    out = run("export", "--checkpoint", ckpt, "--out", hf_dir, "--affine-n", inference_n)
    assert ("affine N = 16, the training length" in out) == (inference_n == "train_length")
    model, config = load_exported(hf_dir, dtype=torch.float64)
    assert (config["affine_inference_n"], config["affine_train_length"]) == (inference_n, L)
    assert config["num_hidden_layers"] >= 2
    cfg, params = ref.load_checkpoint(hf_dir)
    ids = torch.tensor(shard_tokens(256, L, seed=32)[None, :L].astype(np.int64))

    with torch.no_grad():
        for length in (L, 6):
            got = model(ids[:, :length], use_cache=False).logits
            want = ref.forward(cfg, params, ids[:, :length])
            assert (got - want).abs().max().item() < 1e-9 * want.abs().max().item()
        full = ref.forward(cfg, params, ids)
        cache, rows = None, []
        for start, n in ((0, 5), (5, 1), (6, 3), (9, 1), (10, 6)):
            r = model(ids[:, start:start + n], past_key_values=cache, use_cache=True)
            cache = r.past_key_values
            rows.append(r.logits)
        cached = torch.cat(rows, dim=1)
    diff = (cached - full).abs().max().item() / full.abs().max().item()
    assert (diff < 1e-9) == (inference_n == "train_length"), diff
