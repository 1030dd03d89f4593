"""Where the Python tests find the repository, ../shared/data and the kdtrain binary,
and whether optional modules are installed (for their skip conditions).

The binary: $KDTRAIN_BINARY, else <$KDTRAIN_BUILD_DIR or build>/kdtrain (scripts/test.sh
sets KDTRAIN_BUILD_DIR).
"""
import importlib.util
import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared" / "data"
KDTRAIN = Path(os.environ.get("KDTRAIN_BINARY", REPO / os.environ.get("KDTRAIN_BUILD_DIR", "build") / "kdtrain"))


def have(*modules):
    """True when every module can be imported."""
    return all(importlib.util.find_spec(m) is not None for m in modules)
