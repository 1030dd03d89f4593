#!/usr/bin/env python3
"""Tokenize FineWeb-Edu (or any web text) into llm.c token shards for kdtrain.

    scripts/data/prepare_fineweb_edu.py --tokenizer TOKENIZER_JSON_OR_DIR \
        --input FILE [FILE ...] --out DIR [--val-tokens N] [--shard-tokens N] \
        [--max-tokens N] [--text-field text] [--workers N] [--split train+val|val]

Inputs are streamed: parquet in record batches (pyarrow), JSON lines (optionally
.gz), CSV (optionally .gz). Documents are tokenized in parallel and joined with
one separator token per document (docs/data.md):

  * Llama-3 tokenizers: `<|begin_of_text|>` (128000) BEFORE every document, as
    Meta's reference code and llm.c do; Llama-3 has no end-of-document token
    in pretraining (`<|end_of_text|>` / `<|eot_id|>` belong to generation).
  * Qwen tokenizers: `<|endoftext|>` (151643) AFTER every document, Qwen's
    pretraining document separator.

`--separator TOKEN [--separator-position before|after]` overrides the choice.
Special-token strings inside the text are tokenized as plain text, so only the
separator the script inserts can produce the separator id.

Output: shard 0 `<prefix>_val_000000.bin` holds the first --val-tokens tokens,
then `<prefix>_train_000001.bin`, ... hold --shard-tokens tokens each (the last
may be shorter); documents run across shard boundaries as in llm.c. Shards are
llm.c files: uint16 (magic 20240520, version 1) when every id fits, else uint32
(magic 20240801, version 7). `manifest.json` records counts, the tokenizer's
sha256, the vocabulary size and the command line. Every file is written to a
temporary name, fsynced and renamed, and the manifest is written last.

`--split val` writes every token into validation shards (C4 perplexity sets;
scripts/data/prepare_c4.py is this script with that default).
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import json
import multiprocessing as mp
import os
import re
import sys
import time
from collections import deque
from typing import Iterator

import numpy as np

from token_bytes import TokenBytesError, token_bytes_document
from tokenizer_spec import (PrepareError, load_tokenizer, tokenizer_sha256,
                            vocab_size_of, write_atomic)

TOKEN_BYTES_FILE = "token_bytes.json"

SHARD_HEADER_INTS = 256
MAGIC_U16, VERSION_U16 = 20240520, 1
MAGIC_U32, VERSION_U32 = 20240801, 7
MANIFEST_FORMAT = "kdtrain.token_shards/1"

def choose_separator(tok, spec: str, token: str | None, position: str | None):
    """(token, id, position) of the document separator."""
    if token is None:
        if tok.token_to_id("<|begin_of_text|>") is not None:
            token, default_position = "<|begin_of_text|>", "before"  # Llama-3
        elif tok.token_to_id("<|endoftext|>") is not None:
            token, default_position = "<|endoftext|>", "after"  # Qwen, GPT-2
        else:
            raise PrepareError(f"--tokenizer {spec}: cannot tell the document separator (no "
                               "<|begin_of_text|> or <|endoftext|>); pass --separator TOKEN")
    else:
        default_position = "after"
    tid = tok.token_to_id(token)
    if tid is None:
        raise PrepareError(f"--separator {token}: not a token of {spec}")
    return token, tid, position or default_position


# ---------------------------------------------------------------- inputs

def detect_format(path: str) -> str:
    name = path.lower()
    if name.endswith(".gz"):
        name = name[:-3]
    for ext, fmt in ((".parquet", "parquet"), (".jsonl", "jsonl"), (".json", "jsonl"),
                     (".csv", "csv")):
        if name.endswith(ext):
            return fmt
    raise PrepareError(f"{path}: unknown input type (expected .parquet, .jsonl[.gz], "
                       ".json[.gz] or .csv[.gz]); pass --format")


def open_binary(path: str):
    raw = open(path, "rb")
    if path.lower().endswith(".gz"):
        return raw, gzip.GzipFile(fileobj=raw, mode="rb")
    return raw, raw


def iter_documents(path: str, fmt: str, field: str, progress) -> Iterator[str]:
    """Yields the text of every document of one input file, in order."""
    if fmt == "parquet":
        import pyarrow.parquet as pq
        pf = pq.ParquetFile(path)
        if field not in pf.schema_arrow.names:
            raise PrepareError(f"{path}: no column '{field}' (columns: "
                               f"{', '.join(pf.schema_arrow.names)}); pass --text-field")
        rows = max(1, pf.metadata.num_rows)
        size = os.path.getsize(path)
        done = 0
        for batch in pf.iter_batches(batch_size=1024, columns=[field]):
            for text in batch.column(0).to_pylist():
                yield text if text is not None else ""
            done += batch.num_rows
            progress.set_file_bytes(size * done // rows)
        return
    raw, stream = open_binary(path)
    with raw:
        if fmt == "jsonl":
            for lineno, line in enumerate(stream, 1):
                if not line.strip():
                    continue
                try:
                    doc = json.loads(line)
                except json.JSONDecodeError as e:
                    raise PrepareError(f"{path}:{lineno}: not valid JSON ({e})") from None
                if not isinstance(doc, dict) or field not in doc:
                    raise PrepareError(f"{path}:{lineno}: no field '{field}'; pass --text-field")
                progress.set_file_bytes(raw.tell())
                yield doc[field] or ""
        else:  # csv
            csv.field_size_limit(1 << 30)
            text = io.TextIOWrapper(stream, encoding="utf-8", newline="")
            reader = csv.reader(text)
            header = next(reader, None)
            if header is None:
                return
            if field not in header:
                raise PrepareError(f"{path}: no column '{field}' (columns: {', '.join(header)}); "
                                   "pass --text-field")
            col = header.index(field)
            for row in reader:
                if len(row) <= col:
                    raise PrepareError(f"{path}: row {reader.line_num} has {len(row)} fields")
                progress.set_file_bytes(raw.tell())
                yield row[col]


def iter_batches(paths, fmt, field, progress, docs_per_batch=256, chars_per_batch=1 << 20):
    batch, chars = [], 0
    for path in paths:
        progress.start_file(path)
        for text in iter_documents(path, fmt or detect_format(path), field, progress):
            batch.append(text)
            chars += len(text)
            if len(batch) >= docs_per_batch or chars >= chars_per_batch:
                yield batch
                batch, chars = [], 0
        progress.end_file()
    if batch:
        yield batch


# ---------------------------------------------------------------- tokenization

_worker = {}


def _init_worker(spec, sep_id, position):
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one process = one core
    _worker["tok"] = load_tokenizer(spec)
    _worker["sep"] = (sep_id, position)


def encode_batch(tok, texts, sep_id, position):
    r"""(tokens uint32, documents, skipped empty documents, UTF-8 bytes of the documents,
    their words as lm-eval counts them: len(re.split(r"\s+", doc))) for a batch of texts."""
    keep = [t for t in texts if t]
    parts = []
    for enc in tok.encode_batch_fast(keep, add_special_tokens=False):
        ids = np.asarray(enc.ids, dtype=np.uint32)
        sep = np.array([sep_id], dtype=np.uint32)
        parts.extend((sep, ids) if position == "before" else (ids, sep))
    tokens = np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint32)
    return (tokens, len(keep), len(texts) - len(keep), sum(len(t.encode("utf-8")) for t in keep),
            sum(len(re.split(r"\s+", t)) for t in keep))


def _encode_in_worker(texts):
    sep_id, position = _worker["sep"]
    return encode_batch(_worker["tok"], texts, sep_id, position)


def encoded_batches(batches, args, tok, sep_id, position):
    """Encoded batches in input order. workers == 0: in-process, with the
    tokenizers library's own thread pool; else a pool of single-threaded
    processes with a bounded number of batches in flight."""
    if args.workers == 0:
        for texts in batches:
            yield encode_batch(tok, texts, sep_id, position)
        return
    ctx = mp.get_context("fork" if sys.platform.startswith("linux") else "spawn")
    with ctx.Pool(args.workers, initializer=_init_worker,
                  initargs=(args.tokenizer, sep_id, position)) as pool:
        pending = deque()
        for texts in batches:
            pending.append(pool.apply_async(_encode_in_worker, (texts,)))
            if len(pending) >= 2 * args.workers:
                yield pending.popleft().get()
        while pending:
            yield pending.popleft().get()


# ---------------------------------------------------------------- output

def write_shard(path: str, tokens: np.ndarray, wide: bool) -> int:
    """Writes an llm.c shard; returns its size in bytes."""
    if len(tokens) > 0x7FFFFFFF:
        raise PrepareError(f"{path}: {len(tokens)} tokens exceed the int32 header count")
    header = np.zeros(SHARD_HEADER_INTS, dtype="<i4")
    header[0], header[1] = (MAGIC_U32, VERSION_U32) if wide else (MAGIC_U16, VERSION_U16)
    header[2] = len(tokens)
    body = tokens.astype("<u4" if wide else "<u2")
    write_atomic(path, [header.tobytes(), body.tobytes()])
    return header.nbytes + body.nbytes


class ShardWriter:
    """Cuts the token stream into the validation shard(s) and train shards."""

    def __init__(self, out, prefix, wide, sep_id, val_tokens, shard_tokens, all_val):
        self.out, self.prefix, self.wide, self.sep_id = out, prefix, wide, sep_id
        self.val_tokens, self.shard_tokens, self.all_val = val_tokens, shard_tokens, all_val
        self.buffer = np.zeros(0, dtype=np.uint32)
        self.shards = []
        self.written = 0

    def _target(self) -> tuple[str, int]:
        """(split, size) of the next shard to fill."""
        if self.all_val:
            return "val", self.shard_tokens
        if not self.shards and self.val_tokens > 0:
            return "val", self.val_tokens
        return "train", self.shard_tokens

    def add(self, tokens: np.ndarray) -> None:
        self.buffer = np.concatenate([self.buffer, tokens]) if len(self.buffer) else tokens
        while True:
            split, size = self._target()
            if len(self.buffer) < size:
                break
            self._flush(split, self.buffer[:size])
            self.buffer = self.buffer[size:]

    def finish(self) -> None:
        if len(self.buffer):
            split, _ = self._target()
            self._flush(split, self.buffer)
            self.buffer = np.zeros(0, dtype=np.uint32)

    def _flush(self, split: str, tokens: np.ndarray) -> None:
        name = f"{self.prefix}_{split}_{len(self.shards):06d}.bin"
        nbytes = write_shard(os.path.join(self.out, name), tokens, self.wide)
        self.shards.append({"file": name, "split": split, "tokens": int(len(tokens)),
                            "bytes": nbytes,
                            "separators": int(np.count_nonzero(tokens == self.sep_id))})
        self.written += len(tokens)


class Progress:
    """Plain stderr progress lines (no tqdm): at most one every `interval` s."""

    def __init__(self, paths, interval=2.0, stream=sys.stderr, quiet=False):
        self.total = sum(os.path.getsize(p) for p in paths) or 1
        self.done_files = 0
        self.file_bytes = 0
        self.interval, self.stream, self.quiet = interval, stream, quiet
        self.start = self.last = time.monotonic()
        self.docs = self.tokens = 0
        self.file = ""

    def start_file(self, path):
        self.file, self.file_bytes = path, 0

    def set_file_bytes(self, n):
        self.file_bytes = n

    def end_file(self):
        self.done_files += os.path.getsize(self.file)
        self.file_bytes = 0

    def update(self, docs, tokens, force=False):
        self.docs, self.tokens = self.docs + docs, self.tokens + tokens
        now = time.monotonic()
        if self.quiet or (not force and now - self.last < self.interval):
            return
        self.last = now
        elapsed = max(now - self.start, 1e-9)
        frac = min(1.0, (self.done_files + self.file_bytes) / self.total)
        eta = elapsed * (1 - frac) / frac if frac > 0 else float("nan")
        print(f"[prepare] {100 * frac:5.1f}% input  {self.docs:,} docs  {self.tokens:,} tokens  "
              f"{self.tokens / elapsed:,.0f} tok/s  {elapsed:.0f}s elapsed  eta {eta:.0f}s",
              file=self.stream, flush=True)


# ---------------------------------------------------------------- main

class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """--help keeps the description's line breaks and shows every default value."""

    # What an option left at None means.
    UNSET = {"format": "from each file's extension", "separator": "from the tokenizer",
             "separator_position": "from the tokenizer"}

    def _get_help_string(self, action):
        text = action.help or ""
        if action.required or action.default is argparse.SUPPRESS or action.default is False:
            return text
        if action.default is None:
            return text + (f" (default: {self.UNSET[action.dest]})" if action.dest in self.UNSET else "")
        return text + f" (default: {action.default})"


def parse_args(argv, defaults=None, description=None):
    p = argparse.ArgumentParser(description=description or __doc__.split("\n\n")[0],
                                formatter_class=HelpFormatter)
    p.add_argument("--tokenizer", required=True, help="tokenizer.json, or a directory with it "
                   "(or with Qwen2's vocab.json + merges.txt)")
    p.add_argument("--input", required=True, nargs="+", help="parquet / jsonl[.gz] / csv[.gz] files")
    p.add_argument("--out", required=True, help="output directory (created)")
    p.add_argument("--prefix", default="fineweb_edu", help="shard file name prefix")
    p.add_argument("--split", choices=["train+val", "val"], default="train+val",
                   help="val: every token goes to validation shards (C4 perplexity sets)")
    p.add_argument("--val-tokens", type=int, default=10_000_000,
                   help="tokens in shard 0, the validation shard (0: none); the run is refused "
                   "when they would leave no training token, and warned when the training "
                   "split comes out smaller than the validation one")
    p.add_argument("--shard-tokens", type=int, default=100_000_000, help="tokens per shard")
    p.add_argument("--max-tokens", type=int, default=0, help="stop after this many tokens (0: all)")
    p.add_argument("--text-field", default="text", help="column / key holding the document text")
    p.add_argument("--format", choices=["parquet", "jsonl", "csv"],
                   help="input type")
    p.add_argument("--separator", help="separator token")
    p.add_argument("--separator-position", choices=["before", "after"],
                   help="put the separator before or after each document")
    p.add_argument("--workers", type=int, default=0, help="tokenizer processes; 0: in-process "
                   "batch encoding on the tokenizers library's own threads")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    if defaults:
        p.set_defaults(**defaults)
    args = p.parse_args(argv)
    if args.shard_tokens <= 0:
        p.error("--shard-tokens must be positive")
    if args.val_tokens < 0 or args.max_tokens < 0 or args.workers < 0:
        p.error("--val-tokens, --max-tokens and --workers must not be negative")
    return args


def check_split_sizes(args, writer) -> None:
    """Refuses output with no token, or (train+val) with no training token, and
    removes what this run wrote: --val-tokens' default (10M) swallows a small
    corpus whole. Warns when the training split is smaller than the validation one."""
    val = sum(s["tokens"] for s in writer.shards if s["split"] == "val")
    train = writer.written - val
    problem = None
    if writer.written == 0:
        problem = (f"the input holds no text: no non-empty document in field '{args.text_field}' "
                   f"of {', '.join(args.input)}")
    elif args.split == "train+val" and train == 0:
        suggestion = max(1, writer.written // 100)
        problem = (f"no training tokens: the corpus has {writer.written:,} tokens and --val-tokens "
                   f"({args.val_tokens:,}) took them all for validation; pass a smaller --val-tokens, "
                   f"e.g. --val-tokens {suggestion} (1%)")
    if problem:
        for shard in writer.shards:
            path = os.path.join(args.out, shard["file"])
            if os.path.exists(path):
                os.unlink(path)
        raise PrepareError(problem + "; nothing was written")
    if args.split == "train+val" and train < val:
        print(f"prepare_fineweb_edu: warning: the training split ({train:,} tokens) is smaller than "
              f"the validation split ({val:,}); --val-tokens {args.val_tokens:,} is large for a "
              f"corpus of {writer.written:,} tokens (try --val-tokens {max(1, writer.written // 100)})",
              file=sys.stderr)


def run(args, argv) -> dict:
    for path in args.input:
        if not os.path.isfile(path):
            raise PrepareError(f"--input {path}: no such file")
    tok = load_tokenizer(args.tokenizer)
    sep_token, sep_id, position = choose_separator(tok, args.tokenizer, args.separator,
                                                   args.separator_position)
    vocab = vocab_size_of(tok)
    wide = vocab > 65536
    os.makedirs(args.out, exist_ok=True)
    manifest_path = os.path.join(args.out, "manifest.json")
    existing = [f for f in os.listdir(args.out)
                if f == "manifest.json" or (f.startswith(args.prefix + "_") and f.endswith(".bin"))]
    if existing and not args.overwrite:
        raise PrepareError(f"--out {args.out}: already holds {', '.join(sorted(existing)[:3])}"
                           f"{' ...' if len(existing) > 3 else ''}; pass --overwrite")
    for stale in (manifest_path, os.path.join(args.out, TOKEN_BYTES_FILE)):
        if os.path.exists(stale):
            os.unlink(stale)  # a manifest present always describes complete output

    combined, hashes = tokenizer_sha256(args.tokenizer)

    progress = Progress(args.input, quiet=args.quiet)
    writer = ShardWriter(args.out, args.prefix, wide, sep_id, args.val_tokens,
                         args.shard_tokens, args.split == "val")
    documents = skipped = text_bytes = words = 0
    started = time.monotonic()
    batches = iter_batches(args.input, args.format, args.text_field, progress)
    encoded = encoded_batches(batches, args, tok, sep_id, position)
    added = 0
    for tokens, docs, empty, nbytes, nwords in encoded:
        room = args.max_tokens - added if args.max_tokens else None
        stop = room is not None and len(tokens) >= room
        if stop:
            tokens = tokens[:room]
        writer.add(tokens)
        added += len(tokens)
        documents += docs
        skipped += empty
        text_bytes, words = text_bytes + nbytes, words + nwords
        progress.update(docs, len(tokens))
        if stop:
            break
    encoded.close()  # stops the worker pool when --max-tokens ended the stream early
    writer.finish()
    seconds = time.monotonic() - started
    check_split_sizes(args, writer)

    keep = {s["file"] for s in writer.shards}
    for f in existing:  # --overwrite: drop shards of an earlier, longer run
        if f != "manifest.json" and f not in keep:
            os.unlink(os.path.join(args.out, f))

    # Bytes per token id for bits per byte (`kdtrain eval`, scripts/data/token_bytes.py).
    try:
        table = token_bytes_document(tok, vocab, combined)
        write_atomic(os.path.join(args.out, TOKEN_BYTES_FILE),
                     [json.dumps(table).encode() + b"\n"])
        token_bytes = TOKEN_BYTES_FILE
    except TokenBytesError as e:
        token_bytes = None
        print(f"[prepare] no {TOKEN_BYTES_FILE} (no bits per byte): {e}", file=sys.stderr)

    manifest = {
        "format": MANIFEST_FORMAT,
        "tokenizer": {"path": os.path.abspath(args.tokenizer), "sha256": combined,
                      "files": hashes},
        "vocab_size": vocab,
        "separator": {"token": sep_token, "id": sep_id, "position": position},
        "dtype": "uint32" if wide else "uint16",
        "shard_version": VERSION_U32 if wide else VERSION_U16,
        "documents": documents,
        "empty_documents_skipped": skipped,
        "stopped_at_max_tokens": bool(args.max_tokens and added >= args.max_tokens),
        "tokens": writer.written,
        "text_bytes": text_bytes,
        "words": words,
        "token_bytes": token_bytes,
        "val_tokens": sum(s["tokens"] for s in writer.shards if s["split"] == "val"),
        "train_tokens": sum(s["tokens"] for s in writer.shards if s["split"] == "train"),
        "shards": writer.shards,
        "inputs": [os.path.abspath(p) for p in args.input],
        "text_field": args.text_field,
        "command": [os.path.basename(sys.argv[0])] + list(argv),
        "seconds": round(seconds, 3),
        "tokens_per_second": round(writer.written / seconds) if seconds > 0 else None,
    }
    write_atomic(manifest_path, [json.dumps(manifest, indent=2).encode() + b"\n"])
    if not args.quiet:
        print(f"[prepare] wrote {len(writer.shards)} shards, {writer.written:,} tokens from "
              f"{documents:,} documents to {args.out} in {seconds:.1f}s", file=sys.stderr)
    return manifest


def main(argv=None, defaults=None, description=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv, defaults, description)
    try:
        run(args, argv)
    except PrepareError as e:
        print(f"prepare_fineweb_edu: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
