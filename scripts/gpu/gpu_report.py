#!/usr/bin/env python3
"""Summaries of a GPU session for scripts/gpu/gpu_window.sh, gpu_check.sh and gpu_bench.sh: reads
the raw outputs they leave in $OUT, writes one JSON summary, optionally merges its
keys into docs/gpu/latest.json, and prints a short table (the scripts' last output).

  python3 scripts/gpu/gpu_report.py check OUT/check --commit C --gpu G [--update-docs PATH]
  python3 scripts/gpu/gpu_report.py bench OUT/bench --commit C --gpu G [--update-docs PATH]
  python3 scripts/gpu/gpu_report.py window RAW --commit C --gpu G [--update-docs PATH]

docs/gpu/latest.json holds one session's measurements: when the commit or the GPU of
the new keys differs from the file's, the file starts over, so keys measured on
different commits or GPUs never sit side by side. Nothing here invents a number:
a value that was not measured is null, and the table says "not measured".
"""
import argparse
import json
import math
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import catch2_summary  # noqa: E402
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # scripts/, for kdtrain_hf
from kdtrain_hf.variants import ATTENTION_VARIANTS  # noqa: E402

VARIANTS = ATTENTION_VARIANTS

# ----------------------------------------------------------------- check

_SANITIZER_ERRORS = re.compile(r"=+ ERROR SUMMARY: (\d+) errors?")
_RACECHECK = re.compile(r"=+ RACECHECK SUMMARY: (\d+) hazards? displayed \((\d+) errors?, (\d+) warnings?\)")


def parse_sanitizer(text, exit_code=None, timed_out=False):
    """compute-sanitizer's verdict from its output: errors (and racecheck hazards)."""
    r = {"status": "no summary", "errors": None}
    m = _SANITIZER_ERRORS.findall(text)
    if m:
        r["errors"] = int(m[-1])
    rc = _RACECHECK.findall(text)
    if rc:
        hazards, errors, warnings = (int(x) for x in rc[-1])
        r.update(hazards=hazards, race_errors=errors, race_warnings=warnings)
        r["errors"] = max(r["errors"] or 0, errors)
    tests = catch2_summary.parse(text)
    r["tests"] = {k: tests[k] for k in ("status", "test_cases_passed", "test_cases_failed")}
    if timed_out:
        r["status"] = "timed out"
    elif r["errors"] is not None:
        r["status"] = "clean" if r["errors"] == 0 and tests["status"] == "passed" else "errors"
    if exit_code is not None:
        r["exit_code"] = exit_code
    return r


def read_text(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return None


def read_json(path):
    text = read_text(path)
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def train_losses(run_dir):
    text = read_text(os.path.join(run_dir, "metrics.jsonl"))
    if not text:
        return []
    return [json.loads(line)["loss"] for line in text.splitlines() if line.strip()]


def max_rel_diff(a, b):
    if not a or len(a) != len(b):
        return None
    return max(abs(x - y) / abs(y) for x, y in zip(a, b))


def check_summary(outdir, commit, gpu, suite_names=("cuda", "realistic"), tools=("memcheck", "racecheck")):
    """The summary of a gpu_check run (or the test part of a gpu_window run) from the files
    it left in `outdir`."""
    suites = {}
    for name in suite_names:
        log = read_text(os.path.join(outdir, f"tests_{name}.txt"))
        meta = read_json(os.path.join(outdir, f"tests_{name}.meta.json")) or {}
        if log is None:
            continue
        s = catch2_summary.parse(log, meta.get("listed"))
        s["exit_code"] = meta.get("exit_code")
        s["filter"] = meta.get("filter")
        s["seconds"] = meta.get("seconds")
        suites[name] = s
    sanitizers = {}
    for tool in tools:
        meta = read_json(os.path.join(outdir, f"{tool}.meta.json"))
        if meta is None:
            continue
        if meta.get("skipped"):
            sanitizers[tool] = {"status": "not run", "reason": meta["skipped"]}
            continue
        text = read_text(os.path.join(outdir, f"{tool}.txt")) or ""
        s = parse_sanitizer(text, meta.get("exit_code"), meta.get("timed_out", False))
        s["filter"] = meta.get("filter")
        s["seconds"] = meta.get("seconds")
        sanitizers[tool] = s
    statuses = [t["status"] for t in suites.values()]
    if not suites:
        status = "not run"
    elif all(x == "passed" for x in statuses):
        status = "passed"
    elif any(x in ("no summary", "no tests") for x in statuses):
        status = "incomplete"  # a binary died (or selected nothing): the counts are partial
    else:
        status = "failed"
    known = [t for t in suites.values() if t["test_cases_passed"] is not None]
    cpu = train_losses(os.path.join(outdir, "train_cpu"))
    cuda = train_losses(os.path.join(outdir, "train_cuda"))
    return {
        "commit": commit, "gpu": gpu,
        "tests_status": status,
        "tests_passed": sum(t["test_cases_passed"] for t in known) if suites and len(known) == len(suites) else None,
        "tests_failed": sum(t["test_cases_failed"] or 0 for t in suites.values()) if suites else None,
        "tests_skipped": sum(t["skipped"] for t in suites.values()),
        "suites": suites,
        "sanitizers": sanitizers,
        "train_steps_cuda": len(cuda), "train_steps_cpu": len(cpu),
        "train_max_rel_loss_diff_cuda_vs_cpu": max_rel_diff(cuda, cpu),
    }


def check_table(s):
    return format_table(("check", "result"), check_rows(s))


def check_rows(s):
    rows = []
    for name, t in s["suites"].items():
        passed = "?" if t["test_cases_passed"] is None else t["test_cases_passed"]
        failed = "?" if t["test_cases_failed"] is None else t["test_cases_failed"]
        rows.append((f"tests {name} {t.get('filter') or ''}".strip(),
                     f"{t['status']}: {passed} passed, {failed} failed, {t['skipped']} skipped"))
    for tool, t in s["sanitizers"].items():
        if t["status"] == "not run":
            rows.append((f"compute-sanitizer {tool}", f"not run ({t['reason']})"))
            continue
        detail = "?" if t["errors"] is None else f"{t['errors']} errors"
        if "hazards" in t:
            detail += f", {t['hazards']} hazards"
        rows.append((f"compute-sanitizer {tool} {t.get('filter') or ''}".strip(), f"{t['status']}: {detail}"))
    diff = s["train_max_rel_loss_diff_cuda_vs_cpu"]
    rows.append(("train cuda vs cpu, max rel loss diff",
                 "not measured" if diff is None else f"{diff:.2e} ({s['train_steps_cuda']} steps)"))
    rows.append(("overall", f"{s['tests_status']}, commit {str(s['commit'])[:12]}, {s['gpu'] or 'no GPU'}"))
    return rows


# ----------------------------------------------------------------- bench

def last_json(path):
    """The last JSON object line of a tool's output file (None if absent or bad)."""
    text = read_text(path)
    if not text:
        return None
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                return None
    return None


def ratio(a, b):
    if a is None or b is None or not b:
        return None
    return a / b


def bench_summary(outdir, commit, gpu):
    """The summary of a gpu_bench run from the files it left in `outdir`."""
    def ok(r):  # a result, not an error report
        return r if r is not None and "error" not in r else None
    kd = {v: ok(last_json(os.path.join(outdir, f"kdtrain_{v}.json"))) for v in VARIANTS}
    tc = {v: ok(last_json(os.path.join(outdir, f"torch_compile_{v}.json"))) for v in VARIANTS}
    te = {v: ok(last_json(os.path.join(outdir, f"torch_eager_{v}.json"))) for v in VARIANTS}
    kt = {v: ok(last_json(os.path.join(outdir, f"kdtrain_teacher_{v}.json"))) for v in VARIANTS}
    tt = {v: ok(last_json(os.path.join(outdir, f"torch_teacher_{v}.json"))) for v in VARIANTS}
    kc = {v: ok(last_json(os.path.join(outdir, f"kdtrain_teacher_cache_{v}.json"))) for v in VARIANTS}
    att = ok(last_json(os.path.join(outdir, "attention.json"))) or {}

    def field(table, key):
        return {v: (table[v] or {}).get(key) for v in VARIANTS}

    def speedup(a, b):
        return {v: ratio((a[v] or {}).get("tokens_per_s"), (b[v] or {}).get("tokens_per_s")) for v in VARIANTS}

    base = kd["baseline"]
    return {
        "commit": commit, "gpu": gpu,
        "bench_config": {"preset": (base or {}).get("preset"), "seq_len": (base or {}).get("seq_len"),
                         "micro_batch": (base or {}).get("micro_batch")},
        "attn_fwdbwd_vs_sdpa": att.get("attn_fwdbwd_vs_sdpa"),
        "variant_attn_slowdown": att.get("variant_attn_slowdown"),
        "variant_attn_speedup_vs_torch_best": att.get("variant_speedup_vs_torch_best"),
        "step_speedup_vs_torch_compile": speedup(kd, tc),
        "step_speedup_vs_torch_eager": speedup(kd, te),
        "step_speedup_vs_torch_with_teacher": speedup(kt, tt),
        "mfu_1b_t2048": field(kd, "mfu"),
        "mfu_1b_t2048_with_teacher": field(kt, "mfu"),
        # the target: the cached-teacher step at >= 0.9x the student-only step
        "cached_teacher_step_vs_student": speedup(kc, kd),
        "peak_device_bytes_with_teacher": {
            v: ((kt[v] or {}).get("memory") or {}).get("peak_device_bytes") for v in VARIANTS},
        "peak_device_bytes_torch_with_teacher": field(tt, "peak_device_bytes"),
        "tokens_per_s": field(kd, "tokens_per_s"),
        "tokens_per_s_torch_compile": field(tc, "tokens_per_s"),
        "peak_device_bytes": {v: ((kd[v] or {}).get("memory") or {}).get("peak_device_bytes") for v in VARIANTS},
        "peak_device_bytes_torch_compile": field(tc, "peak_device_bytes"),
        "attention_path": field(kd, "attention_path"),
        "variant_step_slowdown_kdtrain": {
            v: ratio((kd[v] or {}).get("step_ms"), (base or {}).get("step_ms")) for v in VARIANTS},
    }


def fmt(x, pattern="{:.2f}"):
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "not measured"
    return pattern.format(x)


def bench_table(s):
    return format_table(("bench", "result"), bench_rows(s))


def bench_rows(s):
    rows = []
    for v in VARIANTS:
        tok = s["tokens_per_s"][v]
        rows.append((f"{v}: tokens/s, MFU, vs torch.compile",
                     f"{fmt(tok, '{:,.0f}')}, {fmt(s['mfu_1b_t2048'][v], '{:.1%}')}, "
                     f"{fmt(s['step_speedup_vs_torch_compile'][v], '{:.2f}x')} "
                     f"(path {s['attention_path'][v] or '?'})"))
    for v in VARIANTS:
        rows.append((f"{v}: with teacher vs torch.compile", fmt(s["step_speedup_vs_torch_with_teacher"][v], "{:.2f}x")))
    rows.append(("baseline: cached teacher / student-only step",
                 fmt(s["cached_teacher_step_vs_student"]["baseline"], "{:.2f}x")))
    for D, r in sorted((s["attn_fwdbwd_vs_sdpa"] or {}).items()):
        rows.append((f"attention fwd+bwd D={D}: SDPA time / kdtrain", fmt(r, "{:.2f}x")))
    for D, per in sorted((s["variant_attn_slowdown"] or {}).items()):
        rows.append((f"attention D={D}: variant / baseline",
                     ", ".join(f"{v} {fmt(x, '{:.2f}')}" for v, x in per.items())))
    if not s["attn_fwdbwd_vs_sdpa"]:
        rows.append(("attention fwd+bwd vs SDPA", "not measured"))
    peak, peak_torch = s["peak_device_bytes"]["baseline"], s["peak_device_bytes_torch_compile"]["baseline"]
    rows.append(("peak device memory, baseline: kdtrain / torch.compile",
                  f"{fmt(peak / 2**30 if peak else None, '{:.1f} GiB')} / "
                  f"{fmt(peak_torch / 2**30 if peak_torch else None, '{:.1f} GiB')}"))
    return rows


# ----------------------------------------------------------------- window

WINDOW_SUITES = ("primitives", "flash", "attention", "realistic")
WINDOW_TOOLS = ("racecheck", "synccheck")


def attention_times(att):
    """Per head dim, per implementation: forward, backward and forward+backward ms, from
    bench_attention.py's report (PyTorch rows by case, kdtrain rows by variant, the extra
    builds' baseline rows by build label)."""
    out = {}
    for r in att.get("results", []):
        if "ms" in r:
            out.setdefault(str(r["D"]), {})[f"torch {r['case']}"] = {
                "fwd": r.get("fwd_ms"), "bwd": r.get("bwd_ms"), "fwd_bwd": r["ms"]}
    for r in att.get("kdtrain", []) + att.get("kdtrain_builds", []):
        if "fwd_bwd_ms" in r:
            name = f"kdtrain[{r['build']}] {r['attention']}" if "build" in r else f"kdtrain {r['attention']}"
            out.setdefault(str(r["D"]), {})[name] = {
                "fwd": r.get("forward_ms"), "bwd": r.get("backward_ms"), "fwd_bwd": r["fwd_bwd_ms"]}
    return out


def window_summary(outdir, commit, gpu):
    """The summary of a gpu_window run: its tests (as check_summary), its benchmarks (as
    bench_summary), the determinism cost, attention times, NCCL and each phase's time."""
    check = check_summary(outdir, commit, gpu, WINDOW_SUITES, WINDOW_TOOLS)
    s = bench_summary(outdir, commit, gpu)
    for k in ("tests_status", "tests_passed", "tests_failed", "tests_skipped", "suites", "sanitizers"):
        s[k] = check[k]
    att = last_json(os.path.join(outdir, "attention.json")) or {}
    s["attn_determinism_cost"] = att.get("attn_determinism_cost") or None
    s["attention_ms"] = attention_times(att)
    nccl = (read_text(os.path.join(outdir, "nccl.log")) or "").strip().splitlines()
    s["nccl"] = nccl[-1] if nccl else None
    phases = read_text(os.path.join(outdir, "phases.jsonl")) or ""
    s["phases"] = [json.loads(line) for line in phases.splitlines() if line.strip()]
    return s


def window_table(s):
    rows = [(f"phase {p['phase']}", f"{p['status']} ({p['seconds']} s)") for p in s["phases"]]
    for D, impls in sorted(s["attention_ms"].items()):
        for name, t in impls.items():
            rows.append((f"attention D={D} {name}: fwd / bwd / total ms",
                         f"{fmt(t['fwd'])} / {fmt(t['bwd'])} / {fmt(t['fwd_bwd'])}"))
    cost = s["attn_determinism_cost"] or {}
    rows.append(("attn_determinism_cost (deterministic / atomics - 1)",
                 ", ".join(f"D={d}: {fmt(x, '{:+.1%}')}" for d, x in sorted(cost.items())) or "not measured"))
    rows.append(("NCCL at world size 1", s["nccl"] or "not run"))
    rows += bench_rows(s)
    # The test verdict last, as gpu_check's table ends (no training run in the window).
    check = check_rows(dict(s, train_max_rel_loss_diff_cuda_vs_cpu=None, train_steps_cuda=0))
    rows += [r for r in check if not r[0].startswith("train ")]
    return format_table(("window", "result"), rows)


# ----------------------------------------------------------------- shared

def format_table(header, rows):
    width = max(len(header[0]), *(len(r[0]) for r in rows)) if rows else len(header[0])
    lines = [f"{header[0]:<{width}}  {header[1]}", f"{'-' * width}  {'-' * len(header[1])}"]
    lines += [f"{a:<{width}}  {b}" for a, b in rows]
    return "\n".join(lines)


# Keys each script contributes to docs/gpu/latest.json.
CHECK_KEYS = ("tests_passed", "tests_failed", "tests_status", "tests_skipped")
BENCH_KEYS = ("attn_fwdbwd_vs_sdpa", "variant_attn_slowdown", "step_speedup_vs_torch_compile",
              "step_speedup_vs_torch_with_teacher", "mfu_1b_t2048", "peak_device_bytes",
              "peak_device_bytes_torch_compile", "bench_config", "cached_teacher_step_vs_student",
              "peak_device_bytes_with_teacher", "peak_device_bytes_torch_with_teacher")
WINDOW_KEYS = CHECK_KEYS + BENCH_KEYS + ("attn_determinism_cost", "attention_ms")


def update_latest(path, summary, keys):
    """Merges `keys` of `summary` into the JSON file at `path`; starts the file over when
    its commit or GPU differs from the summary's. Returns the merged object."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        doc = {}
    if doc.get("commit") != summary["commit"] or doc.get("gpu") != summary["gpu"]:
        doc = {}
    doc["commit"] = summary["commit"]
    doc["gpu"] = summary["gpu"]
    for k in keys:
        doc[k] = summary.get(k)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)
    return doc


TABLE_BEGIN = "<!-- gpu_report: measured table begin -->"
TABLE_END = "<!-- gpu_report: measured table end -->"


def markdown_table(doc):
    """docs/gpu/latest.json as the markdown table of docs/performance.md."""
    def per_variant(key, pattern):
        values = doc.get(key) or {}
        return ", ".join(f"{v} {fmt(values.get(v), pattern)}" for v in VARIANTS) if values else "not measured"

    def per_dim(key):
        values = doc.get(key) or {}
        return ", ".join(f"D={d}: {fmt(x, '{:.2f}')}" for d, x in sorted(values.items())) or "not measured"

    slow = doc.get("variant_attn_slowdown") or {}
    rows = [
        ("commit, GPU", f"{str(doc.get('commit'))[:12]}, {doc.get('gpu')}"),
        ("bench config", json.dumps(doc.get("bench_config")) if doc.get("bench_config") else "not measured"),
        ("tests passed / failed (status)",
         f"{fmt(doc.get('tests_passed'), '{}')} / {fmt(doc.get('tests_failed'), '{}')} ({doc.get('tests_status', 'not run')})"),
        ("attn_fwdbwd_vs_sdpa (SDPA time / kdtrain)", per_dim("attn_fwdbwd_vs_sdpa")),
        ("attn_determinism_cost (deterministic / atomics build - 1)", per_dim("attn_determinism_cost")),
    ]
    rows += [(f"variant_attn_slowdown, D={d}", ", ".join(f"{v} {fmt(x, '{:.2f}')}" for v, x in per.items()))
             for d, per in sorted(slow.items())] or [("variant_attn_slowdown", "not measured")]
    rows += [
        ("step_speedup_vs_torch_compile", per_variant("step_speedup_vs_torch_compile", "{:.2f}x")),
        ("step_speedup_vs_torch_with_teacher", per_variant("step_speedup_vs_torch_with_teacher", "{:.2f}x")),
        ("mfu_1b_t2048", per_variant("mfu_1b_t2048", "{:.1%}")),
        ("cached_teacher_step_vs_student", per_variant("cached_teacher_step_vs_student", "{:.2f}x")),
    ]
    lines = ["| measurement | value |", "|---|---|"] + [f"| {a} | {b} |" for a, b in rows]
    return "\n".join(lines)


def update_markdown(path, doc):
    """Replaces the block between TABLE_BEGIN and TABLE_END in `path` with the table."""
    with open(path) as f:
        text = f.read()
    start, end = text.find(TABLE_BEGIN), text.find(TABLE_END)
    if start < 0 or end < start:
        raise SystemExit(f"gpu_report: {path} has no {TABLE_BEGIN} ... {TABLE_END} block")
    text = text[:start + len(TABLE_BEGIN)] + "\n" + markdown_table(doc) + "\n" + text[end:]
    with open(path, "w") as f:
        f.write(text)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kind", choices=("check", "bench", "window"))
    ap.add_argument("outdir")
    ap.add_argument("--commit", required=True)
    ap.add_argument("--gpu", default="")
    ap.add_argument("--update-docs", metavar="PATH", default="",
                    help="merge the measured keys into this JSON file (docs/gpu/latest.json)")
    ap.add_argument("--update-table", metavar="PATH", default="",
                    help="with --update-docs: rewrite the measured table of this markdown file from the JSON")
    args = ap.parse_args(argv)
    gpu = args.gpu or None
    if args.kind == "check":
        s = check_summary(args.outdir, args.commit, gpu)
        keys, table = CHECK_KEYS, check_table(s)
    elif args.kind == "bench":
        s = bench_summary(args.outdir, args.commit, gpu)
        keys, table = BENCH_KEYS, bench_table(s)
    else:
        s = window_summary(args.outdir, args.commit, gpu)
        keys, table = WINDOW_KEYS, window_table(s)
    with open(os.path.join(args.outdir, "summary.json"), "w") as f:
        json.dump(s, f, indent=2)
        f.write("\n")
    if args.update_docs:
        if gpu is None:
            print(f"gpu_report: no GPU named; {args.update_docs} left alone (only GPU measurements go there)")
        else:
            doc = update_latest(args.update_docs, s, keys)
            print(f"gpu_report: merged {', '.join(keys)} into {args.update_docs}")
            if args.update_table:
                update_markdown(args.update_table, doc)
                print(f"gpu_report: rewrote the measured table of {args.update_table}")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
