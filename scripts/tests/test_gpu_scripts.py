"""scripts/gpu/gpu_report.py, window_report.py and gpu_docs.py (the summaries, tables and
docs/gpu/ of the GPU scripts) on recorded and synthetic inputs, and CPU smoke runs of
scripts/gpu/gpu_check.sh, gpu_bench.sh and gpu_window.sh (DEVICE=cpu: the scripts
themselves, no GPU numbers). The GPU-mode dry runs of the window are in test_gpu_window.py."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts" / "gpu"))
import gpu_docs  # noqa: E402
import gpu_report  # noqa: E402
import window_report  # noqa: E402

RECORDED = ROOT.parent / "shared" / "gpu-runs" / "2026-11-22-e64f2ce"
from repo_paths import BUILD  # noqa: E402


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def suite(outdir, name, log, listed, filt="[cuda]"):
    write(outdir / f"tests_{name}.txt", log)
    write(outdir / f"tests_{name}.meta.json",
          json.dumps({"filter": filt, "listed": listed, "exit_code": 0, "seconds": 1}))


def metrics(outdir, name, losses):
    write(outdir / f"train_{name}" / "metrics.jsonl",
          "".join(json.dumps({"step": i + 1, "loss": x}) + "\n" for i, x in enumerate(losses)))


def test_check_summary_of_the_recorded_failing_run(tmp_path):
    if not (RECORDED / "cuda_tests.txt").exists():
        pytest.skip(f"{RECORDED} not present (../shared is not checked out here)")
    suite(tmp_path, "cuda", (RECORDED / "cuda_tests.txt").read_text(), 20)
    s = gpu_report.check_summary(str(tmp_path), "e64f2ce", "NVIDIA H100 80GB HBM3")
    # The old parser wrote tests_passed 4, tests_failed 0 for this run.
    assert (s["tests_status"], s["tests_passed"], s["tests_failed"]) == ("failed", 16, 4)
    table = gpu_report.check_table(s)
    assert "failed: 16 passed, 4 failed" in table
    assert table.splitlines()[-1].startswith("overall") and "failed" in table.splitlines()[-1]


def test_check_summary_synthetic(tmp_path):
    suite(tmp_path, "cuda", "x.cpp:1: warning: 'SKIPPED: no CUDA device'\nPassed all 25 test cases with 900 assertions.\n", 25)
    suite(tmp_path, "realistic", "Passed 1 test case with 5000 assertions.\n", 1, "[realistic]")
    write(tmp_path / "memcheck.meta.json", json.dumps({"filter": "[cuda]", "exit_code": 0, "seconds": 80}))
    write(tmp_path / "memcheck.txt", "Passed all 20 test cases with 10 assertions.\n========= ERROR SUMMARY: 0 errors\n")
    write(tmp_path / "racecheck.meta.json", json.dumps({"filter": "[sanitize]", "exit_code": 1, "seconds": 90}))
    write(tmp_path / "racecheck.txt", "Passed all 4 test cases with 10 assertions.\n"
          "========= RACECHECK SUMMARY: 2 hazards displayed (1 error, 1 warning)\n========= ERROR SUMMARY: 1 error\n")
    metrics(tmp_path, "cpu", [5.0, 4.0, 3.0])
    metrics(tmp_path, "cuda", [5.0, 4.004, 3.0])
    s = gpu_report.check_summary(str(tmp_path), "abc", "GPU", gpu_run=False)
    assert (s["tests_status"], s["tests_passed"], s["tests_failed"], s["tests_skipped"]) == ("passed", 26, 0, 1)
    # On a GPU run the case that skipped itself is no pass.
    s = gpu_report.check_summary(str(tmp_path), "abc", "GPU")
    assert (s["tests_status"], s["tests_passed"], s["tests_failed"], s["tests_skipped"]) == ("skipped", 25, 0, 1)
    assert s["suites"]["cuda"]["status"] == "skipped" and s["suites"]["realistic"]["status"] == "passed"
    assert s["sanitizers"]["memcheck"]["status"] == "clean"
    assert s["sanitizers"]["racecheck"]["status"] == "errors"
    assert s["sanitizers"]["racecheck"]["hazards"] == 2
    assert s["train_max_rel_loss_diff_cuda_vs_cpu"] == pytest.approx(1e-3)


def test_check_summary_of_a_crash(tmp_path):
    suite(tmp_path, "cuda", "x.cpp:1: failed: a\nSegmentation fault (core dumped)\n", 25)
    write(tmp_path / "memcheck.meta.json", json.dumps({"skipped": "compute-sanitizer not found"}))
    s = gpu_report.check_summary(str(tmp_path), "abc", "GPU")
    assert s["tests_status"] == "incomplete" and s["tests_passed"] is None
    assert s["sanitizers"]["memcheck"] == {"status": "not run", "reason": "compute-sanitizer not found"}
    assert s["train_max_rel_loss_diff_cuda_vs_cpu"] is None
    assert "not measured" in gpu_report.check_table(s)


def test_sanitizer_timeout_is_not_clean():
    r = gpu_report.parse_sanitizer("Passed 1 test case with 1 assertion.\n", 124, timed_out=True)
    assert r["status"] == "timed out"
    assert gpu_report.parse_sanitizer("no summary at all")["status"] == "no summary"


def bench_json(tmp, name, **fields):
    write(tmp / name, "some log line\n" + json.dumps(fields) + "\n")


def test_bench_summary_synthetic(tmp_path):
    for v, tok in zip(gpu_report.VARIANTS, (40000, 39000, 38000, 38500, 37000)):
        bench_json(tmp_path, f"kdtrain_{v}.json", tokens_per_s=tok, mfu=0.3, step_ms=16384 / tok * 1e3,
                   preset="llama3.2-1b", seq_len=2048, micro_batch=8, attention_path="flash",
                   memory={"peak_device_bytes": 30 * 2**30})
    bench_json(tmp_path, "torch_compile_baseline.json", tokens_per_s=45800.0, peak_device_bytes=40 * 2**30)
    bench_json(tmp_path, "torch_compile_sink.json", error="out of memory: ...")
    bench_json(tmp_path, "kdtrain_teacher_baseline.json", tokens_per_s=30000.0, mfu=0.4)
    bench_json(tmp_path, "torch_teacher_baseline.json", tokens_per_s=24872.0)
    bench_json(tmp_path, "attention.json", attn_fwdbwd_vs_sdpa={"64": 0.9, "128": 1.1},
               variant_attn_slowdown={"64": {"baseline": 1.0, "sink": 1.05}})
    s = gpu_report.bench_summary(str(tmp_path), "abc", "H100")
    assert s["step_speedup_vs_torch_compile"]["baseline"] == pytest.approx(40000 / 45800)
    assert s["step_speedup_vs_torch_compile"]["sink"] is None  # PyTorch failed: not a number
    assert s["step_speedup_vs_torch_with_teacher"]["baseline"] == pytest.approx(30000 / 24872)
    assert s["step_speedup_vs_torch_with_teacher"]["affine"] is None
    assert s["mfu_1b_t2048"]["gated"] == 0.3
    assert s["attn_fwdbwd_vs_sdpa"] == {"64": 0.9, "128": 1.1}
    table = gpu_report.bench_table(s)
    assert "0.87x" in table and "not measured" in table
    assert "30.0 GiB / 40.0 GiB" in table


def test_bench_summary_of_nothing_measured(tmp_path):
    s = gpu_report.bench_summary(str(tmp_path), "abc", None)
    assert all(x is None for x in s["step_speedup_vs_torch_compile"].values())
    assert all(x is None for x in s["mfu_1b_t2048"].values())
    assert "not measured" in gpu_report.bench_table(s)


def test_update_latest_keeps_one_session(tmp_path):
    path = str(tmp_path / "docs" / "gpu" / "latest.json")
    check = {"commit": "c1", "gpu": "H100", "tests_passed": 30, "tests_failed": 0}
    gpu_docs.update_latest(path, check, ("tests_passed", "tests_failed"))
    bench = {"commit": "c1", "gpu": "H100", "mfu_1b_t2048": {"baseline": 0.4}}
    doc = gpu_docs.update_latest(path, bench, ("mfu_1b_t2048",))
    assert doc == {"commit": "c1", "gpu": "H100", "tests_passed": 30, "tests_failed": 0,
                   "mfu_1b_t2048": {"baseline": 0.4}}
    # A later run of the same commit and GPU that did not measure a key keeps the earlier
    # value, variant by variant; what it measured replaces it.
    doc = gpu_docs.update_latest(path, dict(bench, mfu_1b_t2048={"baseline": None, "sink": 0.5}), ("mfu_1b_t2048",))
    assert doc["mfu_1b_t2048"] == {"baseline": 0.4, "sink": 0.5}
    doc = gpu_docs.update_latest(path, dict(bench, mfu_1b_t2048={"baseline": 0.45}), ("mfu_1b_t2048",))
    assert doc["mfu_1b_t2048"] == {"baseline": 0.45, "sink": 0.5}
    # A per-variant key with nothing measured is null, never a dict of nulls.
    fresh = gpu_docs.update_latest(str(tmp_path / "other.json"), dict(bench, mfu_1b_t2048={"baseline": None}),
                                   ("mfu_1b_t2048",))
    assert fresh["mfu_1b_t2048"] is None
    # Another commit: the old keys go, never mixed with the new ones.
    doc = gpu_docs.update_latest(path, dict(bench, commit="c2"), ("mfu_1b_t2048",))
    assert doc == {"commit": "c2", "gpu": "H100", "mfu_1b_t2048": {"baseline": 0.4}}
    assert json.loads(Path(path).read_text()) == doc


def test_no_gpu_leaves_latest_alone(tmp_path):
    path = tmp_path / "latest.json"
    assert gpu_report.main(["bench", str(tmp_path), "--commit", "c", "--update-docs", str(path)]) == 0
    assert not path.exists()
    assert (tmp_path / "summary.json").exists()


def run_script(script, env, timeout):
    p = subprocess.run(["bash", str(ROOT / "scripts" / "gpu" / script)], cwd=ROOT, capture_output=True, text=True,
                       timeout=timeout, env=dict(os.environ, **env))
    return p


def test_gpu_check_cpu_smoke(tmp_path):
    if not (BUILD / "kdtrain_tests").exists() or (ROOT / ".carry" / "gpu" / "bin" / "kdtrain").exists():
        pytest.skip("needs build/ and no packed GPU build")
    p = run_script("gpu_check.sh", {"DEVICE": "cpu", "SUITE": "[cuda][rope]", "REALISTIC": "[path]",
                                    "TRAIN_STEPS": "3", "OUT": str(tmp_path)}, 900)
    assert p.returncode == 0, p.stdout + p.stderr
    s = json.loads((tmp_path / "check" / "summary.json").read_text())
    assert s["tests_status"] == "passed" and s["tests_failed"] == 0 and s["tests_passed"] >= 2
    assert s["sanitizers"]["memcheck"]["status"] == "not run"
    assert s["train_steps_cpu"] == s["train_steps_cuda"] == 3
    lines = p.stdout.strip().splitlines()
    assert lines[-1].startswith("overall")  # the table comes last


def test_gpu_bench_cpu_smoke(tmp_path):
    pytest.importorskip("torch")
    if not (BUILD / "kdtrain").exists() or (ROOT / ".carry" / "gpu" / "bin" / "kdtrain").exists():
        pytest.skip("needs build/ and no packed GPU build")
    env = {"DEVICE": "cpu", "PRESET": "tiny-llama", "SEQ": "32", "MICRO_BATCH": "2", "STEPS": "1",
           "WARMUP": "0", "MODES": "eager", "TORCH_VARIANTS": "baseline sink", "TEACHER": "tiny-llama",
           "ATTN_ARGS": "--tokens 64 --seq-len 32 --head-dims 16 --channels 64 --gqa 2 --iters 1 "
                        "--warmup 0 --kdtrain-preset tiny-llama",
           "KDTRAIN_BINARY": str(BUILD / "kdtrain"), "OUT": str(tmp_path)}
    latest = ROOT / "docs" / "gpu" / "latest.json"
    before = latest.read_bytes() if latest.exists() else None
    p = run_script("gpu_bench.sh", env, 1500)
    assert p.returncode == 0, p.stdout + p.stderr
    s = json.loads((tmp_path / "bench" / "summary.json").read_text())
    assert s["gpu"] is None
    assert s["attention_path"]["baseline"] == "cpu-reference"
    assert s["tokens_per_s"]["sink"] > 0
    assert set(s["attn_fwdbwd_vs_sdpa"]) == {"16"}
    assert p.stdout.strip().splitlines()[-1].startswith("peak device memory")  # the table comes last
    assert (latest.read_bytes() if latest.exists() else None) == before  # no GPU: docs untouched


def test_markdown_table_rewritten_between_the_markers(tmp_path):
    md = tmp_path / "performance.md"
    md.write_text(f"# x\n\nbefore\n{gpu_docs.TABLE_BEGIN}\nold table\n{gpu_docs.TABLE_END}\nafter\n")
    doc = {"commit": "abcdef1234567890", "gpu": "NVIDIA H100 80GB HBM3", "tests_passed": 30, "tests_failed": 1,
           "tests_status": "failed", "attn_fwdbwd_vs_sdpa": {"64": 0.95},
           "variant_attn_slowdown": {"64": {"baseline": 1.0, "sink": 1.04}},
           "step_speedup_vs_torch_compile": {"baseline": 1.21, "sink": None}}
    gpu_docs.update_markdown(str(md), doc)
    text = md.read_text()
    assert "old table" not in text and text.startswith("# x\n\nbefore\n") and text.endswith("after\n")
    assert "| tests passed / failed / cut (status) | 30 / 1 / not measured (failed) |" in text
    assert "D=64: 0.95" in text and "baseline 1.21x, sink not measured" in text
    assert "| mfu_1b_t2048 | not measured |" in text
    # The real docs carry the markers, so --update-docs can rewrite them.
    perf = (ROOT / "docs" / "performance.md").read_text()
    assert perf.index(gpu_docs.TABLE_BEGIN) < perf.index(gpu_docs.TABLE_END)


def jsonl(path, rows):
    write(path, "".join(json.dumps(r) + "\n" for r in rows))


def test_window_summary_synthetic(tmp_path):
    suite(tmp_path, "primitives", "Passed 1 test case with 392 assertions.\n", 1, "[cuda][tc]")
    suite(tmp_path, "flash", "x.cpp:1: failed: a\nFailed 1 test case, failed 2 assertions.\n", 10, "[flash]~[sim]")
    write(tmp_path / "racecheck.meta.json", json.dumps({"skipped": "DEVICE=cpu"}))
    # One attention-path entry per shape, its reason naming both kernels (cuda_backend.cu).
    # The model's "wgmma" forward is the lockstep kernel's (window_report.MODEL_NAME).
    path_reason = [{"reason": "fused kernels; forward kernel wgmma_sm90a_lockstep; backward kernel mma_sync"}]
    wgmma_bwd = [{"reason": "fused kernels; forward kernel wgmma_sm90a_lockstep; backward kernel wgmma_sm90a"}]
    ws_fwd = [{"reason": "fused kernels; forward kernel wgmma_sm90a; backward kernel wgmma_sm90a"}]
    jsonl(tmp_path / "attention.jsonl", [
        {"kind": "kdtrain", "attention": "baseline", "D": 64, "forward_ms": 0.6, "backward_ms": 1.4,
         "fwd_bwd_ms": 2.0, "attention_paths": path_reason},
        {"kind": "kdtrain", "attention": "baseline", "D": 64, "build": "train.attention_backward:wgmma",
         "forward_ms": 0.6, "backward_ms": 0.9, "fwd_bwd_ms": 1.5, "attention_paths": wgmma_bwd},
        {"kind": "torch", "case": "sdpa", "variant": "baseline", "D": 64, "ms": 1.8, "fwd_ms": 0.5, "bwd_ms": 1.3},
        {"kind": "kdtrain", "attention": "baseline", "D": 64, "build": "atomic-dq", "forward_ms": 0.6,
         "backward_ms": 1.32, "fwd_bwd_ms": 1.92, "kernel_ms": {"bwd_main atomics": 1.1}},
        {"kind": "kdtrain", "attention": "baseline", "D": 64, "build": "atomic-dq+train.attention_backward:wgmma",
         "forward_ms": 0.6, "backward_ms": 0.8, "fwd_bwd_ms": 1.4, "attention_paths": wgmma_bwd},
        {"kind": "kdtrain", "variant": "baseline", "D": 128, "build": "KDTRAIN_FLASH_FORWARD:wgmma",
         "error": "refused"},
        {"kind": "kdtrain", "attention": "affine", "D": 64, "forward_ms": 0.7, "backward_ms": 1.5,
         "fwd_bwd_ms": 2.2, "attention_paths": path_reason, "kernel_ms": {  # --kernel-times
             "bwd_prep": 0.05, "bwd_main": 1.2, "bwd u_scan": 0.04, "fwd wgmma": 0.6, "fwd v_scan": 0.03}},
        {"kind": "kdtrain", "attention": "sink", "D": 64, "forward_ms": 0.6, "backward_ms": 1.5,
         "fwd_bwd_ms": 2.1, "attention_paths": wgmma_bwd},
        {"kind": "kdtrain", "attention": "baseline", "D": 64, "build": "train.attention_forward:wgmma",
         "forward_ms": 0.45, "backward_ms": 0.9, "fwd_bwd_ms": 1.35, "attention_paths": ws_fwd}])
    write(tmp_path / "predictions.json", json.dumps({"kernels": [  # attention_model.py --json
        {"kernel": "wgmma", "D": 64, "ms": 0.55}, {"kernel": "mma_sync", "D": 64, "ms": 0.7},
        {"kernel": "wgmma ws", "D": 64, "ms": 0.4},
        {"kernel": "bwd_main", "D": 64, "ms": 1.2}, {"kernel": "bwd_main atomics", "D": 64, "ms": 1.1},
        {"kernel": "bwd_main wgmma", "D": 64, "ms": 0.8}, {"kernel": "bwd_main wgmma atomics", "D": 64, "ms": 0.75}],
        "totals": [{"D": 64, "forward": "wgmma", "backward": backward, "calibrated": {
            "lower_bound_ms": lower, "band_ms": band}} for backward, lower, band in (
                ("bwd_main", 1.75, [2.2, 2.6]), ("bwd_main wgmma", 1.35, [1.4, 1.45]))],
        "variants": [{"D": 64, "variant": v, "forward": "wgmma", "backward": "bwd_main", "fwd_ms": f, "bwd_ms": b,
                      "slowdown": x} for v, f, b, x in (("baseline", 0.55, 1.2, 1.0), ("affine", 0.6, 1.3, 1.1),
                                                        ("sink", 0.55, 1.2, 1.0))]}))
    write(tmp_path / "phases.jsonl", '{"phase": "a tests", "status": "ok", "seconds": 70}\n'
                                     '{"phase": "b attention", "status": "cut at 120 s", "seconds": 120}\n')
    write(tmp_path / "nccl.log", "...\n   single vs nccl: the same bits\n   single vs nccl_after: the same bits\n"
                                 "nccl: passed\n")
    write(tmp_path / "env.txt", "date: 2026-11-28T10:00:00Z\ngpu: NVIDIA H100 80GB HBM3, 580.159.04, 81559 MiB\n")
    s = window_report.window_summary(str(tmp_path), "abc", "H100")
    # 1 passed of [cuda][tc]; 10 listed, 1 failed of the flash suite: 9 + 1 passed, 1 failed.
    assert (s["tests_status"], s["tests_passed"], s["tests_failed"], s["tests_cut"]) == ("failed", 10, 1, 0)
    assert s["attn_fwdbwd_vs_sdpa"] == {"64": 1.8 / 2.0}
    assert s["attn_determinism_cost"] == {"64": pytest.approx(2.0 / 1.92 - 1)}
    assert s["attention_ms"]["64"]["kdtrain[atomic-dq] baseline"]["bwd"] == 1.32
    assert s["attention_ms"]["64"]["torch sdpa"] == {"fwd": 0.5, "bwd": 1.3, "fwd_bwd": 1.8}
    # Per-kernel times of the rows that carry them (an older kdtrain's rows have none).
    assert s["attention_kernel_ms"] == {"64": {"kdtrain affine": {
        "bwd_prep": 0.05, "bwd_main": 1.2, "bwd u_scan": 0.04, "fwd wgmma": 0.6, "fwd v_scan": 0.03},
        "kdtrain[atomic-dq] baseline": {"bwd_main atomics": 1.1}}}
    assert s["attn_fwd_ms"]["64"]["kdtrain baseline"] == {"measured": 0.6, "kernel": "wgmma", "predicted": 0.55}
    assert s["attn_bwd_ms"]["64"]["kdtrain baseline"] == {"measured": 1.4, "kernel": "bwd_main", "predicted": 1.2}
    assert s["attn_bwd_ms"]["64"]["kdtrain[train.attention_backward:wgmma] baseline"] == {
        "measured": 0.9, "kernel": "bwd_main wgmma", "predicted": 0.8}
    assert s["attn_bwd_ms"]["64"]["kdtrain[atomic-dq] baseline"] == {
        "measured": 1.32, "kernel": "bwd_main atomics", "predicted": 1.1}
    assert s["attn_fwd_ms"]["64"]["kdtrain[atomic-dq] baseline"]["predicted"] is None  # its kernel is not named
    # The warp-specialised forward: the model's row of its own, not the lockstep kernel's.
    assert s["attn_fwd_ms"]["64"]["kdtrain[train.attention_forward:wgmma] baseline"] == {
        "measured": 0.45, "kernel": "wgmma ws", "predicted": 0.4}
    assert s["attn_bwd_ms"]["64"]["kdtrain[atomic-dq+train.attention_backward:wgmma] baseline"] == {
        "measured": 0.8, "kernel": "bwd_main wgmma atomics", "predicted": 0.75}
    # fwd+bwd against the model's totals: 2.0 ms lies under the band 2.2-2.6 (above its lower
    # bound 1.75), 1.5 above 1.4-1.45; the atomics rows have no total.
    vs_model = s["attn_fwdbwd_vs_model"]["64"]
    assert set(vs_model) == {"kdtrain baseline", "kdtrain[train.attention_backward:wgmma] baseline"}
    assert vs_model["kdtrain baseline"] == {"measured": 2.0, "kernels": "wgmma + bwd_main", "lower_bound": 1.75,
                                            "band": [2.2, 2.6], "where": "under the band"}
    assert vs_model["kdtrain[train.attention_backward:wgmma] baseline"]["where"] == "above the band"
    assert s["attn_determinism_cost_by_choice"] == {"64": {"train.attention_backward:wgmma": pytest.approx(1.5 / 1.4 - 1)}}
    # A variant's own prediction, not its baseline kernel's; none for kernels the model has no row of.
    assert s["attn_fwd_ms"]["64"]["kdtrain affine"] == {"measured": 0.7, "kernel": "wgmma", "predicted": 0.6}
    assert s["attn_bwd_ms"]["64"]["kdtrain affine"]["predicted"] == 1.3
    assert s["attn_bwd_ms"]["64"]["kdtrain sink"] == {"measured": 1.5, "kernel": "bwd_main wgmma", "predicted": None}
    # Against the default build's baseline (2.0 ms): the model's ratio only where the kernels match.
    assert s["variant_attn_slowdown_vs_model"]["64"]["affine"] == {
        "measured": pytest.approx(1.1), "predicted": 1.1, "kernels": "wgmma + bwd_main"}
    assert s["variant_attn_slowdown_vs_model"]["64"]["sink"]["predicted"] is None
    assert s["variant_attn_slowdown_vs_model"]["64"]["baseline"]["measured"] == 1.0
    assert s["nccl"] == "nccl: passed" and s["nccl_world1_identical"] is True
    assert s["env"]["gpu"].startswith("NVIDIA H100")
    table = window_report.window_table(s)
    assert "cut at 120 s (120 s)" in table and "D=64: +4.2%" in table
    lines = {line.split("  ")[0]: line.rstrip() for line in table.splitlines()}
    assert lines["attention D=64 kdtrain baseline fwd (wgmma): measured / predicted ms"].endswith("0.60 / 0.55")
    assert lines["attn_determinism_cost D=64 train.attention_backward:wgmma"].endswith("+7.1%")
    assert lines["attention D=64 kdtrain baseline fwd+bwd (wgmma + bwd_main): measured / model lower bound, band ms"
                 ].endswith("2.00 / 1.75, 2.20-2.60 (under the band)")
    assert lines["attention D=128 kdtrain[KDTRAIN_FLASH_FORWARD:wgmma] baseline"].endswith("error: refused")
    assert lines["variant_attn_slowdown D=64 affine (wgmma + bwd_main): measured / model"].endswith("1.10 / 1.10")
    assert lines["attention D=64 kdtrain affine kernels (ms per call)"].endswith(
        "fwd v_scan 0.030, fwd wgmma 0.600, bwd u_scan 0.040, bwd_main 1.200, bwd_prep 0.050")
    assert lines["attention D=64 kdtrain[atomic-dq] baseline kernels (ms per call)"].endswith("bwd_main atomics 1.100")
    assert not any(k.startswith("attention D=64 kdtrain baseline kernels") for k in lines)
    assert table.splitlines()[-1].startswith("overall") and "failed" in table.splitlines()[-1]
    doc = gpu_docs.latest_doc(s)
    assert set(doc) == {"commit", "gpu", *gpu_docs.WINDOW_KEYS}
    for key in ("step_speedup_vs_torch_compile", "mfu_1b_t2048", "cached_teacher_step_vs_student",
                "cache_write_vs_teacher_forward", "cache_write_tokens_per_s", "peak_device_bytes",
                "peak_device_bytes_torch_compile"):
        assert doc[key] is None, key  # not measured: null, never a guess
    assert doc["variant_attn_slowdown"] == {"64": {"baseline": 1.0, "affine": pytest.approx(1.1),
                                                   "sink": pytest.approx(1.05)}}
    assert gpu_report.main(["window", str(tmp_path), "--commit", "abc", "--gpu", "H100"]) == 0
    assert json.loads((tmp_path / "latest.json").read_text()) == json.loads(json.dumps(doc))


def test_cache_write_over_the_teacher_forward(tmp_path):
    # teacher-cache's progress on stderr may precede its JSON line; eval --out is indented JSON.
    write(tmp_path / "cache_write.json", "[info] teacher-cache rank 0/1: 1/1 shards\n"
          + json.dumps({"tokens": 393216, "tokens_written": 393216, "seconds": 2.4, "tokens_per_s": 163840.0}) + "\n")
    write(tmp_path / "cache_write_forward.json", json.dumps({"tokens": 393216, "seconds": 2.0}, indent=2))
    s = window_report.cache_write(str(tmp_path))
    assert s["cache_write_tokens_per_s"] == {"cache_write": 163840.0, "teacher_forward": 196608.0}
    assert s["cache_write_vs_teacher_forward"] == pytest.approx(163840 / 196608)
    row = gpu_docs.markdown_table(s)
    assert "| cache_write_vs_teacher_forward (teacher-cache / eval tokens/s) | 0.83x (163,840 / 196,608) |" in row
    # A run that resumed a finished cache wrote nothing: no rate, no ratio.
    write(tmp_path / "cache_write.json", json.dumps({"tokens": 393216, "tokens_written": 0, "seconds": 0.1,
                                                     "tokens_per_s": 0.0}))
    s = window_report.cache_write(str(tmp_path))
    assert s["cache_write_vs_teacher_forward"] is None and s["cache_write_tokens_per_s"]["cache_write"] is None
    (tmp_path / "cache_write_forward.json").unlink()
    assert window_report.cache_write(str(tmp_path))["cache_write_tokens_per_s"]["teacher_forward"] is None
    # The --kernel-times pass: its per-kernel GPU ms beside its wall time, in the table.
    assert s["cache_write_kernel_ms"] is None
    write(tmp_path / "cache_write_timed.json", json.dumps({"tokens_written": 393216, "seconds": 3.5, "kernel_ms": {
        "topk": {"ms": 900.0, "calls": 1536}, "matmul fwd": {"ms": 1800.5, "calls": 4000}}}) + "\n")
    s = window_report.cache_write(str(tmp_path))
    assert s["cache_write_kernel_ms"] == {"seconds": 3.5, "ms": {"matmul fwd": 1800.5, "topk": 900.0}}
    table = window_report.window_table(dict(window_report.window_summary(str(tmp_path), "abc", "H100"), **s))
    assert "matmul fwd 1800.5, topk 900.0 of 3500.0" in table


def test_nccl_identical_verdicts():
    assert window_report.nccl_identical(None) is None
    assert window_report.nccl_identical("== NCCL\nnccl: FAILED (collectives)\n") is None
    assert window_report.nccl_identical("   single vs nccl: the same bits\n   single vs nccl_after: DIFFERENT\n") \
        is False


def test_import_window_into_docs(tmp_path):
    docs = tmp_path / "docs"
    write(docs / "performance.md", f"x\n{gpu_docs.TABLE_BEGIN}\nold\n{gpu_docs.TABLE_END}\n")
    window = tmp_path / "window"
    summary = {"commit": "0123456789abcdef", "gpu": "NVIDIA H200", "tests_passed": 7, "tests_failed": 0,
               "tests_cut": 2, "tests_status": "cut", "env": {"date": "2026-11-28T10:00:00Z"},
               "mfu_1b_t2048": {"baseline": 0.41, "sink": None}, "nccl_world1_identical": False}
    write(window / "summary.json", json.dumps(summary))
    for name in ("env.txt", "window.log", "table.txt"):
        write(window / name, name)
    write(window / "other.txt", "not kept")
    assert gpu_report.main(["import", str(window), "--docs-root", str(docs)]) == 0
    doc = json.loads((docs / "gpu" / "latest.json").read_text())
    assert set(doc) == {"commit", "gpu", *gpu_docs.WINDOW_KEYS}
    assert (doc["tests_cut"], doc["attn_fwd_ms"], doc["nccl_world1_identical"]) == (2, None, False)
    run = docs / "gpu" / "2026-11-28-0123456"
    assert sorted(p.name for p in run.iterdir()) == ["env.txt", "summary.json", "table.txt", "window.log"]
    text = (docs / "performance.md").read_text()
    assert "| tests passed / failed / cut (status) | 7 / 0 / 2 (cut) |" in text
    assert "baseline 41.0%, sink not measured" in text and "| nccl_world1_identical | false |" in text
    # Imported again: the same folder. A second, shorter window of the commit that day (no
    # suite run, another variant measured): its own folder, and latest.json keeps the first's.
    assert gpu_report.main(["import", str(window), "--docs-root", str(docs)]) == 0
    second = dict(summary, tests_passed=None, tests_failed=None, tests_cut=None, tests_status="not run",
                  tests_skipped=0, mfu_1b_t2048={"baseline": None, "sink": 0.43}, nccl_world1_identical=None,
                  env={"date": "2026-11-28T10:20:00Z"})
    write(window / "summary.json", json.dumps(second))
    assert gpu_report.main(["import", str(window), "--docs-root", str(docs)]) == 0
    assert sorted(p.name for p in (docs / "gpu").iterdir()) == ["2026-11-28-0123456", "2026-11-28-0123456-2",
                                                               "latest.json"]
    doc = json.loads((docs / "gpu" / "latest.json").read_text())
    assert (doc["tests_passed"], doc["tests_status"], doc["tests_skipped"]) == (7, "cut", None)
    assert doc["mfu_1b_t2048"] == {"baseline": 0.41, "sink": 0.43} and doc["nccl_world1_identical"] is False
    # A run that named no GPU never reaches the docs.
    write(window / "summary.json", json.dumps(dict(summary, gpu=None)))
    assert gpu_report.main(["import", str(window), "--docs-root", str(docs)]) == 2


def test_gpu_window_cpu_smoke(tmp_path):
    pytest.importorskip("torch")
    if not (BUILD / "kdtrain_tests").exists() or (ROOT / ".carry" / "gpu" / "bin" / "kdtrain").exists():
        pytest.skip("needs build/ and no packed GPU build")
    latest = ROOT / "docs" / "gpu" / "latest.json"
    before = latest.read_bytes() if latest.exists() else None
    p = run_script("gpu_window.sh", {"DEVICE": "cpu", "OUT": str(tmp_path), "TORCH_VARIANTS": "baseline"}, 900)
    assert p.returncode == 0, p.stdout + p.stderr
    out = tmp_path / "window"
    assert sorted(f.name for f in out.iterdir()) == ["env.txt", "raw.tgz", "summary.json", "table.txt", "window.log"]
    assert (out / "env.txt").read_text().startswith("date: ")
    s = json.loads((out / "summary.json").read_text())
    assert s["gpu"] is None and s["tests_status"] == "passed" and s["tests_failed"] == 0
    assert [p_["phase"] for p_ in s["phases"]][:3] == ["a tests", "b attention", "c kdtrain step baseline affine"]
    assert all(p_["status"] == "ok" for p_ in s["phases"])
    assert s["attention_ms"]["16"]["kdtrain baseline"]["fwd"] > 0
    assert s["tokens_per_s"]["affine"] > 0
    assert "c cache write" in [p_["phase"] for p_ in s["phases"]]
    assert s["cache_write_vs_teacher_forward"] > 0 and s["cache_write_tokens_per_s"]["teacher_forward"] > 0
    assert s["cache_write_kernel_ms"] == {"seconds": pytest.approx(s["cache_write_kernel_ms"]["seconds"]), "ms": {}}
    assert s["cache_write_kernel_ms"]["seconds"] > 0  # the --kernel-times pass ran (the CPU times no kernel)
    assert p.stdout.strip().splitlines()[-1].startswith("overall")  # the table comes last
    assert (latest.read_bytes() if latest.exists() else None) == before  # no GPU: docs untouched
