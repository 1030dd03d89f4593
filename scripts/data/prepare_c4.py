#!/usr/bin/env python3
"""C4 JSON lines ({text, url, timestamp}, optionally .gz) -> validation shards.

The same pipeline as prepare_fineweb_edu.py (same tokenizer handling, separator
and manifest) with every token written to `c4_val_NNNNNN.bin` shards, for
perplexity evaluation:

    scripts/data/prepare_c4.py --tokenizer TOKENIZER --input c4_validation.jsonl --out DIR
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from prepare_fineweb_edu import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(defaults={"split": "val", "prefix": "c4", "format": "jsonl"},
                  description=__doc__.split("\n\n")[0]))
