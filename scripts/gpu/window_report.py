"""The summary and table of a scripts/gpu/gpu_window.sh run (scripts/gpu/gpu_report.py window):
its tests (gpu_report.check_summary's suites), the attention timings streamed by
scripts/peers/bench_attention.py --jsonl with the predictions the pack carries, the step
benchmarks (gpu_report.bench_summary), NCCL, the sanitizers, the attention kernels'
Nsight Compute profiles (ncu_summary.py), the environment and each phase's status and
seconds."""
import json
import os
import re
import sys

import gpu_docs
import gpu_report as g
import ncu_summary

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "peers"))
import bench_attention  # noqa: E402

WINDOW_SUITES = ("primitives", "wgmma", "realistic", "attention", "flash", "kernels")
WINDOW_TOOLS = ("racecheck", "synccheck")


def read_env(outdir):
    """env.txt's "key: value" lines as a dict (the versions and library resolution)."""
    env = {}
    for line in (g.read_text(os.path.join(outdir, "env.txt")) or "").splitlines():
        key, sep, value = line.partition(": ")
        if sep and key.strip() and " " not in key.strip():
            env.setdefault(key.strip(), value.strip())
    return env


def attention_rows(outdir):
    """The rows bench_attention.py measured: attention.jsonl (written row by row, so it holds
    the rows of a cut run too), else the final report of attention.json (gpu_bench)."""
    text = g.read_text(os.path.join(outdir, "attention.jsonl"))
    if text is not None:
        rows = []
        for line in text.splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:
                pass  # a line cut mid-write
        return rows
    att = g.last_json(os.path.join(outdir, "attention.json")) or {}
    return ([dict(r, kind="torch") for r in att.get("results", [])]
            + [dict(r, kind="kdtrain") for r in att.get("kdtrain", []) + att.get("kdtrain_builds", [])])


def attention_times(rows):
    """Per head dim, per implementation: forward, backward and forward+backward ms (PyTorch
    rows by case, kdtrain rows by variant, the other builds' and choices' by label)."""
    out = {}
    for r in rows:
        if r.get("kind") == "torch" and "ms" in r:
            out.setdefault(str(r["D"]), {})[f"torch {r['case']}"] = {
                "fwd": r.get("fwd_ms"), "bwd": r.get("bwd_ms"), "fwd_bwd": r["ms"]}
        elif "fwd_bwd_ms" in r:
            out.setdefault(str(r["D"]), {})[kdtrain_name(r)] = {
                "fwd": r.get("forward_ms"), "bwd": r.get("backward_ms"), "fwd_bwd": r["fwd_bwd_ms"]}
    return out


def attention_kernel_ms(rows):
    """Per head dim, per kdtrain row (by kdtrain_name): its kernel_ms ({kernel: mean ms per
    call}, `kdtrain bench --attention-only --kernel-times`), for the rows that have one."""
    out = {}
    for r in rows:
        if "fwd_bwd_ms" in r and r.get("kernel_ms"):
            out.setdefault(str(r["D"]), {})[kdtrain_name(r)] = r["kernel_ms"]
    return out or None


def kdtrain_name(r):
    return f"kdtrain[{r['build']}] {r['attention']}" if r.get("build") else f"kdtrain {r['attention']}"


_KERNEL = re.compile(r"\b(forward|backward) kernel (\w+)")
# A build's kernel choice (scripts/gpu/kernel_choices.py: "train.attention_backward:wgmma").
_CHOICE = re.compile(r"train\.attention_(forward|backward):(\w+)")
# The backward kernels' names in scripts/gpu/attention_model.py's predictions, for a binary
# whose attention path does not name its backward kernel (one deterministic kernel, and
# the atomics timing build's).
BACKWARD_DEFAULT = {False: "bwd_main", True: "bwd_main atomics"}
# The names the attention path gives (kernels/attention/flash_forward_kernels.h,
# src/backend/cuda/attention_path.h: to_string) as the model names them: "wgmma ws" is the
# warp-specialised forward (auto's), "wgmma" the lockstep one (train.attention_forward=wgmma_lockstep).
MODEL_NAME = {"forward": {"wgmma_sm90a": "wgmma ws", "wgmma_sm90a_lockstep": "wgmma"},
              "backward": {"wgmma_sm90a": "bwd_main wgmma"}}
# A build label's kernel choice (train.attention_forward / _backward) as the path names it.
CHOICE_KERNEL = {"wgmma": "wgmma_sm90a", "wgmma_lockstep": "wgmma_sm90a_lockstep"}


def kernels_of(row):
    """{"forward": name, "backward": name} of the kernels a kdtrain row ran, as the model
    names them: the kernel its build label chose, else the one the reason of its attention
    path names ("... forward kernel wgmma_sm90a; backward kernel mma_sync"), else the
    backward's default name for its build; None for a pass nothing names."""
    build = row.get("build") or ""
    # A choice that cannot run is an error at start, so the label's choice is what ran.
    named = {pass_: CHOICE_KERNEL.get(name, name) for pass_, name in _CHOICE.findall(build)}
    for p in row.get("attention_paths") or []:
        for pass_, name in _KERNEL.findall(p.get("reason", "")):
            named.setdefault(pass_, name)
    found = {pass_: MODEL_NAME[pass_].get(name, name) for pass_, name in named.items()}
    atomic = build == bench_attention.ATOMIC_BUILD or build.startswith(bench_attention.ATOMIC_BUILD + "+")
    backward = found.get("backward")
    if backward in (None, "mma_sync"):
        backward = BACKWARD_DEFAULT[atomic]
    elif atomic:
        backward += " atomics"  # the model's name for that kernel's atomics timing build
    return {"forward": found.get("forward"), "backward": backward}


def model_variant(predictions, r, kernels):
    """The model's row (predictions.json "variants") for kdtrain row r's variant, head dim and
    the two kernels it ran, or None."""
    return next((v for v in (predictions or {}).get("variants") or [] if (v.get("D"), v.get("variant")) ==
                 (r.get("D"), r.get("attention")) and (v.get("forward"), v.get("backward")) ==
                 (kernels["forward"], kernels["backward"])), None)


def measured_vs_predicted(rows, predictions):
    """attn_fwd_ms and attn_bwd_ms: per head dim and kdtrain row (the baseline on each build
    and kernel choice, and each variant), {"measured", "kernel", "predicted"}. Predictions:
    the pack's predictions.json (scripts/gpu/attention_model.py --json): a baseline row's from
    "kernels" (each with its "kernel" name, "D" and "ms"), another variant's from "variants"
    (its own kernel instantiations and side kernels, for the two kernels the row ran); null
    where it has none."""
    predicted = {(k.get("D"), k.get("kernel")): k.get("ms") for k in (predictions or {}).get("kernels") or []}
    out = {"forward": {}, "backward": {}}
    for r in rows:
        if "fwd_bwd_ms" not in r:
            continue
        kernels = kernels_of(r)
        baseline = r.get("attention") == "baseline"
        variant = {} if baseline else model_variant(predictions, r, kernels) or {}
        for pass_, key, model_key in (("forward", "forward_ms", "fwd_ms"), ("backward", "backward_ms", "bwd_ms")):
            guess = predicted.get((r["D"], kernels[pass_])) if baseline else variant.get(model_key)
            out[pass_].setdefault(str(r["D"]), {})[kdtrain_name(r)] = {
                "measured": r.get(key), "kernel": kernels[pass_], "predicted": guess}
    return out["forward"] or None, out["backward"] or None


def variant_slowdown_vs_model(rows, predictions):
    """variant_attn_slowdown_vs_model: per head dim and variant, the measured fwd+bwd over the
    baseline's (the default build's rows) beside the model's ratio for the same two kernels
    ("variants" of predictions.json); predicted null where the model has no such row or the
    baseline ran other kernels."""
    mine = [r for r in rows if "fwd_bwd_ms" in r and not r.get("build")]
    out = {}
    for base in (r for r in mine if r.get("attention") == "baseline"):
        base_kernels = kernels_of(base)
        for r in (r for r in mine if r.get("D") == base.get("D")):
            kernels = kernels_of(r)
            v = model_variant(predictions, r, kernels) if kernels == base_kernels else None
            out.setdefault(str(r["D"]), {})[r["attention"]] = {
                "measured": r["fwd_bwd_ms"] / base["fwd_bwd_ms"], "predicted": v and v.get("slowdown"),
                "kernels": f"{kernels['forward']} + {kernels['backward']}"}
    return out or None


def fwdbwd_vs_model(rows, predictions):
    """attn_fwdbwd_vs_model: per head dim and baseline kdtrain row whose two kernels the model
    totals (predictions.json "totals", the baseline's, each with its back-test band in
    "calibrated"), the measured fwd+bwd ms beside the model's lower bound and band, and where
    the measurement falls. Other variants: variant_slowdown_vs_model."""
    totals = {(t.get("D"), t.get("forward"), t.get("backward")): t.get("calibrated")
              for t in (predictions or {}).get("totals") or []}
    out = {}
    for r in rows:
        if "fwd_bwd_ms" not in r or r.get("attention") != "baseline":
            continue
        kernels = kernels_of(r)
        c = totals.get((r.get("D"), kernels["forward"], kernels["backward"]))
        if not c:
            continue
        ms, (lo, hi) = r["fwd_bwd_ms"], c["band_ms"]
        where = ("below the lower bound" if ms < c["lower_bound_ms"] else "under the band" if ms < lo else
                 "inside the band" if ms <= hi else "above the band")
        out.setdefault(str(r["D"]), {})[kdtrain_name(r)] = {
            "measured": ms, "kernels": f"{kernels['forward']} + {kernels['backward']}",
            "lower_bound": c["lower_bound_ms"], "band": [lo, hi], "where": where}
    return out or None


def nccl_identical(log):
    """True when every NCCL training run matched dist.backend=single bit for bit, False when
    one did not, None when none was compared (gpu_check_nccl.sh's "A vs B: the same bits")."""
    verdicts = re.findall(r"^\s*\S+ vs \S+: (the same bits|DIFFERENT)\s*$", log or "", re.M)
    return None if not verdicts else all(v == "the same bits" for v in verdicts)


def cache_write(outdir):
    """cache_write_vs_teacher_forward: the tokens/s of `kdtrain teacher-cache --json`
    (cache_write.json, its last line) over the same teacher's forward-only tokens/s, `kdtrain
    eval` on the same windows, batch and T (cache_write_forward.json: tokens / seconds), with
    both rates in cache_write_tokens_per_s; null where either is missing. Then where a
    third pass with --kernel-times (cache_write_timed.json) went: its GPU ms per kernel name
    and its wall seconds, in cache_write_kernel_ms."""
    write = g.last_json(os.path.join(outdir, "cache_write.json")) or {}
    forward = g.read_json(os.path.join(outdir, "cache_write_forward.json")) or {}
    timed = g.last_json(os.path.join(outdir, "cache_write_timed.json")) or {}
    rates = {"cache_write": write.get("tokens_per_s") if write.get("tokens_written") else None,
             "teacher_forward": g.ratio(forward.get("tokens"), forward.get("seconds"))}
    kernels = None
    if timed.get("kernel_ms") is not None:
        kernels = {"seconds": timed.get("seconds"),
                   "ms": {name: t.get("ms") for name, t in sorted(timed["kernel_ms"].items())}}
    return {"cache_write_vs_teacher_forward": g.ratio(rates["cache_write"], rates["teacher_forward"]),
            "cache_write_tokens_per_s": rates, "cache_write_kernel_ms": kernels}


def window_summary(outdir, commit, gpu, gpu_run=True):
    """The summary of a gpu_window run from the files it left in `outdir`."""
    check = g.check_summary(outdir, commit, gpu, WINDOW_SUITES, WINDOW_TOOLS, gpu_run)
    s = g.bench_summary(outdir, commit, gpu)
    for k in ("tests_status", "tests_passed", "tests_failed", "tests_cut", "tests_skipped", "suites", "sanitizers"):
        s[k] = check[k]
    rows = attention_rows(outdir)
    ratios = bench_attention.summarize(rows)
    ratios["variant_attn_speedup_vs_torch_best"] = ratios.pop("variant_speedup_vs_torch_best")
    s.update({k: v or None for k, v in ratios.items()})  # null until measured
    predictions = g.read_json(os.path.join(outdir, "predictions.json"))
    s["attn_fwd_ms"], s["attn_bwd_ms"] = measured_vs_predicted(rows, predictions)
    s["attn_fwdbwd_vs_model"] = fwdbwd_vs_model(rows, predictions)
    s["variant_attn_slowdown_vs_model"] = variant_slowdown_vs_model(rows, predictions)
    s["attention_ms"] = attention_times(rows)
    s["attention_kernel_ms"] = attention_kernel_ms(rows)
    s["attention_profile"] = ncu_summary.summarize(outdir)
    s["attention_errors"] = [{k: r.get(k) for k in ("kind", "case", "attention", "variant", "build", "D", "error")}
                             for r in rows if "error" in r]
    s.update(cache_write(outdir))
    nccl = g.read_text(os.path.join(outdir, "nccl.log"))
    s["nccl"] = nccl.strip().splitlines()[-1] if nccl and nccl.strip() else None
    s["nccl_world1_identical"] = nccl_identical(nccl)
    s["env"] = read_env(outdir)
    phases = g.read_text(os.path.join(outdir, "phases.jsonl")) or ""
    s["phases"] = [json.loads(line) for line in phases.splitlines() if line.strip()]
    return s


def window_table(s):
    rows = [(f"phase {p['phase']}", f"{p['status']} ({p['seconds']} s)") for p in s["phases"]]
    for D, impls in sorted(s["attention_ms"].items()):
        for name, t in impls.items():
            rows.append((f"attention D={D} {name}: fwd / bwd / total ms",
                         f"{g.fmt(t['fwd'])} / {g.fmt(t['bwd'])} / {g.fmt(t['fwd_bwd'])}"))
    for D, per in sorted((s.get("attention_kernel_ms") or {}).items()):
        for name, kernel_ms in per.items():
            rows.append((f"attention D={D} {name} kernels (ms per call)",
                         bench_attention.kernel_times_line({"kernel_ms": kernel_ms})))
    for pass_, key in (("fwd", "attn_fwd_ms"), ("bwd", "attn_bwd_ms")):
        for D, per in sorted((s.get(key) or {}).items()):
            for name, t in per.items():
                if t["predicted"] is not None:
                    rows.append((f"attention D={D} {name} {pass_} ({t['kernel']}): measured / predicted ms",
                                 f"{g.fmt(t['measured'])} / {g.fmt(t['predicted'])}"))
    for D, per in sorted((s.get("attn_fwdbwd_vs_model") or {}).items()):
        for name, t in per.items():
            rows.append((f"attention D={D} {name} fwd+bwd ({t['kernels']}): measured / model lower bound, band ms",
                         f"{g.fmt(t['measured'])} / {g.fmt(t['lower_bound'])}, {g.fmt(t['band'][0])}-"
                         f"{g.fmt(t['band'][1])} ({t['where']})"))
    for D, per in sorted((s.get("variant_attn_slowdown_vs_model") or {}).items()):
        for variant, t in per.items():
            rows.append((f"variant_attn_slowdown D={D} {variant} ({t['kernels']}): measured / model",
                         f"{g.fmt(t['measured'])} / {g.fmt(t['predicted'])}"))
    for k in s.get("attention_profile") or []:
        rows.append((f"profile {k['profile']} #{k['id']} {ncu_summary.short_kernel(k['kernel'])}",
                     ncu_summary.describe(k)))
    for e in s.get("attention_errors") or []:
        name = e.get("case") or kdtrain_name({"build": e.get("build"), "attention": e.get("variant")})
        rows.append((f"attention D={e['D']} {name}", f"error: {str(e['error'])[-120:]}"))
    cost = s["attn_determinism_cost"] or {}
    rows.append(("attn_determinism_cost (deterministic / atomics - 1)",
                 ", ".join(f"D={d}: {g.fmt(x, '{:+.1%}')}" for d, x in sorted(cost.items())) or "not measured"))
    for d, per in sorted((s.get("attn_determinism_cost_by_choice") or {}).items()):
        for choice, x in sorted(per.items()):
            rows.append((f"attn_determinism_cost D={d} {choice}", g.fmt(x, "{:+.1%}")))
    rows.append(("cache write / teacher forward (teacher-cache / eval tokens/s)", gpu_docs.cache_write_text(s)))
    timed = s.get("cache_write_kernel_ms")
    if timed:
        rows.append(("cache write, --kernel-times pass: GPU ms per kernel, of its wall ms",
                     ", ".join(f"{n} {g.fmt(ms, '{:.1f}')}" for n, ms in timed["ms"].items()) +
                     f" of {g.fmt(None if timed['seconds'] is None else timed['seconds'] * 1000, '{:.1f}')}"))
    identical = s["nccl_world1_identical"]
    rows.append(("NCCL at world size 1", (s["nccl"] or "not run") +
                 ("" if identical is None else f" (training bit-identical to single: {identical})")))
    rows += g.bench_rows(s)
    # The test verdict last, as gpu_check's table ends (no training run in the window).
    check = g.check_rows(dict(s, train_max_rel_loss_diff_cuda_vs_cpu=None, train_steps_cuda=0))
    rows += [r for r in check if not r[0].startswith("train ")]
    return g.format_table(("window", "result"), rows)
