"""docs/architecture.md lists the files a new attention variant touches; this test
holds that list true. Outside the listed files (and tests), no source file may spell
the variant list in code, or name a combined variant ("affine-gated") to derive a
feature from its name: those places must read the one table instead
(config/attention_variant.h, kdtrain_hf/variants.py, `kdtrain info --variants`)."""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
from kdtrain_hf.variants import ATTENTION_VARIANTS  # noqa: E402

DOC = ROOT / "docs" / "architecture.md"
SOURCES = [("src", (".h", ".cpp")), ("kernels", (".h", ".cuh", ".cu")), ("scripts", (".py", ".sh")),
           ("cmake", (".cmake",))]
# Places that name particular variants for what they are, not the list or a feature:
# the paper's Table 2 is baseline / gated / affine-gated.
NAMED_FOR_THEMSELVES = {"scripts/report/report_tables.py"}


def listed_files():
    text = DOC.read_text()
    block = text.split("<!-- variant-files: begin -->")[1].split("<!-- variant-files: end -->")[0]
    return re.findall(r"^\d+\. `([^`]+)`", block, flags=re.M)


def code_lines(path):
    """Lines outside comments and Python docstrings (good enough for this tree)."""
    in_doc = False
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        stripped = line.strip()
        if path.suffix == ".py" and stripped.count('"""') % 2 == 1:
            in_doc = not in_doc
            continue
        if in_doc or stripped.startswith(("//", "#", "*", "/*")):
            continue
        yield number, line


def variant_pattern(variant):
    # C++ spells "affine-gated" as affine_gated.
    name = "[-_]".join(re.escape(part) for part in variant.split("-"))
    return re.compile(r"(?<![\w-])" + name + r"(?![\w-])")


VARIANT_PATTERNS = [variant_pattern(v) for v in ATTENTION_VARIANTS]


def spells_the_list(text):
    return all(p.search(text) for p in VARIANT_PATTERNS)


def names_combined_variant(line):
    return re.search(r"""["']affine-gated["']|\baffine_gated\b""", line) is not None


def test_the_list_is_short_and_exists():
    files = listed_files()
    assert 1 <= len(files) <= 10, files
    for f in files:
        assert (ROOT / f).is_file(), f


def test_no_file_outside_the_list_enumerates_variants():
    allowed = set(listed_files()) | NAMED_FOR_THEMSELVES
    offenders = []
    for top, exts in SOURCES:
        for path in sorted((ROOT / top).rglob("*")):
            rel = path.relative_to(ROOT).as_posix()
            if not path.is_file() or path.suffix not in exts or "/tests/" in f"/{rel}" or rel in allowed:
                continue
            for number, line in code_lines(path):
                if spells_the_list(line) or names_combined_variant(line):
                    offenders.append(f"{rel}:{number}: {line.strip()}")
    assert offenders == [], "read the variant table instead:\n" + "\n".join(offenders)


# Tests may name the variants they test, but a test that covers every variant loops over the
# table (all_attention_variants() in C++, ATTENTION_VARIANTS / VARIANT_CASES in Python), so that
# a new variant is covered without editing it. Lists span up to three lines.
TEST_TREES = [("tests", (".h", ".cpp", ".cu", ".cuh")), ("scripts/tests", (".py",))]
WINDOW = 3


def test_no_test_spells_the_whole_variant_list():
    offenders = []
    for top, exts in TEST_TREES:
        for path in sorted((ROOT / top).rglob("*")):
            if not path.is_file() or path.suffix not in exts or path.name == Path(__file__).name:
                continue
            lines = list(code_lines(path))
            for i in range(len(lines)):
                window = lines[i:i + WINDOW]
                if spells_the_list(" ".join(line for _, line in window)) and (
                        i == 0 or not spells_the_list(" ".join(line for _, line in lines[i - 1:i - 1 + WINDOW]))):
                    offenders.append(f"{path.relative_to(ROOT).as_posix()}:{window[0][0]}: {window[0][1].strip()}")
    assert offenders == [], "loop over the variant table instead:\n" + "\n".join(offenders)
