"""The attention variant table reaches Python from one place: scripts/kdtrain_hf/variants.py
must equal the C++ table (config/attention_variant.h) as `kdtrain info --variants --json`
prints it, and every script that names variants reads that module."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
from repo_paths import KDTRAIN  # noqa: E402

sys.path.insert(0, str(ROOT / "scripts"))
from kdtrain_hf import variants  # noqa: E402


def test_variants_py_equals_the_cpp_table():
    if not KDTRAIN.exists():
        pytest.skip(f"{KDTRAIN} not built")
    out = subprocess.run([str(KDTRAIN), "info", "--variants", "--json"], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    table = json.loads(out)
    assert [row["name"] for row in table] == list(variants.ATTENTION_VARIANTS)
    for row in table:
        f = variants.features(row["name"])
        assert (f.sink, f.affine, f.gate) == (row["sink"], row["affine"], row["gate"]), row["name"]


def check_choices_equal_cpp(key, choices):
    """`kdtrain config --list` prints key with choices[0] as its default and accepts exactly
    choices, in order."""
    if not KDTRAIN.exists():
        pytest.skip(f"{KDTRAIN} not built")
    out = subprocess.run([str(KDTRAIN), "config", "--list"], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    line = next(l for l in out.splitlines() if l.startswith(key))
    assert f'"{choices[0]}"' in line
    assert line.endswith("accepts " + ", ".join(choices))


def test_affine_bias_divisors_equal_the_cpp_choices():
    """variants.py's divisors and their order (the first is the default) as `kdtrain config
    --list` prints attention.affine_bias_divisor."""
    check_choices_equal_cpp("attention.affine_bias_divisor", variants.AFFINE_BIAS_DIVISORS)
    assert variants.AFFINE_BIAS_DIVISOR_BEFORE_KEY in variants.AFFINE_BIAS_DIVISORS


def test_affine_inference_ns_equal_the_cpp_choices():
    """variants.py's inference N choices and their order (the first is the default) as
    `kdtrain config --list` prints attention.affine_inference_n."""
    check_choices_equal_cpp("attention.affine_inference_n", variants.AFFINE_INFERENCE_NS)


def test_affine_fixed_n_only_for_sequence_with_a_length():
    assert variants.affine_fixed_n("sequence", "train_length", 2048) == 2048
    assert variants.affine_fixed_n("sequence", "train_length", None) is None
    assert variants.affine_fixed_n("sequence", "keys", 2048) is None
    assert variants.affine_fixed_n("visible", "train_length", 2048) is None


def test_unknown_variant_names_the_choices():
    with pytest.raises(ValueError, match="one of baseline, sink"):
        variants.features("sinks")


def test_no_script_spells_the_variant_list_itself():
    # A literal tuple of variant names outside variants.py would be a second copy.
    needle = '"baseline", "sink", "affine", "gated"'
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "scripts").rglob("*.py")
                 if p.name != "variants.py" and "tests" not in p.parts and needle in p.read_text()]
    assert offenders == []
