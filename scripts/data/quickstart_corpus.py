#!/usr/bin/env python3
"""Writes the quick start's real-text corpus as two text files (train, val).

Real text that is available offline: the FineWeb-Edu sample in ../shared/data
(100 web documents, the paper's training distribution) when it is present,
otherwise the licence texts every Debian system ships in /usr/share/common-licenses
(English legal prose written by people). Bytes become tokens (vocabulary 256),
so no tokenizer is needed.
"""
import argparse
import csv
import pathlib
import sys

FINEWEB = pathlib.Path(__file__).resolve().parents[3] / "shared" / "data" / "text" / \
    "fineweb_edu_sample10BT.rows000-099.csv"
LICENSES = pathlib.Path("/usr/share/common-licenses")


def corpus_text():
    if FINEWEB.exists():
        csv.field_size_limit(sys.maxsize)
        with FINEWEB.open(newline="", encoding="utf-8") as f:
            docs = [row["text"] for row in csv.DictReader(f)]
        return "\n\n".join(docs), f"FineWeb-Edu sample ({len(docs)} documents, {FINEWEB})"
    files = sorted(p for p in LICENSES.iterdir() if p.is_file())
    if not files:
        sys.exit("quickstart_corpus: neither ../shared/data nor /usr/share/common-licenses is available")
    docs = [p.read_text(encoding="utf-8", errors="replace") for p in files]
    return "\n\n".join(docs), f"Debian licence texts ({len(docs)} files, {LICENSES})"


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True, help="directory for train.txt and val.txt")
    parser.add_argument("--val-bytes", type=int, default=40000)
    args = parser.parse_args()
    text, source = corpus_text()
    data = text.encode("utf-8")
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "val.txt").write_bytes(data[: args.val_bytes])
    (out / "train.txt").write_bytes(data[args.val_bytes:])
    print(f"corpus: {source}: {len(data)} bytes ({args.val_bytes} held out for validation)")


if __name__ == "__main__":
    main()
