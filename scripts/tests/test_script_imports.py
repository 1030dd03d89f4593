"""Each script in a scripts/ drawer runs as `python3 scripts/DRAWER/NAME.py`, with only its
own folder on the path (pytest.ini puts every drawer there, which hides a missing one). A
script that needs kdtrain_hf, which sits in scripts/, must put scripts/ on the path itself;
imported as a script would be, from another folder and with no PYTHONPATH, kdtrain_hf is
then importable. run_zero_shot.py once imported it late, inside a function, and the paper
tables failed only when zero-shot ran."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from repo_paths import REPO

SCRIPTS = REPO / "scripts"
NEEDS_KDTRAIN_HF = sorted(p for p in SCRIPTS.glob("*/*.py")
                          if p.parent.name not in ("tests", "kdtrain_hf") and "kdtrain_hf" in p.read_text())


def test_some_drawer_script_needs_kdtrain_hf():
    assert len(NEEDS_KDTRAIN_HF) >= 3  # the glob finds the drawers' scripts


@pytest.mark.parametrize("script", NEEDS_KDTRAIN_HF, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_drawer_script_finds_kdtrain_hf_by_itself(script, tmp_path):
    check = ("import importlib.util, sys; sys.path.insert(0, sys.argv[1]); "
             f"import {script.stem}; "
             "sys.exit(0 if importlib.util.find_spec('kdtrain_hf') else 3)")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    p = subprocess.run([sys.executable, "-c", check, str(script.parent)], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120)
    if p.returncode != 0 and "No module named" in p.stderr and "kdtrain_hf" not in p.stderr:
        pytest.skip(f"{script.name} needs a package this machine lacks: {p.stderr.strip().splitlines()[-1]}")
    assert p.returncode == 0, f"{script}: kdtrain_hf is not on the path once it is imported\n{p.stderr}"
