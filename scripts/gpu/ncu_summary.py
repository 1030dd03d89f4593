#!/usr/bin/env python3
"""What the GPU window's Nsight Compute profiles say, kernel by kernel (the step profile_b of
scripts/gpu/gpu_window_steps.sh; docs/cuda.md, "The GPU window").

Reads DIR/profile_<name>.csv (`ncu --import R --csv --page details`: one row per kernel
launch, section and metric, with the columns "ID", "Kernel Name", "Metric Name",
"Metric Unit" and "Metric Value") and DIR/profile_<name>.raw.csv (`--page raw`: one column
per metric, a units row, one row per launch), and gives per launch: the headline metrics
of METRICS and the three largest stall reasons of the warp state statistics (cycles per
issued instruction). A file it cannot read gives no rows, never an error: the profile is
an aid for tuning, not a result.

usage: ncu_summary.py DIR     prints one line per kernel launch; DIR/profile_summary.json too"""
import csv
import glob
import json
import os
import re
import sys

METRICS = ("Duration", "Compute (SM) Throughput", "Memory Throughput", "DRAM Throughput",
           "L1/TEX Cache Throughput", "Registers Per Thread", "Achieved Occupancy",
           "Warp Cycles Per Issued Instruction", "Issue Slots Busy", "No Eligible")
STALL = re.compile(r"smsp__average_warps?_issue_stalled_(\w+?)_per_issue_active\.ratio$")


def read_rows(path):
    try:
        with open(path, newline="") as f:
            return [r for r in csv.reader(f)]
    except OSError:
        return []


def details(path):
    """[(launch id, kernel name, {metric: "value unit"})] in launch order."""
    rows = read_rows(path)
    head = next((i for i, r in enumerate(rows) if "Metric Name" in r and "Kernel Name" in r), None)
    if head is None:
        return []
    col = {name: rows[head].index(name) for name in ("ID", "Kernel Name", "Metric Name", "Metric Unit", "Metric Value")
           if name in rows[head]}
    if len(col) < 5:
        return []
    out = {}
    for r in rows[head + 1:]:
        if len(r) <= max(col.values()) or r[col["Metric Name"]] not in METRICS:
            continue
        launch = out.setdefault(r[col["ID"]], (r[col["Kernel Name"]], {}))
        launch[1][r[col["Metric Name"]]] = f"{r[col['Metric Value']]} {r[col['Metric Unit']]}".strip()
    return [(i, name, m) for i, (name, m) in out.items()]


def stalls(path):
    """{launch id: [(reason, cycles per issued instruction)], largest three}."""
    rows = read_rows(path)
    if len(rows) < 3 or "ID" not in rows[0]:
        return {}
    idx = rows[0].index("ID")
    reasons = [(j, m.group(1)) for j, name in enumerate(rows[0]) for m in [STALL.match(name)] if m]
    out = {}
    for r in rows[2:]:  # rows[1] holds the units
        vals = []
        for j, reason in reasons:
            try:
                vals.append((reason, float(r[j].replace(",", ""))))
            except (IndexError, ValueError):
                pass
        if len(r) > idx:
            out[r[idx]] = sorted(vals, key=lambda x: -x[1])[:3]
    return out


def summarize(outdir):
    """[{"profile", "id", "kernel", "metrics", "stalls"}] of every profile in outdir."""
    out = []
    for path in sorted(glob.glob(os.path.join(outdir, "profile_*.csv"))):
        if path.endswith(".raw.csv"):
            continue
        name = os.path.basename(path)[len("profile_"):-len(".csv")]
        top = stalls(path[:-len(".csv")] + ".raw.csv")
        for i, kernel, metrics in details(path):
            out.append({"profile": name, "id": i, "kernel": kernel, "metrics": metrics, "stalls": top.get(i, [])})
    return out


def short_kernel(name):
    """The function name with its template arguments, without its return type, namespaces and
    parameter list."""
    name, depth = name.replace("(anonymous namespace)::", ""), 0
    for i, c in enumerate(name):  # the parameter list opens at the first "(" outside <...>
        depth += {"<": 1, ">": -1}.get(c, 0)
        if c == "(" and depth == 0:
            name = name[:i]
            break
    return re.sub(r"^(?:void )?(?:\w+::)*", "", name.strip())


def describe(k):
    """One launch's headline metrics and largest stalls, on one line."""
    m = ", ".join(f"{key} {k['metrics'][key]}" for key in METRICS if key in k["metrics"])
    s = ", ".join(f"{reason} {v:.1f}" for reason, v in k["stalls"])
    return m + (f"; stalls (cycles/issue): {s}" if s else "")


def line(k):
    return f"{k['profile']} #{k['id']} {short_kernel(k['kernel'])}: {describe(k)}"


def main(argv):
    if len(argv) != 2:
        print(__doc__)
        return 2
    summary = summarize(argv[1])
    with open(os.path.join(argv[1], "profile_summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    for k in summary:
        print(line(k))
    if not summary:
        print("ncu_summary: no profile rows in " + argv[1])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
