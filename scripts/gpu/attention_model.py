#!/usr/bin/env python3
"""Performance model of the attention kernels, rerunnable without a GPU: compiles the
forward (mma.sync, sm_90; wgmma, sm_90a) and the backward (the mma.sync build, sm_90, and
the wgmma build of its main kernel, sm_90a; each deterministic and as the atomics timing
build, whose ratio is attn_determinism_cost) with nvcc, reads each kernel's per-tile SASS instruction counts
(cuobjdump -sass) and resource report (ptxas -v), and prints predicted times at one shape
(default: the benchmark's B 8, T 2048, H*D 2048, GQA 4, causal, bf16, H100 SXM).

A prediction, never a measurement: every rate below is an assumption, printed with the
result and written to the JSON (--json FILE) that scripts/gpu/gpu_window.sh can put beside its
measured times. docs/attention_model.md explains the terms.
A lower bound, too: back-tested on kernels an H100 measured and on today's, which an H200
measured (CALIBRATION), the method predicted too low every time, so each fwd+bwd total is
printed with the band those back-tests imply (per pass) and the bias the model may have
before the target is missed; beside it, each kernel's no-overlap estimate. Each attention
variant is predicted too (its own kernel instantiations plus the side kernels it runs),
against the baseline and the variant_attn_slowdown target.

usage: attention_model.py [--json FILE] [--sass-dir DIR] [--B 8 --T 2048 --HD 2048 --gqa 4]
  --sass-dir: reuse DIR/{fwd,fwd_sm90a,bwd,bwd_atomic,bwd_sm90a,bwd_sm90a_atomic}.{sass,ptxas} instead of compiling.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bwd_sass_check import functions  # noqa: E402  (same folder)
from attention_model_variants import variant_rows, variants_line  # noqa: E402  (same folder)
from attention_model_measured import H200  # noqa: E402  (same folder)
from attention_model_sass import (greedy_efficiency, kernel, loop_counts, loops, masked_branches,  # noqa: E402,F401
                                  no_overlap_clk, outer_loop, pipe_clocks, registers, tile_counts)

ROOT = next(str(p) for p in Path(__file__).resolve().parents if (p / "kernels" / "attention").is_dir())

# Assumptions (H100 SXM5, 132 SMs). Rates per SM per clock.
ASSUME = {
    "clock_ghz": 1.755,          # sustained under a long tensor-core load
    "sms": 132,
    "hmma16816_per_clk": 0.70,   # mma.sync m16n8k16 bf16: ~70% of the dense tensor peak
    "wgmma_fma_per_clk": 2048 * 0.85,  # dense bf16 peak 2048 FMA/clk, 85% reached by wgmma
    "smem_bytes_per_clk": 128,   # LDSM / LDS / STS / LDGSTS landing, and wgmma shared operands
    "mufu_lanes_per_clk": 16,    # ex2 / lg2
    "issue_per_clk": 4,          # one warp instruction per SM sub-partition
    "overhead": 0.10,            # barriers and dependency stalls on top of the busiest pipe
    "l2_tbs": 5.5,               # SM <-> L2 bandwidth, whole GPU, TB/s
    "hbm_tbs": 3.0,              # reached HBM bandwidth, TB/s (3.35 peak)
    "launch_us": 3.0,            # per kernel launch in a stream
    "bwd_sub_tiles": 2,          # trip count of the backward's rolled query sub-tile loop
    "bwd_item_overhead_clk": 2500,  # per work item: K/V + first step unhidden, last dq flush, dk/dv
    "bwd_dq_thread0_clk": 250,   # per step: thread 0's acquire + release fences, half exposed (mma.sync)
    "l2_round_trip_clk": 600,    # one gpu-scope load or fence completing at L2 under load (a guess)
    "bwd_writer_round_trips": 2,  # sm_90a writer warp per dq tile, in series: poll, release
    "bwd_chain_lag_steps": 0.25,  # first ticket chunk: key tile kt starts this many steps behind kt - 1
    "bwd_chunk_groups": 8,       # kBwdChunkGroups (flash_backward_args.h)
}


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def find_tool(name, nvcc):
    for d in [os.path.dirname(nvcc)] + [os.path.join(p, "cu13", "bin") for p in _nvidia_paths()]:
        if os.path.exists(os.path.join(d, name)):
            return os.path.join(d, name)
    return None


def _nvidia_paths():
    try:
        import nvidia
        return list(nvidia.__path__)
    except ImportError:
        return []


BUILDS = {  # name: (source, arch flags, defines)
    "fwd": ("kernels/attention/flash_forward.cu", ["-arch=sm_90"], []),
    "fwd_sm90a": ("kernels/attention/flash_forward_sm90a.cu", ["-gencode", "arch=compute_90a,code=sm_90a"], []),
    "bwd": ("kernels/attention/flash_backward.cu", ["-arch=sm_90"], []),
    "bwd_atomic": ("kernels/attention/flash_backward.cu", ["-arch=sm_90"], ["-DKDTRAIN_ATTN_ATOMIC_DQ=1"]),
    "bwd_sm90a": ("kernels/attention/flash_backward_sm90a.cu", ["-gencode", "arch=compute_90a,code=sm_90a"], []),
    "bwd_sm90a_atomic": ("kernels/attention/flash_backward_sm90a.cu", ["-gencode", "arch=compute_90a,code=sm_90a"],
                         ["-DKDTRAIN_ATTN_ATOMIC_DQ=1"]),
}
# Compiled beside them for load_order_check.py (the SASS checks of the side kernels), not modelled.
SIDE_BUILDS = {"scan": ("kernels/attention/prefix_scan.cu", ["-arch=sm_90"], [])}


def compile_all(out):
    nvcc = os.environ.get("NVCC") or "nvcc"
    cuobjdump = find_tool("cuobjdump", run(["which", nvcc]).stdout.strip())
    if cuobjdump is None:
        sys.exit("attention_model: no cuobjdump (CUDA toolkit, or pip install -r requirements-cuda-tools.txt)")
    for name, (src, arch, defs) in {**BUILDS, **SIDE_BUILDS}.items():
        cubin = os.path.join(out, name + ".cubin")
        r = run([nvcc, "-std=c++17", *arch, "--expt-relaxed-constexpr", "-Isrc", "-I.", *defs, "-cubin",
                 "-Xptxas", "-v", src, "-o", cubin], cwd=ROOT)
        open(os.path.join(out, name + ".ptxas"), "w").write(r.stderr)
        sass = run([cuobjdump, "-sass", cubin], env=dict(os.environ, PATH=os.path.dirname(cuobjdump) + ":" +
                                                        os.environ.get("PATH", ""))).stdout
        open(os.path.join(out, name + ".sass"), "w").write(sass)



def masked_fraction(T, br, bc, wgmma):
    """The share of the forward's softmax passes that take the masked branch. The wgmma
    forward masks each block's last key tile only (block-uniform, Bc = Br); the mma.sync
    forward masks, per 16-row m-tile, the key tiles that cross its diagonal, of those the
    m-tile does not skip (flash_forward_kernel.cuh: active, diag)."""
    masked = total = 0
    for qt in range(-(-T // br)):
        i0 = qt * br
        n_kt = sum(1 for kt in range(-(-T // bc)) if kt * bc <= i0 + br - 1)
        if wgmma:
            masked, total = masked + 1, total + n_kt
            continue
        for mrow in range(0, br, 16):
            for j0 in range(0, n_kt * bc, bc):
                if j0 <= i0 + mrow + 15:
                    total += 1
                    masked += j0 + bc - 1 > i0 + mrow
    return masked / total


def forward(fns, regs, shape, d, a, wgmma, sink=False, affine=False):
    T = shape["T"]
    flags = f"ELb{int(sink)}ELb{int(affine)}E"  # the kernels' <D, kSink, kAffine>
    if wgmma:
        name, ins = kernel(fns, rf"flash_forward_sm90a_kernelILi{d}{flags}")
        warps, br, bc = 8, 128, 128
    else:
        name, ins = kernel(fns, rf"flash_forward_kernelILi{d}ELi(\d+)ELi(\d+)ELi(\d+){flags}")
        br, bc, warps = (int(x) for x in re.search(rf"kernelILi{d}ELi(\d+)ELi(\d+)ELi(\d+)E", name).groups())
    f_masked = masked_fraction(T, br, bc, wgmma)
    c = tile_counts(ins, masked_fraction=f_masked)
    clk, bound, pipes = pipe_clocks(c, warps, a)
    ctas = max(1, min(65536 // (max(regs.get(name, 255), 1) * 32 * warps), 2 if not wgmma else 1))
    return forward_schedule({"kernel": "wgmma" if wgmma else "mma_sync", "D": d, "tile": [br, bc], "warps": warps,
                             "registers": regs.get(name), "ctas_per_sm": ctas, "masked_fraction": f_masked,
                             "per_tile_per_warp": c, "pipes_clk": pipes, "bound": bound, "tile_clk": clk}, shape, a)


# flash_forward_sm90a_ws_kernel.cuh (ForwardSm90aWs): two consumer warpgroups, one producer.
WS_CONSUMER_WARPS, WS_PRODUCER_WARPS = 8, 4


def forward_ws(fns, regs, shape, d, a, sink=False, affine=False):
    """The warp-specialised wgmma forward, auto's on sm_90a: per key tile, the consumer
    warps' loop (S and P V issued, the softmax, masked on the block's last tile as in the
    lockstep kernel) and the producer warps' (K and V: its rolled copy loop runs
    Bc * D / 8 / 128 = D / 8 trips per tile for each), their pipes added, as they share the
    SM's issue slots and shared memory; the schedule is the lockstep kernel's (one block
    per SM, the same tiles)."""
    br = bc = 128
    name, ins = kernel(fns, rf"flash_forward_sm90a_ws_kernelILi{d}ELb{int(sink)}ELb{int(affine)}E")
    f_masked = masked_fraction(shape["T"], br, bc, True)
    consumer = loop_counts(ins, *outer_loop(ins, ("HGMMA",), "consumer"), masked_fraction=f_masked)
    producer = loop_counts(ins, *outer_loop(ins, ("LDGSTS", "BAR"), "producer"),
                           inner_trips=bc * (d // 8) // (32 * WS_PRODUCER_WARPS), inner_ops=("LDGSTS",))
    clk, bound, pipes = pipe_clocks(consumer, WS_CONSUMER_WARPS, a, [(producer, WS_PRODUCER_WARPS)])
    return forward_schedule({"kernel": "wgmma ws", "D": d, "tile": [br, bc],
                             "warps": WS_CONSUMER_WARPS + WS_PRODUCER_WARPS, "registers": regs.get(name),
                             "ctas_per_sm": 1, "masked_fraction": f_masked,
                             "per_tile_per_warp": {"consumer": consumer, "producer": producer},
                             "pipes_clk": pipes, "bound": bound, "tile_clk": clk}, shape, a)


def forward_schedule(k, shape, a):
    """A forward kernel k (its "tile", "ctas_per_sm", "tile_clk" and "pipes_clk") at the
    shape: one block per (b, h, query tile), heaviest first, list-scheduled on the SMs'
    block slots; adds its ms, its slot efficiency and its no-overlap estimate."""
    B, T, H = shape["B"], shape["T"], shape["HD"] // k["D"]
    (br, bc), ctas, clk = k["tile"], k["ctas_per_sm"], k["tile_clk"]
    n_qt = -(-T // br)
    per_block = [sum(1 for kt in range(-(-T // bc)) if kt * bc <= (qt + 1) * br - 1) for qt in range(n_qt)]
    durations = [n * clk for _ in range(B * H) for n in reversed(per_block)]
    eff = greedy_efficiency([d_ * ctas for d_ in durations], a["sms"] * ctas)
    pairs = sum(per_block) * B * H

    def ms(tile_clk):  # the durations scale with the tile, so eff does not change
        return pairs * tile_clk / a["sms"] / eff / (a["clock_ghz"] * 1e6) + a["launch_us"] / 1e3
    serial = no_overlap_clk(k["pipes_clk"])
    return dict(k, tile_pairs=pairs, slot_efficiency=eff, ms=ms(clk), no_overlap_clk=serial, no_overlap_ms=ms(serial))


def dq_writer_warp_clk(d, br, a):
    """Clocks per dq tile of the sm_90a build's writer warp (flash_backward_dq_warp.cuh).
    Lane 0's loop, step s: poll tile s's semaphore (a round trip), issue its bulk group and
    wait until it has read the tile (the tile's bytes at one SM's share of L2), then wait
    for step s - 1's group to complete and release that tile (st.release: a round trip).
    So the writer issues a tile every poll + read + release. A group's completion (its
    read, then a round trip) is waited for one step after its issue, after a release, a
    poll and the next tile's read: hidden, so not charged (assumed from the PTX semantics:
    neither the read wait nor the release's gpu-scope fence waits for the newer group's
    writes; if one did, the completion would be in series again). Before two tiles were
    in flight it was in series: 3 round trips plus the read."""
    l2_bytes_per_clk = a["l2_tbs"] * 1e12 / a["sms"] / (a["clock_ghz"] * 1e9)
    return a["bwd_writer_round_trips"] * a["l2_round_trip_clk"] + br * d * 4 / l2_bytes_per_clk


def writer_bound_round_trip(mma_clk, d, br, a):
    """The L2 round trip (a guess in ASSUME) above which the writer warp, not the MMA warps'
    mma_clk, bounds the step: the writer's time is linear in it."""
    fixed = dq_writer_warp_clk(d, br, dict(a, l2_round_trip_clk=0))
    return (mma_clk - fixed) / a["bwd_writer_round_trips"]


def backward_main_ms(order, clk, chain_lag_steps, a):
    """(ms, slot efficiency) of the backward's main kernel: work items of `order` steps each
    at clk per step plus the per-item overhead, list-scheduled in ticket order, and the first
    chunk's settling (chain_lag_steps steps, once)."""
    item_clk = [s * clk + a["bwd_item_overhead_clk"] for s in order]
    eff = greedy_efficiency(item_clk, a["sms"])
    main_clk = sum(item_clk) / a["sms"] / eff + chain_lag_steps * clk
    return main_clk / (a["clock_ghz"] * 1e6), eff


def backward(fns, regs, shape, d, a, atomic, wgmma=False, affine=False):
    B, T, H = shape["B"], shape["T"], shape["HD"] // d
    hkv = H // shape["gqa"]
    br, bc, warps = 64, 128, 8
    pattern = (rf"bwd_main_sm90a_kernelILi{d}ELb{int(affine)}E" if wgmma else
               rf"bwd_main_kernelILi{d}ELb{int(affine)}ELb{int(atomic)}E")
    name, ins = kernel(fns, pattern)
    c = tile_counts(ins, a["bwd_sub_tiles"], warps)
    if not atomic:  # the bulk reduction reads the staged dQ tile from shared memory
        c["smem_bytes"] += br * d * 4 / warps
    clk, bound, pipes = pipe_clocks(c, warps, a)
    mma_clk, writer_clk, writer_bound_rt = clk, None, None
    serial_clk = no_overlap_clk(pipes)
    if not atomic and wgmma:  # the MMA warps hand over; the writer warp keeps up, or bounds the step
        writer_clk = dq_writer_warp_clk(d, br, a)
        pipes["dq_writer"] = writer_clk
        writer_bound_rt = writer_bound_round_trip(mma_clk, d, br, a)
        serial_clk = max(serial_clk, writer_clk)
        if writer_clk > clk:
            clk, bound = writer_clk, "dq_writer"
    elif not atomic:
        clk += a["bwd_dq_thread0_clk"]
        serial_clk += a["bwd_dq_thread0_clk"]
    n_qt, n_kt = -(-T // br), -(-T // bc)
    steps = [(n_qt - kt * bc // br) * shape["gqa"] for kt in range(n_kt)]
    groups = B * hkv
    order = []  # ticket order: chunks of chunk_groups (b, g), key tiles outer
    for first in range(0, groups, a["bwd_chunk_groups"]):
        size = min(a["bwd_chunk_groups"], groups - first)
        order += [steps[kt] for kt in range(n_kt) for _ in range(size)]
    # The first chunk's key tiles start together and settle into the dq order once.
    lag_steps = 0 if atomic else a["bwd_chain_lag_steps"] * (n_kt - 1)
    total_steps = sum(order)
    l2_bytes = total_steps * (2 * br * d * 2 + br * d * 4)  # Q, dO in; the dQ tile out
    main_ms, eff = backward_main_ms(order, clk, lag_steps, a)
    main_ms = max(main_ms, l2_bytes / (a["l2_tbs"] * 1e9))
    serial_ms = max(backward_main_ms(order, serial_clk, lag_steps, a)[0], l2_bytes / (a["l2_tbs"] * 1e9))
    tile_floats = B * H * n_qt * br * d
    hbm = 2 * B * T * H * d * 2  # prep reads out and dO
    hbm += tile_floats * 4 + B * T * H * d * 2  # finalize: fp32 accumulator in, bf16 dq out
    launches = 4
    if atomic:
        hbm += tile_floats * 4  # the accumulator's memset
        launches += 1
    rest_ms = hbm / (a["hbm_tbs"] * 1e9) + launches * a["launch_us"] / 1e3
    label = "bwd_main" + (" wgmma" if wgmma else "") + (" atomics" if atomic else "")
    return {"kernel": label, "D": d, "registers": regs.get(name), "mma_step_clk": mma_clk, "dq_writer_clk": writer_clk,
            "writer_bounds_above_round_trip_clk": writer_bound_rt,
            "per_step_per_warp": c, "pipes_clk": pipes, "bound": bound, "step_clk": clk, "steps": total_steps,
            "items": len(order), "lag_steps": lag_steps, "slot_efficiency": eff, "main_ms": main_ms,
            "prep_finalize_ms": rest_ms, "ms": main_ms + rest_ms, "no_overlap_clk": serial_clk,
            "no_overlap_ms": serial_ms + rest_ms}


TARGETS = {64: 1.55, 128: 1.25}  # fwd + bwd, ms: docs/attention_model.md
DETERMINISM_TARGET = 0.05  # the deterministic backward over its atomics timing build, at most

# The back-tests of this method, "source: kernel" -> (predicted low, predicted high, measured) ms.
# H100 e64f2ce: the same SASS clock count applied to e64f2ce's kernels (WMMA, few warps per
# SMSP), which an H100 measured (../shared/gpu-runs/2026-11-22-e64f2ce), as that review
# tabulates them. H200 bff3506: today's kernels, predicted at bff3506 (one value, no range).
REVIEW = "../shared/reviews/model-calibration-2026-11-27.md"
CALIBRATION = {
    "sources": {"H100 e64f2ce": REVIEW, "H200 bff3506": H200["source"]},
    "back_test": {
        **{f"H100 e64f2ce: {k}": v for k, v in {
            "fwd D64": (1.62, 1.84, 2.22), "fwd D128": (1.71, 1.94, 2.53),
            "bwd D64": (5.99, 7.25, 10.03), "bwd D128": (9.14, 12.37, 13.63)}.items()},
        **{f"H200 bff3506: {k}": (p, p, m) for k, (p, m) in H200["points"].items()},
    },
}
PASSES = ("fwd", "bwd")


def pass_of(point):
    """"fwd" or "bwd": the pass of a back-test point ("source: fwd ..." or "source: bwd...")."""
    return point.split(": ")[-1][:3]


def back_test_ranges(back_test, pass_=None):
    """(low, high) of predicted / measured over the back-test's kernels (of one pass, if
    given): of the midpoints of their predicted ranges, and of the ends (wider)."""
    points = [v for k, v in back_test.items() if pass_ in (None, pass_of(k))]
    mids = [(lo + hi) / 2 / m for lo, hi, m in points]
    ends = [x / m for lo, hi, m in points for x in (lo, hi)]
    return {"midpoints": (min(mids), max(mids)), "ends": (min(ends), max(ends))}


def calibrated(fwd_ms, bwd_ms, target_ms, ranges):
    """The fwd + bwd time the back-test implies for two predictions (each divided by its
    pass's range of predicted / measured, ranges[pass_], then added), and the largest bias
    ("low by x": predicted / measured = 1 - x) under which the target is still met;
    negative: missed even at the prediction."""
    def band(which):
        return [fwd_ms / ranges["fwd"][which][1] + bwd_ms / ranges["bwd"][which][1],
                fwd_ms / ranges["fwd"][which][0] + bwd_ms / ranges["bwd"][which][0]]
    total = fwd_ms + bwd_ms
    return {"lower_bound_ms": total, "band_ms": band("midpoints"), "band_ends_ms": band("ends"),
            "target_met_if_low_by_under": 1 - total / target_ms}


def calibration_line(t):
    c = t["calibrated"]
    x = c["target_met_if_low_by_under"]
    meets = (f"meets {t['target_ms']} ms only if the model is low by < {100 * x:.0f}%" if x > 0 else
             f"misses {t['target_ms']} ms even at the lower bound")
    return (f"D {t['D']} ({t['forward']} + {t['backward']}): lower bound {c['lower_bound_ms']:.3f} ms, back-test band "
            f"{c['band_ms'][0]:.2f}-{c['band_ms'][1]:.2f} ms (ends {c['band_ends_ms'][0]:.2f}-"
            f"{c['band_ends_ms'][1]:.2f}); {meets}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json")
    ap.add_argument("--sass-dir")
    for k, v in (("B", 8), ("T", 2048), ("HD", 2048), ("gqa", 4)):
        ap.add_argument(f"--{k}", type=int, default=v)
    args = ap.parse_args()
    shape = {"B": args.B, "T": args.T, "HD": args.HD, "gqa": args.gqa}
    with tempfile.TemporaryDirectory() as tmp:
        where = args.sass_dir or tmp
        if not args.sass_dir:
            compile_all(tmp)
        fns = {b: functions(open(os.path.join(where, b + ".sass")).read()) for b in BUILDS}
        regs = {b: registers(open(os.path.join(where, b + ".ptxas")).read()) for b in BUILDS}
    ranges = {p: back_test_ranges(CALIBRATION["back_test"], p) for p in PASSES}
    result = {"shape": shape, "assumptions": ASSUME, "calibration": dict(CALIBRATION, predicted_over_measured=ranges),
              "kernels": [], "totals": [], "variants": []}
    for d in (64, 128):
        f_mma = forward(fns["fwd"], regs["fwd"], shape, d, ASSUME, False)
        f_wg = forward(fns["fwd_sm90a"], regs["fwd_sm90a"], shape, d, ASSUME, True)
        b_det = backward(fns["bwd"], regs["bwd"], shape, d, ASSUME, False)
        b_at = backward(fns["bwd_atomic"], regs["bwd_atomic"], shape, d, ASSUME, True)
        b_wg = backward(fns["bwd_sm90a"], regs["bwd_sm90a"], shape, d, ASSUME, False, True)
        b_wg_at = backward(fns["bwd_sm90a_atomic"], regs["bwd_sm90a_atomic"], shape, d, ASSUME, True, True)
        f_ws = forward_ws(fns["fwd_sm90a"], regs["fwd_sm90a"], shape, d, ASSUME)
        result["kernels"] += [f_mma, f_wg, f_ws, b_det, b_at, b_wg, b_wg_at]
        # auto's forward (the warp-specialised one at both head dims) with each backward, each
        # against its own atomics build; and the lockstep forward (wgmma_lockstep) with the
        # wgmma backward, the window's A/B of the two forwards.
        for fwd, bwd, atomics in ((f_ws, b_det, b_at), (f_ws, b_wg, b_wg_at), (f_wg, b_wg, b_wg_at)):
            total = fwd["ms"] + bwd["ms"]
            result["totals"].append({"D": d, "forward": fwd["kernel"], "backward": bwd["kernel"], "fwd_ms": fwd["ms"],
                                     "bwd_ms": bwd["ms"], "fwd_bwd_ms": total, "target_ms": TARGETS[d],
                                     "over_target": total / TARGETS[d] - 1, "atomics_ms": atomics["ms"],
                                     "determinism_cost": bwd["ms"] / atomics["ms"] - 1,
                                     "no_overlap_ms": fwd["no_overlap_ms"] + bwd["no_overlap_ms"],
                                     "calibrated": calibrated(fwd["ms"], bwd["ms"], TARGETS[d], ranges)})
        for bwd_build, wgmma in (("bwd", False), ("bwd_sm90a", True)):
            result["variants"] += variant_rows(
                lambda sink, affine: forward_ws(fns["fwd_sm90a"], regs["fwd_sm90a"], shape, d, ASSUME, sink, affine),
                lambda affine: backward(fns[bwd_build], regs[bwd_build], shape, d, ASSUME, False, wgmma, affine),
                shape, d, ASSUME)
    print(f"shape: B {shape['B']}, T {shape['T']}, H*D {shape['HD']}, GQA {shape['gqa']}, causal, bf16; "
          f"H100 SXM at {ASSUME['clock_ghz']} GHz (assumptions: --json)")
    print(f"{'kernel':<24} {'D':>4} {'regs':>5} {'bound':>7} {'clk/tile':>9} {'eff':>5} {'ms':>7}   "
          "no overlap: clk, ms (an estimate, not a bound)")
    for k in result["kernels"]:
        clk = k.get("tile_clk", k.get("step_clk"))
        print(f"{k['kernel']:<24} {k['D']:>4} {k['registers'] or '-':>5} {k['bound']:>7} {clk:>9.0f} "
              f"{k['slot_efficiency']:>5.2f} {k['ms']:>7.3f}   {k['no_overlap_clk']:>6.0f} {k['no_overlap_ms']:.3f}")
    for k in result["kernels"]:
        if k.get("dq_writer_clk"):
            print(f"{k['kernel']} D {k['D']}: the dq writer warp needs {k['dq_writer_clk']:.0f} clocks per tile, "
                  f"the MMA warps {k['mma_step_clk']:.0f} per step (the writer bounds the step if an L2 round "
                  f"trip takes over {k['writer_bounds_above_round_trip_clk']:.0f} clocks; assumed "
                  f"{ASSUME['l2_round_trip_clk']})")
    for t in result["totals"]:
        print(f"D {t['D']}: fwd ({t['forward']}) {t['fwd_ms']:.3f} + bwd ({t['backward']}) {t['bwd_ms']:.3f} = "
              f"{t['fwd_bwd_ms']:.3f} ms (lower bound) "
              f"against the target {t['target_ms']} ms ({100 * t['over_target']:+.0f}%); "
              f"attn_determinism_cost {100 * t['determinism_cost']:+.1f}% (against its atomics build, "
              f"{t['atomics_ms']:.3f} ms; target +{100 * DETERMINISM_TARGET:.0f}%)")
    for p in PASSES:
        (mid_lo, mid_hi), (end_lo, end_hi) = ranges[p]["midpoints"], ranges[p]["ends"]
        print(f"calibration, {p} ({', '.join(CALIBRATION['sources'])}): predicted/measured {mid_lo:.2f}-{mid_hi:.2f} "
              f"at the midpoints ({end_lo:.2f}-{end_hi:.2f} at the ends), low by {100 * (1 - mid_hi):.0f}-"
              f"{100 * (1 - mid_lo):.0f}%")
    for t in result["totals"]:
        print(calibration_line(t))
    for d in (64, 128):
        for bwd in ("bwd_main", "bwd_main wgmma"):
            print(variants_line([r for r in result["variants"] if r["D"] == d and r["backward"] == bwd]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
