#!/usr/bin/env python3
"""Bytes of text per token id: the denominator of bits per byte.

    python3 scripts/data/token_bytes.py --tokenizer TOKENIZER --out DIR/token_bytes.json

`kdtrain eval` reports bits per byte when the shards' directory holds
`token_bytes.json` (prepare_fineweb_edu.py / prepare_c4.py write it next to the
manifest; this command writes it for shards prepared before that existed):

    bits_per_byte = sum of the scored tokens' CE (nats) / ln 2 / sum of their byte lengths

A token's byte length is the number of UTF-8 bytes of text it stands for. For the
byte-level BPE tokenizers kdtrain uses (Llama-3, Qwen2, the byte tokenizer of
make_byte_tokenizer.py) every character of a vocabulary entry is one byte of the
ByteLevel alphabet, so the length is the character count; a special token (the
document separator, <|begin_of_text|>, <|endoftext|>) stands for no text and
counts 0 bytes; a non-special added token counts the UTF-8 bytes of its content.
The sum over a document's tokens is then exactly its UTF-8 length when the
tokenizer has no normalizer (Llama-3, the byte tokenizer); Qwen2's NFC
normalizer can change the bytes of text that is not already NFC.
Other tokenizer kinds (SentencePiece Metaspace) are refused.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_byte_tokenizer import byte_alphabet  # noqa: E402
from tokenizer_spec import (PrepareError, load_tokenizer, tokenizer_sha256,  # noqa: E402
                            vocab_size_of, write_atomic)

FORMAT = "kdtrain.token_bytes/1"


class TokenBytesError(Exception):
    """The tokenizer is not one whose tokens map to bytes this way."""


def _component_types(node) -> set[str]:
    """Types of a tokenizer.json component and of everything nested in a Sequence."""
    if not isinstance(node, dict):
        return set()
    types = {node.get("type", "")}
    for key in ("decoders", "pretokenizers"):
        for child in node.get(key) or []:
            types |= _component_types(child)
    return types


def token_byte_lengths(tok, vocab_size: int) -> list[int]:
    """UTF-8 bytes per id 0..vocab_size-1 of a tokenizers.Tokenizer (ids it lacks: 0)."""
    spec = json.loads(tok.to_str())
    if "ByteLevel" not in _component_types(spec.get("decoder")):
        raise TokenBytesError("only byte-level BPE tokenizers (decoder ByteLevel) are supported; "
                              f"this one decodes with {sorted(_component_types(spec.get('decoder')))}")
    alphabet = set(byte_alphabet().values())
    added = {a["id"]: a for a in spec.get("added_tokens", [])}
    lengths = [0] * vocab_size
    for token, i in tok.get_vocab(with_added_tokens=True).items():
        if i >= vocab_size:
            raise TokenBytesError(f"token id {i} ({token!r}) is outside the vocabulary of {vocab_size}")
        if i in added:
            lengths[i] = 0 if added[i].get("special") else len(added[i]["content"].encode("utf-8"))
            continue
        outside = [c for c in token if c not in alphabet]
        if outside:
            raise TokenBytesError(f"token {i} ({token!r}) has characters outside the ByteLevel "
                                  f"alphabet: {outside[:3]}")
        lengths[i] = len(token)
    return lengths


def token_bytes_document(tok, vocab_size: int, tokenizer_sha256: str) -> dict:
    lengths = token_byte_lengths(tok, vocab_size)
    digest = hashlib.sha256(json.dumps(lengths).encode()).hexdigest()
    return {"format": FORMAT, "tokenizer_sha256": tokenizer_sha256, "vocab_size": vocab_size,
            "lengths_sha256": digest, "bytes": lengths}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokenizer", required=True, help="tokenizer.json or a directory with it")
    p.add_argument("--out", required=True, help="output file, e.g. DIR/token_bytes.json")
    a = p.parse_args(argv)
    try:
        tok = load_tokenizer(a.tokenizer)
        doc = token_bytes_document(tok, vocab_size_of(tok), tokenizer_sha256(a.tokenizer)[0])
    except (PrepareError, TokenBytesError) as e:
        print(f"token_bytes: error: {a.tokenizer}: {e}", file=sys.stderr)
        return 1
    write_atomic(a.out, [json.dumps(doc).encode() + b"\n"])
    print(f"token_bytes: {len(doc['bytes'])} ids -> {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
