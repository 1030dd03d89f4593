#!/usr/bin/env python3
"""Summaries of a GPU session for scripts/gpu/gpu_window.sh, gpu_check.sh and gpu_bench.sh: reads
the raw outputs they leave in $OUT, writes one JSON summary, optionally merges its
keys into docs/gpu/latest.json, and prints a short table (the scripts' last output).

  python3 scripts/gpu/gpu_report.py check OUT/check --commit C --gpu G [--device D] [--update-docs PATH]
  python3 scripts/gpu/gpu_report.py bench OUT/bench --commit C --gpu G [--update-docs PATH]
  python3 scripts/gpu/gpu_report.py window RAW --commit C --gpu G [--device D]
  python3 scripts/gpu/gpu_report.py import WINDOW_DIR [--docs-root docs]
  python3 scripts/gpu/gpu_report.py suite DIR --name NAME [--device D]

`window` also writes RAW/latest.json (the keys of docs/gpu/latest.json, scripts/gpu/gpu_docs.py)
when a GPU is named; `import` puts a returned window folder into the docs.

docs/gpu/latest.json holds one session's measurements: when the commit or the GPU of
the new keys differs from the file's, the file starts over, so keys measured on
different commits or GPUs never sit side by side. Nothing here invents a number:
a value that was not measured is null, and the table says "not measured".

On a GPU run (--device cuda, the default) a test case that skipped itself is never a
pass: it is counted as skipped, and its suite's status is "skipped".
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


def suite_summary(outdir, name, gpu_run=True):
    """One test suite of a GPU script from DIR/tests_NAME.{txt,names,meta.json} (None when it
    never started). Status: passed, failed, skipped (a case skipped itself on a GPU run),
    cut (stopped by the script's timer, or never started for want of time: "cut at N s"),
    no summary (the binary died), no tests. A cut suite counts a case passed only when its
    end was seen with no failure, and not the last one seen (it may have had sections left);
    the rest of the listed cases are `test_cases_cut`."""
    log = read_text(os.path.join(outdir, f"tests_{name}.txt"))
    meta = read_json(os.path.join(outdir, f"tests_{name}.meta.json")) or {}
    if log is None and not meta:
        return None
    names_text = read_text(os.path.join(outdir, f"tests_{name}.names"))
    names = [n for n in names_text.splitlines() if n.strip()] if names_text is not None else None
    listed = meta.get("listed")
    s = catch2_summary.parse(log or "", listed)
    s.update(exit_code=meta.get("exit_code"), filter=meta.get("filter"), seconds=meta.get("seconds"),
             test_cases_cut=0)
    cases, failing_at_cut = catch2_summary.case_outcomes(log or "", names) if names is not None else ([], False)
    skipped = sum(c["skipped"] and not c["failed"] for c in cases) if names is not None else s["skipped"]
    if meta.get("skipped") or meta.get("cut") or (meta and "exit_code" not in meta and "skipped" not in meta):
        done = cases[:-1] if cases and not cases[-1]["failed"] else cases
        failed = sum(c["failed"] for c in done) + int(failing_at_cut)
        skipped = sum(c["skipped"] and not c["failed"] for c in done)
        passed = sum(not c["failed"] and not c["skipped"] for c in done) + (0 if gpu_run else skipped)
        s.update(status="cut", summary=None, cut_at=0 if meta.get("skipped") else meta.get("limit"),
                 test_cases_passed=passed if names is not None else None,
                 test_cases_failed=failed if names is not None else None,
                 test_cases_cut=(listed or 0) - passed - failed - (skipped if gpu_run else 0))
        if meta.get("skipped"):
            s["reason"] = meta["skipped"]
    elif gpu_run and skipped and s["test_cases_passed"] is not None:
        s["test_cases_passed"] -= skipped
        if s["status"] == "passed":
            s["status"] = "skipped"
    s["skipped"] = skipped
    return s


def tests_status(suites):
    """The verdict of several suites: the worst of failed, incomplete (a binary died or
    selected nothing), cut, skipped, passed; "not run" without any."""
    statuses = {t["status"] for t in suites.values()}
    if not statuses:
        return "not run"
    for status, when in (("failed", {"failed"}), ("incomplete", {"no summary", "no tests"}),
                         ("cut", {"cut"}), ("skipped", {"skipped"})):
        if statuses & when:
            return status
    return "passed"


def tests_counts(suites):
    """tests_passed (null when a suite's count is unknown), tests_failed, tests_cut, tests_skipped."""
    values = list(suites.values())
    known = [t["test_cases_passed"] for t in values]
    return {
        "tests_passed": sum(known) if values and None not in known else None,
        "tests_failed": sum(t["test_cases_failed"] or 0 for t in values) if values else None,
        "tests_cut": sum(t.get("test_cases_cut") or 0 for t in values) if values else None,
        "tests_skipped": sum(t["skipped"] for t in values),
    }


def sanitizer_summary(outdir, tool):
    meta = read_json(os.path.join(outdir, f"{tool}.meta.json"))
    if meta is None:
        return None
    if meta.get("skipped"):
        return {"status": "not run", "reason": meta["skipped"]}
    text = read_text(os.path.join(outdir, f"{tool}.txt")) or ""
    s = parse_sanitizer(text, meta.get("exit_code"), meta.get("timed_out", False))
    s["filter"] = meta.get("filter")
    s["seconds"] = meta.get("seconds")
    return s


def check_summary(outdir, commit, gpu, suite_names=("cuda", "realistic"), tools=("memcheck", "racecheck"),
                  gpu_run=True):
    """The summary of a gpu_check run (or the test part of a gpu_window run) from the files
    it left in `outdir`."""
    suites = {n: t for n in suite_names if (t := suite_summary(outdir, n, gpu_run)) is not None}
    sanitizers = {tool: t for tool in tools if (t := sanitizer_summary(outdir, tool)) is not None}
    cpu = train_losses(os.path.join(outdir, "train_cpu"))
    cuda = train_losses(os.path.join(outdir, "train_cuda"))
    return {
        "commit": commit, "gpu": gpu,
        "tests_status": tests_status(suites),
        **tests_counts(suites),
        "suites": suites,
        "sanitizers": sanitizers,
        "train_steps_cuda": len(cuda), "train_steps_cpu": len(cpu),
        "train_max_rel_loss_diff_cuda_vs_cpu": max_rel_diff(cuda, cpu),
    }


def check_table(s):
    return format_table(("check", "result"), check_rows(s))


def suite_row(name, t):
    passed = "?" if t["test_cases_passed"] is None else t["test_cases_passed"]
    failed = "?" if t["test_cases_failed"] is None else t["test_cases_failed"]
    status = t["status"]
    if status == "cut":
        status = f"not run ({t['reason']})" if t.get("reason") else f"cut at {t.get('cut_at')} s"
    counts = f"{passed} passed, {failed} failed, {t['skipped']} skipped"
    if t.get("test_cases_cut"):
        counts += f", {t['test_cases_cut']} cut"
    return f"tests {name} {t.get('filter') or ''}".strip(), f"{status}: {counts}"


def check_rows(s):
    rows = [suite_row(name, t) for name, t in s["suites"].items()]
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


# ----------------------------------------------------------------- shared

def format_table(header, rows):
    width = max(len(header[0]), *(len(r[0]) for r in rows)) if rows else len(header[0])
    lines = [f"{header[0]:<{width}}  {header[1]}", f"{'-' * width}  {'-' * len(header[1])}"]
    lines += [f"{a:<{width}}  {b}" for a, b in rows]
    return "\n".join(lines)


def write_json(path, doc):
    """`doc` into `path` whole or not at all (a temporary file, then a rename)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def main(argv=None):
    import gpu_docs
    import window_report
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kind", choices=("check", "bench", "window", "import", "suite"))
    ap.add_argument("outdir")
    ap.add_argument("--commit", default="")
    ap.add_argument("--gpu", default="")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                    help="cuda (default): a test case that skipped itself is not a pass")
    ap.add_argument("--update-docs", metavar="PATH", default="",
                    help="check, bench: merge the measured keys into this JSON file (docs/gpu/latest.json)")
    ap.add_argument("--update-table", metavar="PATH", default="",
                    help="with --update-docs: rewrite the measured table of this markdown file from the JSON")
    ap.add_argument("--docs-root", default="docs", help="import: the docs folder to write")
    ap.add_argument("--name", default="", help="suite: the suite's name (OUTDIR/tests_NAME.*)")
    args = ap.parse_args(argv)
    if args.kind == "suite":  # one line on one suite, as the scripts print it after running it
        t = suite_summary(args.outdir, args.name, args.device == "cuda")
        print("   " + ": ".join(suite_row(args.name, t)) if t else f"   {args.name}: no output")
        return 0
    if args.kind == "import":
        return gpu_docs.import_window(args.outdir, args.docs_root)
    if not args.commit:
        ap.error(f"{args.kind} needs --commit")
    gpu = args.gpu or None
    gpu_run = args.device == "cuda"
    if args.kind == "check":
        s = check_summary(args.outdir, args.commit, gpu, gpu_run=gpu_run)
        keys, table = gpu_docs.CHECK_KEYS, check_table(s)
    elif args.kind == "bench":
        s = bench_summary(args.outdir, args.commit, gpu)
        keys, table = gpu_docs.BENCH_KEYS, bench_table(s)
    else:
        s = window_report.window_summary(args.outdir, args.commit, gpu, gpu_run)
        keys, table = gpu_docs.WINDOW_KEYS, window_report.window_table(s)
        if gpu is not None and gpu_run:
            write_json(os.path.join(args.outdir, "latest.json"), gpu_docs.latest_doc(s))
    with open(os.path.join(args.outdir, "summary.json"), "w") as f:
        json.dump(s, f, indent=2)
        f.write("\n")
    if args.update_docs:
        if gpu is None:
            print(f"gpu_report: no GPU named; {args.update_docs} left alone (only GPU measurements go there)")
        else:
            doc = gpu_docs.update_latest(args.update_docs, s, keys)
            print(f"gpu_report: merged {', '.join(keys)} into {args.update_docs}")
            if args.update_table:
                gpu_docs.update_markdown(args.update_table, doc)
                print(f"gpu_report: rewrote the measured table of {args.update_table}")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
