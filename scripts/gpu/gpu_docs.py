"""docs/gpu/: what a GPU session measured, kept in the repository (scripts/gpu/gpu_report.py).

- docs/gpu/latest.json: one session's keys (WINDOW_KEYS, each null until measured; never
  an estimate) for one commit and GPU: each script's or window's measurements replace the
  earlier ones, and what it did not measure keeps the earlier value (a second, shorter
  window of the same build adds to the first instead of erasing it);
- docs/gpu/DATE-COMMIT/ (DATE-COMMIT-2, -3 for later windows of that day and commit): the
  files a window returned (env.txt, window.log, summary.json, table.txt, raw.tgz);
- the measured table of docs/performance.md, rewritten from latest.json.

import_window(DIR) does all three from a window's output folder: on the GPU machine after
each step with --update-docs, or here from the folder the device tool returned.
"""
import json
import os
import shutil

import gpu_report as g
from gpu_report import VARIANTS, fmt

# Keys each script contributes to docs/gpu/latest.json.
CHECK_KEYS = ("tests_passed", "tests_failed", "tests_status", "tests_skipped")
BENCH_KEYS = ("attn_fwdbwd_vs_sdpa", "variant_attn_slowdown", "step_speedup_vs_torch_compile",
              "step_speedup_vs_torch_with_teacher", "mfu_1b_t2048", "peak_device_bytes",
              "peak_device_bytes_torch_compile", "bench_config", "cached_teacher_step_vs_student",
              "peak_device_bytes_with_teacher", "peak_device_bytes_torch_with_teacher")
# The window's: every key of the GPU issue's "done" list, then the rest it measures.
WINDOW_KEYS = ("tests_passed", "tests_failed", "tests_cut", "attn_fwd_ms", "attn_bwd_ms",
               "attn_fwdbwd_vs_sdpa", "variant_attn_slowdown", "attn_determinism_cost",
               "step_speedup_vs_torch_compile", "mfu_1b_t2048", "nccl_world1_identical",
               "cached_teacher_step_vs_student", "cache_write_vs_teacher_forward", "cache_write_tokens_per_s",
               "peak_device_bytes", "peak_device_bytes_torch_compile",
               "tests_status", "tests_skipped", "bench_config", "step_speedup_vs_torch_with_teacher",
               "peak_device_bytes_with_teacher", "peak_device_bytes_torch_with_teacher", "attention_ms",
               "attn_fwdbwd_vs_model", "variant_attn_slowdown_vs_model")
# The tests' keys: unmeasured, all of them, from a window that ran no suite.
TEST_KEYS = ("tests_passed", "tests_failed", "tests_cut", "tests_status", "tests_skipped")
# Files of a window's output folder kept in docs/gpu/DATE-COMMIT/ (raw.tgz up to RAW_LIMIT).
WINDOW_FILES = ("env.txt", "window.log", "summary.json", "table.txt", "raw.tgz")
RAW_LIMIT = 4 * 2**20


def measured(value):
    """`value`, or None when it holds no measurement (None, or a dict of nothing but None)."""
    if isinstance(value, dict):
        return value if any(measured(v) is not None for v in value.values()) else None
    return value


def latest_doc(summary, keys=WINDOW_KEYS):
    """The latest.json object of one run: commit, gpu and `keys`, each null when not measured."""
    doc = {"commit": summary["commit"], "gpu": summary["gpu"]}
    no_tests = summary.get("tests_status") == "not run"
    doc.update({k: None if no_tests and k in TEST_KEYS else measured(summary.get(k)) for k in keys})
    return doc


def merged(old, new):
    """`new` over `old`: what `new` measured replaces `old`'s value, what it did not keeps it,
    key by key inside per-variant and per-head-dim objects too."""
    if isinstance(old, dict) and isinstance(new, dict):
        return measured({**old, **{k: merged(old.get(k), v) for k, v in new.items()}})
    return old if measured(new) is None else new


def update_latest(path, summary, keys):
    """Merges `keys` of `summary` into the JSON file at `path` (merged: a key it did not
    measure keeps the file's value); starts the file over when its commit or GPU differs
    from the summary's. Returns the merged object."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        doc = {}
    if doc.get("commit") != summary["commit"] or doc.get("gpu") != summary["gpu"]:
        doc = {}
    doc.update({k: merged(doc.get(k), v) for k, v in latest_doc(summary, keys).items()})
    g.write_json(path, doc)
    return doc


TABLE_BEGIN = "<!-- gpu_report: measured table begin -->"
TABLE_END = "<!-- gpu_report: measured table end -->"


def cache_write_text(doc):
    """The cache write's ratio and its two rates, "0.93x (152,000 / 163,000)", or "not measured"."""
    rates = measured(doc.get("cache_write_tokens_per_s")) or {}
    if not rates:
        return "not measured"
    return (f"{fmt(doc.get('cache_write_vs_teacher_forward'), '{:.2f}x')} ({fmt(rates.get('cache_write'), '{:,.0f}')}"
            f" / {fmt(rates.get('teacher_forward'), '{:,.0f}')})")


def markdown_table(doc):
    """docs/gpu/latest.json as the markdown table of docs/performance.md."""
    def per_variant(key, pattern):
        values = doc.get(key) or {}
        return ", ".join(f"{v} {fmt(values.get(v), pattern)}" for v in VARIANTS) if values else "not measured"

    def per_dim(key, pattern="{:.2f}"):
        values = doc.get(key) or {}
        return ", ".join(f"D={d}: {fmt(x, pattern)}" for d, x in sorted(values.items())) or "not measured"

    def gib(key, v="baseline"):
        x = (doc.get(key) or {}).get(v)
        return fmt(x / 2**30 if x else None, "{:.1f} GiB")

    slow = doc.get("variant_attn_slowdown") or {}
    rows = [
        ("commit, GPU", f"{str(doc.get('commit'))[:12]}, {doc.get('gpu')}"),
        ("bench config", json.dumps(doc.get("bench_config")) if doc.get("bench_config") else "not measured"),
        ("tests passed / failed / cut (status)",
         f"{fmt(doc.get('tests_passed'), '{}')} / {fmt(doc.get('tests_failed'), '{}')} / "
         f"{fmt(doc.get('tests_cut'), '{}')} ({doc.get('tests_status') or 'not run'})"),
        ("attn_fwdbwd_vs_sdpa (SDPA time / kdtrain)", per_dim("attn_fwdbwd_vs_sdpa")),
        ("attn_determinism_cost (deterministic / atomics build - 1)", per_dim("attn_determinism_cost", "{:+.1%}")),
    ]
    for key, pass_ in (("attn_fwd_ms", "forward"), ("attn_bwd_ms", "backward")):
        for d, per in sorted((doc.get(key) or {}).items()):
            rows.append((f"attention {pass_} ms, D={d}: measured (predicted)",
                         ", ".join(f"{name} [{t['kernel'] or '?'}] {fmt(t['measured'], '{:.3f}')} "
                                   f"({fmt(t['predicted'], '{:.3f}')})" for name, t in per.items())))
    rows += [(f"variant_attn_slowdown, D={d}", ", ".join(f"{v} {fmt(x, '{:.2f}')}" for v, x in per.items()))
             for d, per in sorted(slow.items())] or [("variant_attn_slowdown", "not measured")]
    identical = doc.get("nccl_world1_identical")
    rows += [
        ("step_speedup_vs_torch_compile", per_variant("step_speedup_vs_torch_compile", "{:.2f}x")),
        ("step_speedup_vs_torch_with_teacher", per_variant("step_speedup_vs_torch_with_teacher", "{:.2f}x")),
        ("mfu_1b_t2048", per_variant("mfu_1b_t2048", "{:.1%}")),
        ("cached_teacher_step_vs_student", per_variant("cached_teacher_step_vs_student", "{:.2f}x")),
        ("cache_write_vs_teacher_forward (teacher-cache / eval tokens/s)", cache_write_text(doc)),
        ("peak device memory, baseline: kdtrain / torch.compile",
         f"{gib('peak_device_bytes')} / {gib('peak_device_bytes_torch_compile')}"),
        ("nccl_world1_identical", "not measured" if identical is None else str(identical).lower()),
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
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def run_folder(gpu_dir, summary):
    """gpu_dir/DATE-COMMIT (the run's UTC date from env.txt, the commit's first 7
    characters), or DATE-COMMIT-2, -3 ... where an earlier window of that date and commit
    holds it (the same window imported again goes back to its own folder)."""
    date = str((summary.get("env") or {}).get("date") or "")[:10] or "undated"
    base = os.path.join(gpu_dir, f"{date}-{str(summary['commit'])[:7]}")
    folder, n = base, 1
    while os.path.isdir(folder) and g.read_json(os.path.join(folder, "summary.json")) not in (None, summary):
        n += 1
        folder = f"{base}-{n}"
    return folder


def import_window(window_dir, docs_root):
    """A window's output folder (its summary.json and the files beside it) into `docs_root`:
    gpu/latest.json, gpu/DATE-COMMIT/ and the table of performance.md. Refuses a run that
    named no GPU (only GPU measurements go there). Returns the exit status."""
    summary = g.read_json(os.path.join(window_dir, "summary.json"))
    if summary is None:
        print(f"gpu_report import: {window_dir}/summary.json is missing or not JSON")
        return 2
    if not summary.get("gpu"):
        print(f"gpu_report import: {window_dir} names no GPU; docs left alone (only GPU measurements go there)")
        return 2
    latest = os.path.join(docs_root, "gpu", "latest.json")
    doc = update_latest(latest, summary, WINDOW_KEYS)
    folder = run_folder(os.path.join(docs_root, "gpu"), summary)
    os.makedirs(folder, exist_ok=True)
    kept = []
    for name in WINDOW_FILES:
        src = os.path.join(window_dir, name)
        if os.path.isfile(src) and (name != "raw.tgz" or os.path.getsize(src) <= RAW_LIMIT):
            shutil.copyfile(src, os.path.join(folder, name))
            kept.append(name)
    update_markdown(os.path.join(docs_root, "performance.md"), doc)
    print(f"gpu_report import: {latest}, {folder}/ ({', '.join(kept)}), "
          f"the measured table of {docs_root}/performance.md")
    return 0
