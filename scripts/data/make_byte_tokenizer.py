#!/usr/bin/env python3
"""Writes a 256-token byte-level Hugging Face tokenizer whose ids are byte values.

    scripts/data/make_byte_tokenizer.py --out DIR

kdtrain's byte corpora (`kdtrain data write --bytes`, or prepare_fineweb_edu.py
with this tokenizer) use token id = byte value, vocabulary 256. To score such a
model with transformers / lm-eval the export needs a tokenizer that maps text
to exactly those ids. This one is a BPE model with no merges whose vocabulary is
the 256 characters of the GPT-2 byte-to-unicode alphabet, each given the id of
the byte it stands for, behind a ByteLevel pre-tokenizer (no regex split, no
prefix space) and a ByteLevel decoder:

    encode(text).ids == list(text.encode("utf-8"))     for every str
    decode(ids)      == bytes(ids).decode("utf-8")     for valid UTF-8

No added or special tokens (an id >= 256 would not fit the model). The newline
byte (10) doubles as eos / pad token for lm-eval, and is the document separator
the small study writes after each document (scripts/small_study.sh).

DIR receives tokenizer.json, tokenizer_config.json and special_tokens_map.json.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

NEWLINE = 10


def byte_alphabet() -> dict[int, str]:
    """byte value -> the printable character ByteLevel uses for it (GPT-2's table:
    printable Latin-1 bytes stand for themselves, the others are shifted up to 256+)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + \
        list(range(0xAE, 0xFF + 1))
    table = {b: chr(b) for b in keep}
    shift = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + shift)
            shift += 1
    return table


def build_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = byte_alphabet()
    vocab = {ch: b for b, ch in alphabet.items()}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], fuse_unk=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    # The library's own alphabet must be the one used for the ids.
    if sorted(pre_tokenizers.ByteLevel.alphabet()) != sorted(alphabet.values()):
        raise SystemExit("make_byte_tokenizer: ByteLevel alphabet differs from the byte table")
    return tok, alphabet


def write(out: Path) -> Path:
    tok, alphabet = build_tokenizer()
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    eos = alphabet[NEWLINE]
    special = {"eos_token": eos, "pad_token": eos}
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 1 << 20,
              "clean_up_tokenization_spaces": False, "add_bos_token": False,
              "add_eos_token": False, **special}
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    (out / "special_tokens_map.json").write_text(json.dumps(special, indent=2) + "\n")
    # Self-check on a string with every kind of character.
    sample = "Hello, world!\n\tÜber 日本語 🙂 \x00\x7f end "
    ids = tok.encode(sample, add_special_tokens=False).ids
    if ids != list(sample.encode("utf-8")):
        raise SystemExit("make_byte_tokenizer: round-trip check failed")
    if tok.decode(ids) != sample:
        raise SystemExit("make_byte_tokenizer: decode check failed")
    return out / "tokenizer.json"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, type=Path, help="output directory")
    args = p.parse_args(argv)
    path = write(args.out)
    print(f"byte tokenizer: {path} (256 tokens, id = byte value, eos/pad = newline)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
