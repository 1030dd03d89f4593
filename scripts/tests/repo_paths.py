"""Where the Python tests find the repository, ../shared/data and the kdtrain binary,
and whether optional modules are installed (for their skip conditions).

The build: $KDTRAIN_BUILD_DIR (scripts/test.sh sets it, relative to the repository as
`build`), else build/; always an absolute path, since a test may hand it to a process that
runs elsewhere or link to it from a temporary folder. The binary: $KDTRAIN_BINARY, else
BUILD/kdtrain.
"""
import importlib.util
import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared" / "data"
BUILD = (REPO / os.environ.get("KDTRAIN_BUILD_DIR", "build")).resolve()
KDTRAIN = Path(os.environ.get("KDTRAIN_BINARY", BUILD / "kdtrain")).resolve()
KDTRAIN_TESTS = BUILD / "kdtrain_tests"


def have(*modules):
    """True when every module can be imported."""
    return all(importlib.util.find_spec(m) is not None for m in modules)
