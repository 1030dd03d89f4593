"""A tokenizer spec, as the data scripts take it: a tokenizer.json (or a
directory holding one), or a Qwen2 directory of vocab.json + merges.txt. Its
files, their sha256 (recorded in manifests), the loaded tokenizer and its
vocabulary size; and the atomic file write the scripts share.

prepare_fineweb_edu.py (shards) and token_bytes.py (bytes per token) both read
tokenizers through this module, so neither imports the other's command.
"""
from __future__ import annotations

import hashlib
import json
import os


# Qwen2's pre-tokenizer split (the same expression Qwen ships in tokenizer.json),
# used only when a directory has the slow-tokenizer files vocab.json + merges.txt.
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
               r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


class PrepareError(Exception):
    """A user-facing error (bad input, bad flags)."""


# ---------------------------------------------------------------- tokenizer

def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def tokenizer_sha256(spec: str) -> tuple[str, dict[str, str]]:
    """(combined sha256, {file name: sha256}) of a tokenizer spec's files."""
    files = tokenizer_files(spec)
    hashes = {os.path.basename(f): sha256_file(f) for f in files}
    combined = (next(iter(hashes.values())) if len(hashes) == 1 else
                hashlib.sha256("".join(f"{k}:{v}\n" for k, v in sorted(hashes.items()))
                               .encode()).hexdigest())
    return combined, hashes


def tokenizer_files(spec: str) -> list[str]:
    """The files a tokenizer spec stands for (hashed into the manifest)."""
    if os.path.isfile(spec):
        return [spec]
    if not os.path.isdir(spec):
        raise PrepareError(f"--tokenizer {spec}: no such file or directory")
    single = os.path.join(spec, "tokenizer.json")
    if os.path.isfile(single):
        return [single]
    pair = [os.path.join(spec, "vocab.json"), os.path.join(spec, "merges.txt")]
    if all(os.path.isfile(p) for p in pair):
        extra = [os.path.join(spec, "added_tokens.json")]
        return pair + [p for p in extra if os.path.isfile(p)]
    raise PrepareError(f"--tokenizer {spec}: directory has neither tokenizer.json nor "
                       "vocab.json + merges.txt")


def load_tokenizer(spec: str):
    """A tokenizers.Tokenizer from tokenizer.json, or from a Qwen2 vocab.json +
    merges.txt directory (built as Hugging Face converts Qwen2Tokenizer)."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

    files = tokenizer_files(spec)
    if files[0].endswith("tokenizer.json"):
        tok = Tokenizer.from_file(files[0])
    else:
        config_path = os.path.join(spec, "tokenizer_config.json")
        cls = ""
        if os.path.isfile(config_path):
            with open(config_path, encoding="utf-8") as f:
                cls = json.load(f).get("tokenizer_class", "")
        if cls not in ("Qwen2Tokenizer", "Qwen2TokenizerFast"):
            raise PrepareError(f"--tokenizer {spec}: vocab.json + merges.txt is supported for "
                               f"Qwen2Tokenizer only (tokenizer_class is '{cls or 'missing'}'); "
                               "pass a tokenizer.json instead")
        model = models.BPE.from_file(files[0], files[1], unk_token=None)
        tok = Tokenizer(model)
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
        tok.decoder = decoders.ByteLevel()
        added_path = os.path.join(spec, "added_tokens.json")
        if os.path.isfile(added_path):
            with open(added_path, encoding="utf-8") as f:
                added = json.load(f)
            from tokenizers import AddedToken
            for content, _id in sorted(added.items(), key=lambda kv: kv[1]):
                tok.add_special_tokens([AddedToken(content, special=True, normalized=False)])
            for content, want in added.items():
                got = tok.token_to_id(content)
                if got != want:
                    raise PrepareError(f"{added_path}: {content} got id {got}, expected {want}")
    # Text that happens to contain "<|endoftext|>" must not become the separator.
    tok.encode_special_tokens = True
    return tok


def vocab_size_of(tok) -> int:
    """Number of ids including added tokens (max id + 1)."""
    vocab = tok.get_vocab(with_added_tokens=True)
    return max(tok.get_vocab_size(with_added_tokens=True), max(vocab.values()) + 1)


def write_atomic(path: str, chunks) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    dfd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
