"""scripts/gpu/gpu_window.sh in GPU mode without a GPU: the dry runs that show each way a
window could waste a lent GPU is caught and reported as what it is, with a fake nvidia-smi,
a pack whose kdtrain needs a library nobody has, and the NVIDIA Python packages' folders
standing in for the machine's. Also its plan against its budget, its --help, and that the
default test suites select every GPU case once."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts" / "gpu"))
import gpu_docs  # noqa: E402
import kernel_choices  # noqa: E402

from repo_paths import BUILD  # noqa: E402
WINDOW = ROOT / "scripts" / "gpu" / "gpu_window.sh"
FAKE_GPU = "NVIDIA H100 80GB HBM3"


def window(*args, env=None, timeout=300):
    return subprocess.run(["bash", str(WINDOW), *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ, **(env or {})))


def plan():
    p = window("--plan")
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout.splitlines()


def test_plan_fits_eight_minutes_in_the_order_of_value():
    lines = plan()
    total = next(line for line in lines if line.startswith("first steps:"))
    caps, before, budget = (int(w) for w in total.replace(",", " ").split() if w.isdigit())
    assert budget == 500 and caps + before <= budget
    steps = [line.split("  ")[0].strip() for line in lines[1:lines.index(total)]]
    first = [s for s, line in zip(steps, lines[1:]) if line.rstrip().endswith("first")]
    assert first == ["a tests", "b attention", "c kdtrain step baseline affine", "c torch compile baseline",
                     "c torch compile affine", "d nccl", "c cached teacher", "c cache write",
                     "e sanitizers"]
    assert all(line.rstrip().endswith("tail") for line in lines[len(first) + 1:lines.index(total)])


def test_help_names_the_invocation_and_touches_nothing(tmp_path):
    out = tmp_path / "window"
    out.mkdir()
    (out / "keep").write_text("x")
    p = window("--help", env={"OUT": str(tmp_path)})
    assert p.returncode == 0
    for needed in ("scripts/gpu/package_gpu_build.sh", 'carry=[".carry/gpu.tar.xz"]', "timeout_s=540",
                   "$OUT/window", "env.txt", "--import", "docs/gpu/latest.json"):
        assert needed in p.stdout, needed
    assert (out / "keep").exists()  # --help empties no output folder
    assert window("--no-such-option", env={"OUT": str(tmp_path)}).returncode == 2


def listed(tests, test_filter):
    p = subprocess.run([str(tests), test_filter, "--list-test-names-only"], capture_output=True, text=True,
                       timeout=60)
    return {line for line in p.stdout.splitlines() if line.strip()}


def test_default_suites_select_every_gpu_case_once():
    tests = BUILD / "kdtrain_tests"
    if not tests.exists():
        pytest.skip(f"{tests} not built")
    suites = {}
    for line in plan():
        if line.startswith("suite ") and not line.startswith("suite sanitize"):
            name, _, test_filter = line[len("suite "):].partition("|")
            suites[name] = listed(tests, test_filter)
    names = [n for cases in suites.values() for n in cases]
    assert len(names) == len(set(names)), "a GPU case runs in two suites"
    assert set(names) == listed(tests, "[cuda]")
    assert not suites["flash"] & listed(tests, "~[cuda]")  # no CPU-only flash case


# ----------------------------------------------------------------- dry runs

def needed_library(binary):
    """(name, path) of a shared library `binary` needs that is not glibc's."""
    p = subprocess.run(["ldd", str(binary)], capture_output=True, text=True)
    for line in p.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[1] == "=>" and parts[2].startswith("/"):
            if not parts[0].startswith(("libc.", "libm.", "ld-linux", "libdl.", "libpthread.", "librt.")):
                return parts[0], parts[2]
    pytest.skip(f"{binary} needs no library to rename")


def pack_needing_a_missing_library(tmp_path):
    """A pack whose kdtrain needs a library of a new name (one of its own renamed, same
    length), and a site-packages folder whose nvidia/fake/lib holds that name."""
    if not (BUILD / "kdtrain").exists() or not (BUILD / "kdtrain_tests").exists() or not shutil.which("ldd"):
        pytest.skip("needs build/kdtrain, build/kdtrain_tests and ldd")
    name, path = needed_library(BUILD / "kdtrain")
    missing = "kdx" + name[3:]
    pack = tmp_path / "pack"
    (pack / "bin").mkdir(parents=True)
    (pack / "lib").mkdir()
    data = (BUILD / "kdtrain").read_bytes()
    assert b"\0" + name.encode() + b"\0" in data
    (pack / "bin" / "kdtrain").write_bytes(data.replace(b"\0" + name.encode() + b"\0", b"\0" + missing.encode() + b"\0"))
    (pack / "bin" / "kdtrain").chmod(0o755)
    (pack / "bin" / "kdtrain_tests").symlink_to(BUILD / "kdtrain_tests")
    (pack / "COMMIT").write_text("0123456789abcdef0123456789abcdef01234567\n")
    site = tmp_path / "site"
    (site / "nvidia" / "fake" / "lib").mkdir(parents=True)
    (site / "nvidia" / "fake" / "lib" / missing).symlink_to(path)
    return pack, site, missing


def fake_nvidia_smi(tmp_path):
    """nvidia-smi naming an H100 on a machine with none: CUDA itself cannot start."""
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\ncase "$*" in *driver_version*) echo "{FAKE_GPU}, 580.159.04, 81559 MiB" ;; '
                   f'*) echo "{FAKE_GPU}" ;; esac\n')
    smi.chmod(0o755)
    return f"{bin_dir}:{os.environ['PATH']}"


def gpu_mode(tmp_path, pack, site, **extra):
    return dict({"DEVICE": "cuda", "OUT": str(tmp_path / "out"), "GPU_PACK_DIR": str(pack),
                 "GPU_SITE_PACKAGES": str(site), "PATH": fake_nvidia_smi(tmp_path)}, **extra)


def test_a_library_missing_everywhere_stops_with_exit_3(tmp_path):
    pack, _, missing = pack_needing_a_missing_library(tmp_path)
    empty = tmp_path / "empty-site"
    empty.mkdir()
    p = window(env=gpu_mode(tmp_path, pack, empty), timeout=120)
    assert p.returncode == 3, p.stdout + p.stderr
    assert f"kdtrain: {missing}" in p.stdout and "shared libraries missing" in p.stdout
    out = tmp_path / "out" / "window"
    env = (out / "env.txt").read_text()
    assert env.startswith("date: ") and f"gpu: {FAKE_GPU}" in env
    for key in ("nvcc:", "torch:", "triton:", "transformers:", f"libraries_missing: kdtrain: {missing}"):
        assert key in env, key
    assert not (out / "summary.json").exists()  # nothing ran


def test_no_cuda_stops_after_the_first_tests_and_skips_are_no_passes(tmp_path):
    pack, site, missing = pack_needing_a_missing_library(tmp_path)
    p = window(env=gpu_mode(tmp_path, pack, site, KERNELS=""), timeout=300)
    assert p.returncode == 4, p.stdout + p.stderr
    out = tmp_path / "out" / "window"
    env = (out / "env.txt").read_text()
    assert f"missing_with_the_pack_alone: kdtrain: {missing}" in env
    assert f"library_fallback: {site}/nvidia/fake/lib" in env and "libraries: every binary loads" in env
    s = json.loads((out / "summary.json").read_text())
    assert s["gpu"] == FAKE_GPU
    assert s["tests_status"] == "skipped" and s["tests_passed"] == 0 and s["tests_skipped"] > 0
    assert all(t["status"] == "skipped" for t in s["suites"].values()), s["suites"]
    # every suite with a filter ran in the step's own bash (one not exported was lost there)
    assert set(s["suites"]) == {line[len("suite "):].partition("|")[0] for line in plan()
                                if line.startswith("suite ") and not line.startswith("suite sanitize")} - {"kernels"}
    assert s["phases"][-1]["phase"] == "stop" and "CUDA cannot start" in s["phases"][-1]["status"]
    assert [x["phase"] for x in s["phases"]] == ["a tests", "stop"]  # no GPU time spent on the rest
    latest = json.loads((out / "latest.json").read_text())
    assert latest["tests_passed"] == 0 and latest["attn_fwd_ms"] is None


def test_a_cut_suite_is_cut_not_failed_and_docs_hold_only_measurements(tmp_path):
    pack, site, _ = pack_needing_a_missing_library(tmp_path)
    docs = tmp_path / "docs"
    docs.mkdir()
    shutil.copy(ROOT / "docs" / "performance.md", docs / "performance.md")
    # The emulator's flash cases take minutes each on a CPU: the suite is cut by the window's timer.
    env = gpu_mode(tmp_path, pack, site, PRIMITIVES="[flash][sim]", FLASH="", ATTENTION="", REALISTIC="",
                   KERNELS="", WGMMA="", WINDOW_SECONDS="50", GPU_DOCS_ROOT=str(docs), ONLY="a tests|d nccl")
    p = window("--update-docs", env=env, timeout=300)
    assert p.returncode == 1, p.stdout + p.stderr
    out = tmp_path / "out" / "window"
    s = json.loads((out / "summary.json").read_text())
    t = s["suites"]["primitives"]
    assert t["status"] == "cut" and t["cut_at"] > 0 and t["exit_code"] in (124, 137)
    assert t["test_cases_failed"] == 0  # Catch2's "Failed 1 test case" on SIGTERM is no failure
    assert t["test_cases_cut"] >= 1 and t["test_cases_passed"] + t["test_cases_cut"] == t["test_cases_listed"]
    assert (s["tests_status"], s["tests_failed"]) == ("cut", 0)
    assert f"cut at {t['cut_at']} s" in (out / "table.txt").read_text()
    assert all(x["status"].startswith(("skipped", "ok", "cut")) for x in s["phases"]), s["phases"]
    unselected = [x for x in s["phases"] if not x["phase"].startswith(("a tests", "d nccl"))]
    assert unselected and all(x["status"] == "skipped: not in ONLY" for x in unselected), s["phases"]
    doc = json.loads((docs / "gpu" / "latest.json").read_text())
    assert set(doc) == {"commit", "gpu", *gpu_docs.WINDOW_KEYS}
    assert doc["tests_cut"] == t["test_cases_cut"] and doc["gpu"] == FAKE_GPU
    for key in ("attn_fwd_ms", "attn_bwd_ms", "attn_fwdbwd_vs_sdpa", "step_speedup_vs_torch_compile",
                "mfu_1b_t2048", "nccl_world1_identical", "cached_teacher_step_vs_student",
                "cache_write_vs_teacher_forward"):
        assert doc[key] is None, key  # nothing measured, nothing written
    runs = list((docs / "gpu").glob("*-0123456"))
    assert len(runs) == 1 and (runs[0] / "env.txt").exists() and (runs[0] / "summary.json").exists()
    assert "| tests passed / failed / cut (status) |" in (docs / "performance.md").read_text()


# ----------------------------------------------------------------- kernel choices

LISTING = """\
key                         default      meaning
attention.variant           "baseline"   the attention variant; accepts baseline, sink, affine
train.attention_forward     "auto"       forward kernel; accepts auto, mma_sync, wgmma
train.attention_backward    "auto"       backward kernel; accepts auto, sm90, wgmma
dist.backend                "auto"       communicator; accepts auto, single, mpi, nccl
"""


def test_kernel_choices_from_the_config_listing():
    assert kernel_choices.specs("/p/kdtrain", LISTING) == [
        "train.attention_forward:mma_sync=/p/kdtrain --set train.attention_forward=mma_sync",
        "train.attention_forward:wgmma=/p/kdtrain --set train.attention_forward=wgmma",
        "train.attention_backward:sm90=/p/kdtrain --set train.attention_backward=sm90",
        "train.attention_backward:wgmma=/p/kdtrain --set train.attention_backward=wgmma"]
    assert kernel_choices.specs("/p/kdtrain", "") == []


def test_kernel_choices_of_the_build_are_valid_specs():
    kdtrain = BUILD / "kdtrain"
    if not kdtrain.exists():
        pytest.skip(f"{kdtrain} not built")
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu" / "kernel_choices.py"), str(kdtrain)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    sys.path.insert(0, str(ROOT / "scripts" / "peers"))
    import bench_attention
    specs = p.stdout.splitlines()
    for spec in specs:
        label, binary, env, extra = bench_attention.parse_build(spec)
        assert binary == str(kdtrain) and extra[0] == "--set", spec
    # train.attention_forward and train.attention_backward, where the build has the fused
    # kernels' choices.
    assert not specs or any(s.startswith("train.attention_forward:mma_sync=") for s in specs)
    assert not specs or any(s.startswith("train.attention_backward:wgmma=") for s in specs)
