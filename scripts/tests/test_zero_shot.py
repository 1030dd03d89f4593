"""scripts/report/run_zero_shot.py: the data converters, and the six lm-eval tasks run
offline on tiny models whose scores must equal an independent log-likelihood
computation of the same items (PyTorch logits of the Hugging Face model, and,
where `kdtrain export` exists, kdtrain's own logits via `kdtrain dump`).

Skips cleanly without ../shared/data/evals, lm_eval, torch, transformers or tokenizers.
"""
import importlib.util
import json
import math
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from repo_paths import KDTRAIN, REPO, SHARED, have  # noqa: E402

EVALS = SHARED / "evals"
LIMIT = 5

spec = importlib.util.spec_from_file_location("run_zero_shot", REPO / "scripts" / "report" / "run_zero_shot.py")
zs = importlib.util.module_from_spec(spec)
sys.modules["run_zero_shot"] = zs
spec.loader.exec_module(zs)

needs_data = pytest.mark.skipif(not EVALS.is_dir(), reason=f"{EVALS} is absent")


needs_stack = pytest.mark.skipif(not have("lm_eval", "torch", "transformers", "tokenizers"),
                                 reason="lm_eval / torch / transformers / tokenizers not installed")


# ---------------------------------------------------------------------------
# Converters, checked against the raw files by hand
# ---------------------------------------------------------------------------

@needs_data
def test_prepare_data_converts_every_format(tmp_path):
    paths = zs.prepare_data(EVALS, tmp_path)
    rows = {k: [json.loads(l) for l in open(p)] for k, p in paths.items()}
    # counts equal the slices' rows (HellaSwag: 6 lines per task)
    assert len(rows["arc_challenge"]) == 575 and len(rows["arc_easy"]) == 285
    assert len(rows["boolq"]) == 1635 and len(rows["winogrande"]) == 634
    assert len(rows["piqa"]) == 919 and len(rows["hellaswag"]) == 5021

    a = rows["arc_challenge"][0]  # original AI2 format -> HF schema
    assert a["question"].startswith("An astronomer observes that a planet rotates faster")
    assert a["choices"]["label"] == ["A", "B", "C", "D"]
    assert a["choices"]["text"][2] == "Planetary days will become shorter."
    assert a["answerKey"] == "C"

    h = rows["hellaswag"][0]
    assert h["query"] == "Roof shingle removal: A man is sitting on a roof. he"
    assert h["label"] == 3 and h["choices"][3] == "starts pulling up roofing on a roof."

    p = rows["piqa"][:3]
    assert [r["label"] for r in p] == [0, 1, 1]
    assert p[1]["goal"] == "dresser"

    w = rows["winogrande"][0]
    assert w["contexts"] == ["Sarah was a much better surgeon than Maria so Sarah",
                             "Sarah was a much better surgeon than Maria so Maria"]
    assert w["continuation"] == "always got the easier cases."
    assert w["label"] == 1
    assert rows["boolq"][0]["label"] == 0


@needs_data
def test_official_splits_and_full_files_are_preferred(tmp_path):
    # The shipped slices: lm-eval's split everywhere but ARC-Easy (validation only).
    data = zs.prepare_tasks(EVALS, tmp_path / "slices")
    assert {t: (d.split, d.rows, d.split_size) for t, d in data.items()} == {
        "arc_easy": ("validation", 285, 570), "arc_challenge": ("test", 575, 1172),
        "boolq": ("validation", 1635, 3270), "piqa": ("validation", 919, 1838),
        "hellaswag": ("validation", 5021, 10042), "winogrande": ("validation", 634, 1267)}
    assert not data["arc_easy"].official and data["arc_challenge"].official
    # An ARC-Easy test file wins over validation; of two BoolQ validation files the
    # longer (the full split) wins; HellaSwag's original jsonl is read as lm-eval does.
    src = tmp_path / "evals"
    shutil.copytree(EVALS, src)
    for p in src.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    ai2 = {"id": "x1", "question": {"stem": "Which is a gas?", "choices": [
        {"text": "steam", "label": "A"}, {"text": "ice", "label": "B"}]}, "answerKey": "A"}
    (src / "arc" / "ARC-Easy-Test.jsonl").write_text(json.dumps(ai2) + "\n")
    rows = (src / "boolq" / "boolq-validation.hf.rows0000-1634.jsonl").read_text().splitlines()
    (src / "boolq" / "boolq-validation-full.jsonl").write_text("\n".join(rows + rows[:10]) + "\n")
    orig = {"activity_label": "Roof shingle removal", "ctx_a": "A man is sitting on a roof.",
            "ctx_b": "he", "endings": ["a", "b [title] c", "d", "e"], "label": "2"}
    (src / "hellaswag" / "hellaswag_val.jsonl").write_text(json.dumps(orig) + "\n")
    for f in (src / "hellaswag").glob("*.txt"):
        f.unlink()
    data = zs.prepare_tasks(src, tmp_path / "full")
    assert (data["arc_easy"].split, data["arc_easy"].rows, data["arc_easy"].official) == ("test", 1, True)
    assert data["boolq"].rows == 1645 and data["boolq"].source.name == "boolq-validation-full.jsonl"
    h = json.loads(data["hellaswag"].path.read_text())
    assert h == {"query": "Roof shingle removal: A man is sitting on a roof. He",
                 "choices": ["a", "b. c", "d", "e"], "label": 2}
    res = {t["task"]: {"acc,none": 0.5, "acc_norm,none": 0.5} for t in zs.TASKS.values()}
    s = zs.summarize(res, limit=100, data=data)["tasks"]
    assert s["arc_easy"]["examples"] == 1 and s["arc_easy"]["split"] == "test"
    assert s["boolq"]["examples"] == 100 and s["boolq"]["split_size"] == 3270
    assert s["boolq"]["complete"] is False
    (src / "arc" / "ARC-Challenge-Test.orig.rows0000-0574.jsonl").unlink()
    with pytest.raises(FileNotFoundError, match="arc_challenge"):
        zs.prepare_tasks(src, tmp_path / "none")


def test_hellaswag_clean_matches_lm_eval_rules():
    assert zs.hellaswag_clean(" A [header] b [title] C  d ") == "A b. C d"  # strip, title, markup, then "  " -> " "


def test_summary_uses_the_column_metric():
    res = {t["task"]: {"acc,none": 0.5, "acc_norm,none": 0.75, "acc_stderr,none": 0.1}
           for t in zs.TASKS.values()}
    s = zs.summarize(res, limit=3)
    assert s["tasks"]["hellaswag"]["value"] == 0.75   # acc_norm
    assert s["tasks"]["winogrande"]["value"] == 0.5   # acc
    assert s["average"] == pytest.approx((4 * 0.5 + 2 * 0.75) / 6)


# ---------------------------------------------------------------------------
# Independent scoring
# ---------------------------------------------------------------------------

def requests_for(name, doc):
    """(contexts, continuations, gold, choice strings for acc_norm) as lm-eval forms them."""
    if name in ("arc_easy", "arc_challenge"):
        texts = doc["choices"]["text"]
        return ([f"Question: {doc['question']}\nAnswer:"] * len(texts), [" " + t for t in texts],
                doc["choices"]["label"].index(doc["answerKey"]), texts)
    if name == "boolq":
        ctx = f"{doc['passage']}\nQuestion: {doc['question']}?\nAnswer:"
        return [ctx, ctx], [" no", " yes"], doc["label"], ["no", "yes"]
    if name == "piqa":
        sols = [doc["sol1"], doc["sol2"]]
        return [f"Question: {doc['goal']}\nAnswer:"] * 2, [" " + s for s in sols], doc["label"], sols
    if name == "hellaswag":
        return ([doc["query"]] * 4, [" " + c for c in doc["choices"]], doc["label"], doc["choices"])
    if name == "winogrande":
        return (doc["contexts"], [" " + doc["continuation"]] * 2, doc["label"], doc["contexts"])
    raise KeyError(name)


def split_tokens(tokenizer, context, continuation):
    """Context / continuation ids: trailing context spaces move to the continuation, and the
    continuation ids are what encoding the whole string adds after the context's ids."""
    n = len(context) - len(context.rstrip())
    if n:
        context, continuation = context[:-n], context[-n:] + continuation
    whole = tokenizer.encode(context + continuation, add_special_tokens=False)
    ctx = tokenizer.encode(context, add_special_tokens=False)
    return ctx, whole[len(ctx):]


def loglik_from_logits(logits, ctx, cont):
    """Sum of log p(cont[k] | prefix) from logits (len(ctx)+len(cont)-1, V), float64."""
    import numpy as np
    lg = np.asarray(logits, dtype=np.float64)
    total = 0.0
    for k, tok in enumerate(cont):
        row = lg[len(ctx) - 1 + k]
        m = row.max()
        total += row[tok] - (m + math.log(np.exp(row - m).sum()))
    return total


def score(docs_by_task, tokenizer, logits_fn):
    """acc / acc_norm and per-item log-likelihoods, lm-eval's definitions (acc_norm divides by
    the choice string's length in characters, as lm-eval 0.4.9's len(choice))."""
    out = {}
    for name, docs in docs_by_task.items():
        acc, acc_norm, lls_all = [], [], []
        for doc in docs:
            ctxs, conts, gold, choices = requests_for(name, doc)
            lls = []
            for c, t in zip(ctxs, conts):
                ci, ti = split_tokens(tokenizer, c, t)
                lls.append(loglik_from_logits(logits_fn(ci + ti), ci, ti))
            pred = max(range(len(lls)), key=lambda k: lls[k])
            pred_norm = max(range(len(lls)), key=lambda k: lls[k] / len(choices[k]))
            acc.append(float(pred == gold))
            acc_norm.append(float(pred_norm == gold))
            lls_all.append(lls)
        out[name] = {"acc": sum(acc) / len(acc), "acc_norm": sum(acc_norm) / len(acc_norm),
                     "lls": lls_all}
    return out


def check_against(summary, samples, mine):
    for name in zs.TASKS:
        got = summary["tasks"][name]
        assert got["acc"] == pytest.approx(mine[name]["acc"], abs=1e-12), name
        if "acc_norm" in got:
            assert got["acc_norm"] == pytest.approx(mine[name]["acc_norm"], abs=1e-12), name
        assert len(samples[name]) == LIMIT
        for item, lls in zip(samples[name], mine[name]["lls"]):
            assert item["loglikelihoods"] == pytest.approx(lls, rel=1e-4, abs=1e-3), name
    avg = sum(summary["tasks"][n]["value"] for n in zs.TASKS) / 6
    assert summary["average"] == pytest.approx(avg)


def first_docs(data_dir):
    return {n: [json.loads(l) for l in open(Path(data_dir) / f"{n}.jsonl")][:LIMIT] for n in zs.TASKS}


# ---------------------------------------------------------------------------
# A tiny Llama with a small byte-level BPE tokenizer trained on the eval texts
# ---------------------------------------------------------------------------

def train_tokenizer(data_dir, vocab_size=384):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    texts = []
    for n in zs.TASKS:
        for line in list(open(Path(data_dir) / f"{n}.jsonl"))[:200]:
            texts.append(line)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer)
    from transformers import PreTrainedTokenizerFast
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>",
                                   bos_token="<|endoftext|>", pad_token="<|endoftext|>")


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    if not EVALS.is_dir():
        pytest.skip(f"{EVALS} is absent")
    d = tmp_path_factory.mktemp("evaldata")
    zs.prepare_data(EVALS, d)
    return d


@needs_data
@needs_stack
def test_six_tasks_equal_direct_loglikelihoods(prepared, tmp_path):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    tokenizer = train_tokenizer(prepared)
    model_dir = tmp_path / "tiny-llama-hf"
    tokenizer.save_pretrained(model_dir)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=4096, initializer_range=0.5,
                         bos_token_id=0, eos_token_id=0, tie_word_embeddings=False)
    model = LlamaForCausalLM(config).eval()
    model.save_pretrained(model_dir, safe_serialization=True)

    out, samples = tmp_path / "zero_shot.json", tmp_path / "samples.json"
    summary = zs.run(str(model_dir), out, limit=LIMIT, batch_size=4, samples=samples)
    assert json.loads(out.read_text()) == json.loads(json.dumps(summary))
    assert set(summary["tasks"]) == set(zs.TASKS)

    def logits_fn(ids):
        with torch.no_grad():
            return model(torch.tensor([ids[:-1]])).logits[0].double().numpy()

    mine = score(first_docs(prepared), tokenizer, logits_fn)
    check_against(summary, json.loads(samples.read_text()), mine)


# ---------------------------------------------------------------------------
# A kdtrain model through `kdtrain export`, scored against `kdtrain dump`
# ---------------------------------------------------------------------------

def kdtrain_has(command):
    if not KDTRAIN.exists():
        return False
    # `kdtrain X --help` exits 0 even for an unknown X (the top-level help answers), so
    # look for X among the subcommands the top-level help lists.
    out = subprocess.run([str(KDTRAIN), "--help"], capture_output=True, text=True).stdout
    return any(line.split()[:1] == [command] for line in out.splitlines())


def write_shard(path, tokens):
    header = [20240801, 7, len(tokens)] + [0] * 253
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack(f"<{len(tokens)}I", *tokens))


@needs_data
@needs_stack
@pytest.mark.skipif(not kdtrain_has("export"), reason="kdtrain export is not built yet")
@pytest.mark.parametrize("variant", ["baseline", "affine"])
def test_exported_kdtrain_model_equals_kdtrain_logits(prepared, tmp_path, variant):
    from safetensors.numpy import load_file
    tokenizer = train_tokenizer(prepared)
    tok_dir = tmp_path / "tokenizer"
    tokenizer.save_pretrained(tok_dir)
    ckpt, hf = tmp_path / "ckpt", tmp_path / "hf"
    subprocess.run([str(KDTRAIN), "init", "--preset", "tiny-llama", "--attention", variant,
                    "--set", f"model.vocab_size={len(tokenizer)}",
                    "--set", "model.max_position_embeddings=4096",
                    "--set", "model.initializer_range=0.5", "--out", str(ckpt)], check=True)
    subprocess.run([str(KDTRAIN), "export", "--checkpoint", str(ckpt), "--out", str(hf),
                    "--tokenizer", str(tok_dir)], check=True)
    out, samples = tmp_path / "zero_shot.json", tmp_path / "samples.json"
    summary = zs.run(str(hf), out, limit=LIMIT, batch_size=4, samples=samples)

    def logits_fn(ids):
        shard, dump = tmp_path / "req.bin", tmp_path / "req.safetensors"
        write_shard(shard, list(ids) + [0])  # dump reads B*T+1 tokens
        subprocess.run([str(KDTRAIN), "dump", "--checkpoint", str(ckpt), "--data", str(shard),
                        "--batch-size", "1", "--seq-len", str(len(ids) - 1), "--out", str(dump)],
                       check=True, capture_output=True)
        return load_file(str(dump))["logits"][0]

    mine = score(first_docs(prepared), tokenizer, logits_fn)
    check_against(summary, json.loads(samples.read_text()), mine)


def test_several_models_pair_with_their_outputs(tmp_path, capsys):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text("{}")
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    with pytest.raises(SystemExit):
        zs.main(["--model", a, b, "--out", str(tmp_path / "a.json")])
    assert "2 --model directories but 1 --out files" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        zs.main(["--model", a, b, "--out", "x.json", "y.json", "--samples", "s.json"])
    assert "--samples and --work-dir take one --model" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        zs.main(["--model", a, str(tmp_path / "missing"), "--out", "x.json", "y.json"])
    assert "missing: no config.json" in capsys.readouterr().err


def test_batch_size_defaults_to_one_on_the_cpu_for_a_large_vocabulary(tmp_path, capsys):
    for vocab, cpu, cuda in ((256, 8, 8), (zs.CPU_BATCHING_MAX_VOCAB, 8, 8), (128256, 1, 8)):
        (tmp_path / "config.json").write_text(json.dumps({"vocab_size": vocab}))
        assert (zs.default_batch_size(str(tmp_path), "cpu"), zs.default_batch_size(str(tmp_path), "cuda:0")) == (cpu, cuda)
    assert zs.default_batch_size(str(tmp_path / "absent"), "cpu") == 8
    with pytest.raises(SystemExit):
        zs.main(["--model", str(tmp_path), "--out", str(tmp_path / "o.json"), "--batch-size", "0"])
    assert "--batch-size 0: must be at least 1" in capsys.readouterr().err
