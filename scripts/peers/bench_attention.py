#!/usr/bin/env python3
"""Attention-only forward+backward benchmark in PyTorch: SDPA (flash backend on
cuda) against each kdtrain attention variant written in PyTorch, eager and
torch.compile'd, at B*T tokens (default 16k), T = 2048, D in {64, 128}, with
H*D = 2048 query channels and 4 query heads per kv head (llama3.2-1b-like).

Cases per head dim: "sdpa" (the baseline core alone, the reference); each variant
in the formulation a strong PyTorch user writes (scripts/peers/torch_attention.py:
SDPA flash; FlexAttention with the sink through the log-sum-exp; SDPA plus a
cumulative sum; the gate elementwise); and each variant's naive eager form
("<variant>-eager", T x T scores). Every row states its formulation.

FLOP convention (stated in the output and docs/performance.md): causal
forward = 4*B*H*T^2*D / 2 (QK^T and PV, 2 FLOPs per multiply-add, half the
score matrix under the causal mask); forward+backward = 3.5 x forward (the
backward does 5 of the 2-matmul units: recompute QK^T, dV, dP, dQ, dK =
2.5 x forward), as FlashAttention-2 reports. The variants' extra elementwise
work (sink column, alpha/beta prefix sum, gate) is not counted, so a slower
variant shows as lower TFLOP/s.

  python3 scripts/peers/bench_attention.py --device cuda --compile --kdtrain build/kdtrain --json > attn.json

With --kdtrain, `kdtrain bench --attention-only` runs on the same shapes (H and the
GQA ratio from --kdtrain-preset rescaled to each D) and the report adds
attn_fwdbwd_vs_sdpa (per D: SDPA time / kdtrain baseline time, > 1 = kdtrain
faster), variant_attn_slowdown (per D and variant: kdtrain time / kdtrain
baseline time) and variant_speedup_vs_torch_best (best PyTorch time / kdtrain).
"""
import argparse
import json
import statistics
import time

import torch_attention

VARIANTS = torch_attention.VARIANTS
FLOP_CONVENTION = "causal fwd 4*B*H*T^2*D/2; fwd+bwd = 3.5 x fwd; variant extras not counted"


def fwd_bwd_flops(B, H, T, D):
    return 3.5 * 4 * B * H * T * T * D / 2


def make_attention(torch, variant, H, Hkv, D, eager, device, T):
    """f(q, k, v, extras) -> (B, T, H*D); q (B,H,T,D), k/v (B,Hkv,T,D). The core is
    torch_attention.Attention (the strong-user formulation, or the eager T x T one)."""
    core = torch_attention.Attention(torch, variant, H, Hkv, D, device, eager=eager)
    core.prepare(T)

    def f(q, k, v, x):
        B, _, T_, _ = q.shape
        alpha = torch_attention.linear_clip(x["alpha_z"].float())
        o = core(q, k, v, sinks=x["sinks"], alpha=alpha, alpha_ma=x["alpha_ma"])
        o = o.reshape(B, T_, H * D)
        if torch_attention.has_gate(variant):
            o = torch_attention.gate(torch, o, x["gate_z"])
        return o

    f.formulation = core.formulation()
    return f


def time_case(torch, fn, inputs, grads_of, warmup, iters, sync):
    """Median milliseconds of forward+backward, and of the forward alone (graph recorded
    for the backward, as in training, then dropped)."""
    def once():
        out = fn(*inputs)
        out.backward(torch.ones_like(out))
        for t in grads_of:
            t.grad = None

    def forward():
        fn(*inputs)

    def median_ms(f):
        ms = []
        for _ in range(iters):
            sync()
            a = time.perf_counter()
            f()
            sync()
            ms.append((time.perf_counter() - a) * 1e3)
        return statistics.median(ms)
    for _ in range(warmup):
        once()
    sync()
    return median_ms(once), median_ms(forward)


def run(args):
    import torch
    dev = torch.device(args.device)
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    T = args.seq_len
    B = max(1, args.tokens // T)
    results = []
    for D in args.head_dims:
        H = args.channels // D
        Hkv = max(1, H // args.gqa)
        g = torch.Generator(device="cpu").manual_seed(0)

        def rnd(*shape, scale=1.0):
            return (torch.randn(*shape, generator=g) * scale).to(dev, dtype).requires_grad_(True)

        q, k, v = rnd(B, H, T, D), rnd(B, Hkv, T, D), rnd(B, Hkv, T, D)
        extras = {"sinks": rnd(H, scale=0.02), "alpha_z": rnd(B, T, H),
                  "alpha_ma": torch.full((H,), 0.5, device=dev), "gate_z": rnd(B, T, H * D)}
        leaves = [q, k, v] + [t for t in extras.values() if t.requires_grad]
        flops = fwd_bwd_flops(B, H, T, D)
        # "sdpa": the reference (the baseline core alone); "<variant>": the strong
        # formulation of torch_attention.py; "<variant>-eager": the naive T x T form.
        variants = args.variants or VARIANTS
        cases = [("sdpa", "baseline", False)] + [(v_, v_, False) for v_ in variants]
        if args.cases == "all":
            cases += [(f"{v_}-eager", v_, True) for v_ in variants]
        for name, variant, eager in cases:
            # --compile adds a compiled row where compiling can change something: the
            # strong forms with elementwise work around the core (not a lone SDPA
            # call, and not the naive forms, which are there for the record).
            compilable = not eager and variant != "baseline"
            for compiled in ([False, True] if args.compile and compilable else [False]):
                label = name + ("+compile" if compiled else "")
                row = {"case": label, "variant": variant, "D": D, "H": H, "Hkv": Hkv, "B": B, "T": T}
                # SDPA restricted to its flash backend on cuda, as its users would.
                ctx = torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION) \
                    if (dev.type == "cuda" and not eager) else _null()
                try:
                    fn = make_attention(torch, variant, H, Hkv, D, eager, dev, T)
                    row["formulation"] = fn.formulation + (", torch.compile" if compiled else "")
                    if compiled:
                        fn = torch.compile(fn)
                    with ctx:
                        ms, fwd_ms = time_case(torch, fn, (q, k, v, extras), leaves, args.warmup, args.iters, sync)
                    results.append(dict(row, ms=ms, fwd_ms=fwd_ms, bwd_ms=ms - fwd_ms,
                                        tflops=flops / (ms / 1e3) / 1e12))
                except Exception as e:  # e.g. out of memory for the eager T x T scores
                    results.append(dict(row, error=f"{type(e).__name__}: {str(e)[:200]}"))
                    if dev.type == "cuda":
                        torch.cuda.empty_cache()
        ref = next(r["ms"] for r in results if r["case"] == "sdpa" and r["D"] == D and "ms" in r)
        for r in results:
            if r["D"] == D and "ms" in r:
                r["slowdown_vs_sdpa"] = r["ms"] / ref
    report = {"tool": "bench_attention", "torch": torch.__version__, "device": dev.type,
              "dtype": str(dtype).replace("torch.", ""), "tokens": B * T,
              "flop_convention": FLOP_CONVENTION, "results": results}
    if args.kdtrain:
        report.update(run_kdtrain(args, B, T, results))
    return report


def kdtrain_attention(args, binary, variant, B, T, D, env=None):
    """One `kdtrain bench --attention-only` row (forward_ms, backward_ms, fwd_bwd_ms), or
    an error row. `env`: extra environment variables (e.g. KDTRAIN_FLASH_FORWARD)."""
    import os
    import subprocess
    cmd = [binary, "bench", "--attention-only", "--preset", args.kdtrain_preset,
           "--attention", variant, "--device", args.device, "--micro-batch", str(B),
           "--seq-len", str(T), "--head-dim", str(D), "--steps", str(args.iters),
           "--warmup", str(args.warmup), "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, **(env or {})))
    if p.returncode != 0:
        return {"variant": variant, "D": D, "error": (p.stdout + p.stderr)[-300:]}
    r = json.loads(p.stdout.strip().splitlines()[-1])
    if r["H"] != args.channels // D:
        r["warning"] = f"kdtrain preset has H*D={r['H'] * D}, not --channels {args.channels}"
    return r


def parse_build(spec):
    """'LABEL=[VAR=VALUE ...] BINARY' -> (label, binary, {VAR: VALUE})."""
    import shlex
    label, _, rest = spec.partition("=")
    words = shlex.split(rest)
    if not label or not words or "=" in words[-1]:
        raise SystemExit(f"bench_attention: --kdtrain-build wants LABEL=[VAR=VALUE ...] BINARY, got {spec!r}")
    return label, words[-1], dict(w.split("=", 1) for w in words[:-1])


def run_kdtrain(args, B, T, results):
    """`kdtrain bench --attention-only` on the same shapes, and the ratios of issues 5 and 26:
    every variant on the default build, the baseline on each --kdtrain-build (the atomics
    timing build "atomic-dq" gives attn_determinism_cost)."""
    rows, summary_vs_sdpa, slowdown, vs_torch, builds, cost = [], {}, {}, {}, [], {}
    for D in args.head_dims:
        for variant in (args.variants or VARIANTS):
            rows.append(kdtrain_attention(args, args.kdtrain, variant, B, T, D))
        mine = {r["attention"]: r["fwd_bwd_ms"] for r in rows if r.get("D") == D and "fwd_bwd_ms" in r}
        for spec in args.kdtrain_build:
            label, binary, env = parse_build(spec)
            r = dict(kdtrain_attention(args, binary, "baseline", B, T, D, env), build=label)
            builds.append(r)
            if label == "atomic-dq" and "fwd_bwd_ms" in r and "baseline" in mine:
                cost[str(D)] = mine["baseline"] / r["fwd_bwd_ms"] - 1  # deterministic / atomics - 1
        sdpa = next((r["ms"] for r in results if r["case"] == "sdpa" and r["D"] == D and "ms" in r), None)
        if "baseline" in mine and sdpa:
            summary_vs_sdpa[str(D)] = sdpa / mine["baseline"]  # > 1: kdtrain faster
        if "baseline" in mine:
            slowdown[str(D)] = {v: mine[v] / mine["baseline"] for v in mine}
        torch_best = {}
        for r in results:
            if r["D"] == D and "ms" in r and r["case"] != "sdpa":
                torch_best[r["variant"]] = min(torch_best.get(r["variant"], 1e30), r["ms"])
        vs_torch[str(D)] = {v: torch_best[v] / mine[v] for v in mine if v in torch_best}
    return {"kdtrain": rows,
            "kdtrain_builds": builds,                     # the baseline on each --kdtrain-build
            "attn_determinism_cost": cost,                # per D: deterministic / atomics time - 1
            "attn_fwdbwd_vs_sdpa": summary_vs_sdpa,       # per D: SDPA time / kdtrain baseline time
            "variant_attn_slowdown": slowdown,            # per D, variant: kdtrain time / kdtrain baseline
            "variant_speedup_vs_torch_best": vs_torch}    # per D, variant: best PyTorch time / kdtrain


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tokens", type=int, default=16384, help="B*T")
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--head-dims", type=int, nargs="+", default=[64, 128])
    ap.add_argument("--channels", type=int, default=2048, help="H*D")
    ap.add_argument("--gqa", type=int, default=4, help="query heads per kv head")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--compile", action="store_true",
                    help="also time torch.compile'd variants (the strong forms with work around the core)")
    ap.add_argument("--cases", choices=("all", "strong"), default="all",
                    help="strong: sdpa and each variant's strong form only (no naive T x T rows)")
    ap.add_argument("--kdtrain", default="", help="kdtrain binary: also run kdtrain bench --attention-only")
    ap.add_argument("--kdtrain-preset", default="llama3.2-1b",
                    help="preset whose H*D and GQA ratio kdtrain uses (llama3.2-1b: 2048, 4)")
    ap.add_argument("--kdtrain-build", action="append", default=[], metavar="LABEL=[VAR=VALUE ...] BINARY",
                    help="another kdtrain build (or the same with environment variables set) timed on the "
                         "baseline; atomic-dq: the float-atomics timing build, for attn_determinism_cost; "
                         "repeatable")
    ap.add_argument("--variants", nargs="+", choices=VARIANTS, default=None,
                    help="variants to time (default: all)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    r = run(args)
    if args.json:
        print(json.dumps(r))
        return
    print(f"bench_attention: {r['device']} {r['dtype']}, {r['tokens']} tokens; {r['flop_convention']}")
    def row(x, label, timing):
        """One printed result: its error in place of the timing when the case failed."""
        print(f"  D={x['D']:<4} {label} " + (x["error"] if "error" in x else timing(x)))

    for x in r["results"]:
        row(x, f"{x['case']:<28}", lambda x: f"{x['ms']:9.3f} ms {x['tflops']:8.3f} TFLOP/s "
                                             f"x{x['slowdown_vs_sdpa']:.2f} vs sdpa   [{x['formulation']}]")
    for x in r.get("kdtrain", []):
        row(x, f"kdtrain {x['attention'] if 'attention' in x else x['variant']:<20}",
            lambda x: f"{x['fwd_bwd_ms']:9.3f} ms {x['tflops']:8.3f} TFLOP/s")
    for x in r.get("kdtrain_builds", []):
        row(x, f"kdtrain[{x['build']}] baseline", lambda x: f"{x['fwd_bwd_ms']:9.3f} ms")
    for key in ("attn_fwdbwd_vs_sdpa", "variant_attn_slowdown", "variant_speedup_vs_torch_best",
                "attn_determinism_cost"):
        if key in r:
            print(f"  {key}: {json.dumps(r[key])}")


if __name__ == "__main__":
    main()
