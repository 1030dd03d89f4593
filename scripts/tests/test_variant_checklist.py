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


def spells_the_list(line):
    return all(re.search(rf"(?<![\w-]){re.escape(v)}(?![\w-])", line) for v in ATTENTION_VARIANTS)


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
