"""Tests for scripts/data/prepare_fineweb_edu.py and prepare_c4.py on the real
FineWeb-Edu / C4 samples and the real Llama-3 and Qwen tokenizers in
../shared/data (skipped when those files or `tokenizers` are absent)."""
import csv
import gzip
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

tokenizers = pytest.importorskip("tokenizers")

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.dirname(HERE)
REPO = os.path.dirname(SCRIPTS)
DATA = os.environ.get("KDTRAIN_SHARED_DATA",
                      os.path.join(os.path.dirname(REPO), "shared", "data"))
if not os.path.isdir(DATA):
    DATA = "/work/shared/data"
FINEWEB = os.path.join(DATA, "text", "fineweb_edu_sample10BT.rows000-099.csv")
C4 = os.path.join(DATA, "text", "c4_validation_2k.rows0000-0999.jsonl")
LLAMA3 = os.path.join(DATA, "tokenizers", "llama3", "tokenizer.json")
QWEN3 = os.path.join(DATA, "tokenizers", "qwen3", "tokenizer.json")
QWEN2_DIR = os.path.join(DATA, "tokenizers", "qwen2")

needs_data = pytest.mark.skipif(not (os.path.isfile(FINEWEB) and os.path.isfile(LLAMA3)),
                                reason="../shared/data (FineWeb-Edu sample, tokenizers) absent")

sys.path.insert(0, os.path.join(SCRIPTS, "data"))
import prepare_fineweb_edu as prep  # noqa: E402


def run_script(name, *args):
    cmd = [sys.executable, os.path.join(SCRIPTS, "data", name), "--quiet", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True)


def read_shard(path):
    """Independent llm.c shard reader: header checks and the tokens."""
    raw = open(path, "rb").read()
    header = np.frombuffer(raw[:1024], dtype="<i4")
    magic, version, count = int(header[0]), int(header[1]), int(header[2])
    assert (magic, version) in ((20240520, 1), (20240801, 7)), (magic, version)
    assert not header[3:].any()
    width = 2 if version == 1 else 4
    assert len(raw) == 1024 + count * width
    return np.frombuffer(raw[1024:], dtype="<u2" if width == 2 else "<u4").astype(np.int64), width


def fineweb_texts():
    with open(FINEWEB, newline="", encoding="utf-8") as f:
        return [row["text"] for row in csv.DictReader(f)]


def c4_texts():
    with open(C4, encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f if line.strip()]


def reference_stream(tokenizer_path, texts, sep_id, before):
    """The tokenizer's own encoding of each document plus the separator."""
    tok = tokenizers.Tokenizer.from_file(tokenizer_path)
    tok.encode_special_tokens = True
    out, docs = [], []
    for text in texts:
        ids = tok.encode(text, add_special_tokens=False).ids
        docs.append(ids)
        out.extend([sep_id] + ids if before else ids + [sep_id])
    return np.array(out, dtype=np.int64), docs, tok


def read_output(out):
    manifest = json.load(open(os.path.join(out, "manifest.json")))
    parts = []
    for shard in manifest["shards"]:
        tokens, width = read_shard(os.path.join(out, shard["file"]))
        assert width == (4 if manifest["dtype"] == "uint32" else 2)
        assert len(tokens) == shard["tokens"]
        assert os.path.getsize(os.path.join(out, shard["file"])) == shard["bytes"]
        parts.append(tokens)
    return manifest, np.concatenate(parts)


def sha256(path):
    import hashlib
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


@needs_data
@pytest.mark.parametrize("workers", [0, 2])
def test_llama3_fineweb(tmp_path, workers):
    out = tmp_path / "llama3"
    r = run_script("prepare_fineweb_edu.py", "--tokenizer", LLAMA3, "--input", FINEWEB,
                   "--out", out, "--val-tokens", 10000, "--shard-tokens", 20000,
                   "--workers", workers)
    assert r.returncode == 0, r.stderr
    texts = fineweb_texts()
    expected, docs, tok = reference_stream(LLAMA3, texts, 128000, before=True)
    manifest, stream = read_output(out)
    assert np.array_equal(stream, expected)
    # Shard 0 is the validation shard with exactly --val-tokens, then train shards.
    names = [s["file"] for s in manifest["shards"]]
    assert names[0] == "fineweb_edu_val_000000.bin" and manifest["shards"][0]["tokens"] == 10000
    assert names[1:] == [f"fineweb_edu_train_{i:06d}.bin" for i in range(1, len(names))]
    assert all(s["tokens"] == 20000 for s in manifest["shards"][1:-1])
    assert manifest["vocab_size"] == 128256 and manifest["dtype"] == "uint32"
    assert manifest["shard_version"] == 7
    assert manifest["separator"] == {"token": "<|begin_of_text|>", "id": 128000,
                                     "position": "before"}
    assert manifest["documents"] == len(texts) == 100
    assert manifest["tokens"] == len(expected) == sum(len(d) + 1 for d in docs)
    assert manifest["val_tokens"] + manifest["train_tokens"] == manifest["tokens"]
    assert sum(s["separators"] for s in manifest["shards"]) == 100
    assert manifest["tokenizer"]["sha256"] == sha256(LLAMA3)
    assert "--val-tokens" in manifest["command"]
    # The first document decodes back to the original text.
    first, _ = read_shard(out / names[0])
    assert first[0] == 128000
    end = int(np.argmax(first[1:] == 128000)) + 1
    assert tok.decode(first[1:end].tolist(), skip_special_tokens=False) == texts[0]
    assert not [f for f in os.listdir(out) if ".tmp." in f]


@needs_data
@pytest.mark.skipif(not os.path.isfile(QWEN3), reason="Qwen3 tokenizer absent")
def test_qwen_fineweb(tmp_path):
    out = tmp_path / "qwen"
    r = run_script("prepare_fineweb_edu.py", "--tokenizer", QWEN3, "--input", FINEWEB,
                   "--out", out, "--val-tokens", 5000, "--shard-tokens", 1 << 20)
    assert r.returncode == 0, r.stderr
    texts = fineweb_texts()
    expected, docs, tok = reference_stream(QWEN3, texts, 151643, before=False)
    manifest, stream = read_output(out)
    assert np.array_equal(stream, expected)
    assert manifest["vocab_size"] == 151669 and manifest["dtype"] == "uint32"
    assert manifest["separator"] == {"token": "<|endoftext|>", "id": 151643, "position": "after"}
    assert [s["split"] for s in manifest["shards"]] == ["val", "train"]
    first, _ = read_shard(out / manifest["shards"][0]["file"])
    end = int(np.argmax(first == 151643))
    assert tok.decode(first[:end].tolist()) == texts[0]


@needs_data
@pytest.mark.skipif(not os.path.isfile(os.path.join(QWEN2_DIR, "merges.txt")) or
                    not os.path.isfile(QWEN3), reason="Qwen2 vocab/merges absent")
def test_qwen2_vocab_merges_dir_matches_qwen3_json(tmp_path):
    # Same BPE vocabulary and merges (MANIFEST.md): identical tokens, smaller vocab.
    out = tmp_path / "qwen2"
    r = run_script("prepare_fineweb_edu.py", "--tokenizer", QWEN2_DIR, "--input", FINEWEB,
                   "--out", out, "--val-tokens", 0, "--workers", 2)
    assert r.returncode == 0, r.stderr
    expected, _, _ = reference_stream(QWEN3, fineweb_texts(), 151643, before=False)
    manifest, stream = read_output(out)
    assert np.array_equal(stream, expected)
    assert manifest["vocab_size"] == 151646
    assert [s["split"] for s in manifest["shards"]] == ["train"]
    assert set(manifest["tokenizer"]["files"]) >= {"vocab.json", "merges.txt"}


@needs_data
@pytest.mark.skipif(not os.path.isfile(C4), reason="C4 sample absent")
def test_c4_validation_shards(tmp_path):
    out = tmp_path / "c4"
    r = run_script("prepare_c4.py", "--tokenizer", LLAMA3, "--input", C4, "--out", out)
    assert r.returncode == 0, r.stderr
    texts = c4_texts()
    expected, _, _ = reference_stream(LLAMA3, texts, 128000, before=True)
    manifest, stream = read_output(out)
    assert np.array_equal(stream, expected)
    assert [s["file"] for s in manifest["shards"]] == ["c4_val_000000.bin"]
    assert manifest["documents"] == 1000 and manifest["train_tokens"] == 0
    # Bytes per token: Llama-3 has no normalizer, so the scored tokens' byte lengths
    # add up to the documents' UTF-8 bytes exactly, and the separator counts 0.
    table = json.load(open(out / manifest["token_bytes"]))
    lengths = np.array(table["bytes"])
    assert table["tokenizer_sha256"] == manifest["tokenizer"]["sha256"]
    assert len(lengths) == manifest["vocab_size"] and lengths[128000] == 0
    text_bytes = sum(len(t.encode("utf-8")) for t in texts)
    assert manifest["text_bytes"] == text_bytes
    assert int(lengths[stream].sum()) == text_bytes
    # Words as lm-eval's count_words: len(re.split(r"\s+", doc)) per document.
    assert manifest["words"] == sum(len(re.split(r"\s+", t)) for t in texts)


@needs_data
def test_gzip_jsonl_max_tokens_and_overwrite(tmp_path):
    texts = fineweb_texts()[:20]
    src = tmp_path / "docs.jsonl.gz"
    with gzip.open(src, "wt", encoding="utf-8") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"text": t, "url": f"u{i}", "timestamp": "t"}) + "\n")
            if i == 3:
                f.write(json.dumps({"text": "", "url": "empty"}) + "\n")
    out = tmp_path / "o"
    args = ["--tokenizer", LLAMA3, "--input", src, "--out", out, "--val-tokens", 1000,
            "--shard-tokens", 3000, "--max-tokens", 7000]
    r = run_script("prepare_fineweb_edu.py", *args)
    assert r.returncode == 0, r.stderr
    expected, _, _ = reference_stream(LLAMA3, texts, 128000, before=True)
    manifest, stream = read_output(out)
    assert np.array_equal(stream, expected[:7000])
    assert [s["tokens"] for s in manifest["shards"]] == [1000, 3000, 3000]
    assert manifest["stopped_at_max_tokens"] is True
    # An existing output is refused without --overwrite ...
    r = run_script("prepare_fineweb_edu.py", *args)
    assert r.returncode == 1 and "--overwrite" in r.stderr
    # ... and a shorter rerun with it leaves no stale shard behind.
    r = run_script("prepare_fineweb_edu.py", *args[:-2], "--max-tokens", 2000, "--overwrite")
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(out)) == ["fineweb_edu_train_000001.bin",
                                       "fineweb_edu_val_000000.bin", "manifest.json",
                                       "token_bytes.json"]


def test_token_bytes_of_the_byte_tokenizer_and_qwen(tmp_path):
    # The byte tokenizer: id = byte value, one byte each. Qwen2 (vocab.json + merges):
    # every BPE entry is ByteLevel text, the three added tokens are special (0 bytes).
    import make_byte_tokenizer
    import token_bytes
    tok_dir = make_byte_tokenizer.write(tmp_path / "bytes")
    tok = prep.load_tokenizer(str(tok_dir))
    assert token_bytes.token_byte_lengths(tok, 256) == [1] * 256
    if not os.path.isfile(os.path.join(QWEN2_DIR, "merges.txt")):
        pytest.skip("Qwen2 vocab/merges absent")
    qwen = prep.load_tokenizer(QWEN2_DIR)
    lengths = token_bytes.token_byte_lengths(qwen, 151646)
    assert lengths[151643:] == [0, 0, 0]
    text = "Grüße, 東京 — 42!"
    ids = qwen.encode(text, add_special_tokens=False).ids
    assert sum(lengths[i] for i in ids) == len(text.encode("utf-8"))


def test_small_vocab_writes_uint16_shards(tmp_path):
    # A tiny word-level tokenizer: vocab < 65536 gives version-1 shards.
    tok_path = small_word_tokenizer(tmp_path)
    src = tmp_path / "d.jsonl"
    src.write_text("\n".join(json.dumps({"body": t}) for t in
                             ["hello world", "world again hello", "<|endoftext|> x"]) + "\n")
    out = tmp_path / "o"
    r = run_script("prepare_fineweb_edu.py", "--tokenizer", tok_path, "--input", src,
                   "--out", out, "--text-field", "body", "--val-tokens", 3)
    assert r.returncode == 0, r.stderr
    manifest, stream = read_output(out)
    assert manifest["dtype"] == "uint16" and manifest["shard_version"] == 1
    # A word-level tokenizer has no byte-level vocabulary: no bytes-per-token table.
    assert manifest["token_bytes"] is None and "no token_bytes.json" in r.stderr
    assert not os.path.exists(out / "token_bytes.json")
    # The literal "<|endoftext|>" in text is not the separator (encoded as text: <unk>s).
    assert stream.tolist()[:7] == [2, 3, 1, 3, 4, 2, 1]
    assert np.count_nonzero(stream == 1) == 3


def test_bad_inputs(tmp_path):
    src = tmp_path / "d.jsonl"
    src.write_text('{"text": "a"}\nnot json\n')
    if not os.path.isfile(LLAMA3):
        pytest.skip("Llama-3 tokenizer absent")
    r = run_script("prepare_fineweb_edu.py", "--tokenizer", LLAMA3, "--input", src,
                   "--out", tmp_path / "o")
    assert r.returncode == 1 and f"{src}:2: not valid JSON" in r.stderr
    assert not os.path.exists(tmp_path / "o" / "manifest.json")
    r = run_script("prepare_fineweb_edu.py", "--tokenizer", LLAMA3, "--input", src,
                   "--out", tmp_path / "o2", "--text-field", "body")
    assert r.returncode == 1 and "no field 'body'" in r.stderr
    r = run_script("prepare_fineweb_edu.py", "--tokenizer", tmp_path, "--input", src,
                   "--out", tmp_path / "o3")
    assert r.returncode == 1 and "neither tokenizer.json" in r.stderr


@needs_data
def test_parquet_input_matches_csv(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    texts = fineweb_texts()
    src = tmp_path / "fw.parquet"
    table = pa.table({"id": list(range(len(texts))), "text": texts})
    pq.write_table(table, src, row_group_size=7)  # many row groups, streamed in batches
    out = tmp_path / "pq"
    r = run_script("prepare_fineweb_edu.py", "--tokenizer", LLAMA3, "--input", src,
                   "--out", out, "--val-tokens", 10000, "--shard-tokens", 20000)
    assert r.returncode == 0, r.stderr
    expected, _, _ = reference_stream(LLAMA3, texts, 128000, before=True)
    manifest, stream = read_output(out)
    assert np.array_equal(stream, expected)
    assert manifest["documents"] == 100
    r = run_script("prepare_fineweb_edu.py", "--tokenizer", LLAMA3, "--input", src,
                   "--out", tmp_path / "bad", "--text-field", "body")
    assert r.returncode == 1 and "no column 'body'" in r.stderr


def small_word_tokenizer(tmp_path):
    """tmp_path/tokenizer.json: words hello, world, again (ids 2-4), <unk> 0, separator 1."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    vocab = {"<unk>": 0, "<|endoftext|>": 1, "hello": 2, "world": 3, "again": 4}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(["<|endoftext|>"])
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    return path


def test_validation_swallowing_the_corpus_is_refused(tmp_path):
    # 14 tokens in all (10 words, 4 separators); the default --val-tokens (10M) would leave
    # no training token.
    tok = small_word_tokenizer(tmp_path)
    src = tmp_path / "d.jsonl"
    src.write_text("\n".join(json.dumps({"text": t}) for t in ["hello world", "world again hello",
                                                               "hello hello", "again again world"]) + "\n")
    out = tmp_path / "o"
    r = run_script("prepare_fineweb_edu.py", "--tokenizer", tok, "--input", src, "--out", out)
    assert r.returncode == 1
    assert "no training tokens" in r.stderr and "--val-tokens 10000000" not in r.stderr
    assert "--val-tokens (10,000,000) took them all" in r.stderr and "nothing was written" in r.stderr
    assert os.listdir(out) == []  # no shard, no manifest
    # A training split smaller than the validation split is written, with a warning.
    r = run_script("prepare_fineweb_edu.py", "--tokenizer", tok, "--input", src, "--out", out,
                   "--val-tokens", 8)
    assert r.returncode == 0, r.stderr
    assert "warning: the training split (6 tokens) is smaller than the validation split (8)" in r.stderr
    # A sensible split says nothing.
    r = run_script("prepare_fineweb_edu.py", "--tokenizer", tok, "--input", src, "--out", out,
                   "--val-tokens", 3, "--overwrite")
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr


def test_empty_input_is_refused_by_both_scripts(tmp_path):
    tok = small_word_tokenizer(tmp_path)
    src = tmp_path / "d.jsonl"
    src.write_text(json.dumps({"text": ""}) + "\n")
    for script in ("prepare_fineweb_edu.py", "prepare_c4.py"):
        out = tmp_path / script
        r = run_script(script, "--tokenizer", tok, "--input", src, "--out", out)
        assert r.returncode == 1 and "the input holds no text" in r.stderr, r.stderr
        assert os.listdir(out) == []


def test_help_shows_the_defaults():
    for script, expected in (("prepare_fineweb_edu.py", ["(default: 10000000)", "(default: fineweb_edu)",
                                                         "(default: from the tokenizer)"]),
                             ("prepare_c4.py", ["(default: c4)", "(default: val)", "(default: jsonl)"])):
        r = subprocess.run([sys.executable, os.path.join(SCRIPTS, "data", script), "--help"],
                           capture_output=True, text=True)
        assert r.returncode == 0
        text = " ".join(r.stdout.split())  # argparse wraps lines
        for e in expected:
            assert e in text, (script, e)
        assert "(default: None)" not in text


def test_token_bytes_and_prepare_import_apart():
    # The two commands share tokenizer_spec.py: prepare_fineweb_edu imports
    # token_bytes, and nothing in token_bytes (not even inside a function)
    # imports prepare_fineweb_edu back.
    import ast

    def imported(name):
        tree = ast.parse(open(os.path.join(SCRIPTS, "data", name + ".py"), encoding="utf-8").read())
        out = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                out |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                out.add(node.module)
        return out

    assert "token_bytes" in imported("prepare_fineweb_edu")
    for name in ("token_bytes", "tokenizer_spec"):
        assert "prepare_fineweb_edu" not in imported(name), name
