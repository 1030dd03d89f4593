#!/usr/bin/env python3
"""Attention-only forward+backward benchmark in PyTorch: SDPA (flash backend on
cuda) against each kdtrain attention variant written in PyTorch, eager and
torch.compile'd, at B*T tokens (default 16k), T = 2048, D in {64, 128}, with
H*D = 2048 query channels and 4 query heads per kv head (llama3.2-1b-like).

Cases per head dim: "sdpa" (the baseline core alone, pinned to the flash backend) and
"sdpa-dispatch" (the same call under PyTorch's own backend choice, what a user gets by
default: on an H100 it was 1.39x faster than the flash backend at D 64, 22 Nov 2026), the
reference being the faster of the two; each variant
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

Rows are measured in order of value (measure(): kdtrain's baseline and SDPA first, the
other kdtrain builds and variants next, the PyTorch formulations last), and --jsonl PATH
writes each one the moment it is measured, so a run cut short keeps its timings;
summarize() computes the ratios below from whichever rows exist.

With --kdtrain, `kdtrain bench --attention-only` runs on the same shapes (H and the
GQA ratio from --kdtrain-preset rescaled to each D) and the report adds
attn_fwdbwd_vs_sdpa (per D: the faster SDPA's time / kdtrain baseline time, > 1 =
kdtrain faster), variant_attn_slowdown (per D and variant: kdtrain time / kdtrain
baseline time) and variant_speedup_vs_torch_best (best PyTorch time / kdtrain). Each
kdtrain row also carries kernel_ms, {kernel: mean ms per call} from --kernel-times
(iterations apart from the timed ones; empty on cpu), printed by kernel_times_line().
"""
import argparse
import json
import statistics
import time

import torch_attention

VARIANTS = torch_attention.VARIANTS
SDPA_DISPATCH = "sdpa-dispatch"  # the SDPA row under PyTorch's own backend choice
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


class TorchCases:
    """The PyTorch side at each head dim: its inputs, made once per D, and the timing of
    one case (a row, or an error row: e.g. out of memory for the eager T x T scores)."""

    def __init__(self, args):
        import torch
        self.torch, self.args = torch, args
        self.dev = torch.device(args.device)
        if self.dev.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("torch sees no CUDA device")  # every row would fail: say it once
        self.dtype = torch.bfloat16 if self.dev.type == "cuda" else torch.float32
        self.sync = torch.cuda.synchronize if self.dev.type == "cuda" else (lambda: None)
        self.inputs = {}

    def shape(self, D):
        T = self.args.seq_len
        H = self.args.channels // D
        return max(1, self.args.tokens // T), T, H, max(1, H // self.args.gqa)

    def tensors(self, D):
        if D not in self.inputs:
            torch, (B, T, H, Hkv) = self.torch, self.shape(D)
            g = torch.Generator(device="cpu").manual_seed(0)

            def rnd(*shape, scale=1.0):
                return (torch.randn(*shape, generator=g) * scale).to(self.dev, self.dtype).requires_grad_(True)

            q, k, v = rnd(B, H, T, D), rnd(B, Hkv, T, D), rnd(B, Hkv, T, D)
            extras = {"sinks": rnd(H, scale=0.02), "alpha_z": rnd(B, T, H),
                      "alpha_ma": torch.full((H,), 0.5, device=self.dev), "gate_z": rnd(B, T, H * D)}
            leaves = [q, k, v] + [t for t in extras.values() if t.requires_grad]
            self.inputs[D] = ((q, k, v, extras), leaves)
        return self.inputs[D]

    def row(self, name, variant, eager, compiled, D, dispatch=False):
        torch = self.torch
        B, T, H, Hkv = self.shape(D)
        row = {"kind": "torch", "case": name + ("+compile" if compiled else ""), "variant": variant,
               "D": D, "H": H, "Hkv": Hkv, "B": B, "T": T}
        # SDPA restricted to its flash backend on cuda, but where `dispatch` asks for
        # PyTorch's own choice of backend.
        ctx = torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION) \
            if (self.dev.type == "cuda" and not eager and not dispatch) else _null()
        try:
            fn = make_attention(torch, variant, H, Hkv, D, eager, self.dev, T)
            row["formulation"] = (fn.formulation.replace("SDPA flash", "SDPA, PyTorch's backend choice") if dispatch
                                  else fn.formulation) + (", torch.compile" if compiled else "")
            if compiled:
                fn = torch.compile(fn)
            inputs, leaves = self.tensors(D)
            with ctx:
                ms, fwd_ms = time_case(torch, fn, inputs, leaves, self.args.warmup, self.args.iters, self.sync)
            return dict(row, ms=ms, fwd_ms=fwd_ms, bwd_ms=ms - fwd_ms,
                        tflops=fwd_bwd_flops(B, H, T, D) / (ms / 1e3) / 1e12)
        except Exception as e:
            if self.dev.type == "cuda":
                torch.cuda.empty_cache()
            return dict(row, error=f"{type(e).__name__}: {str(e)[:200]}")


def torch_cases(args):
    """(name, variant, eager, compiled) of every PyTorch row after "sdpa": each variant's
    strong formulation (torch_attention.py), compiled too where compiling can change
    something (work around the core: not a lone SDPA call), then with --cases all the
    naive T x T forms ("<variant>-eager"), which are there for the record."""
    variants = args.variants or VARIANTS
    cases = []
    for v in variants:
        cases.append((v, v, False, False))
        if args.compile and v != "baseline":
            cases.append((v, v, False, True))
    if args.cases == "all":
        cases += [(f"{v}-eager", v, True, False) for v in variants]
    return cases


def measure(args, emit):
    """Every row, in order of value, each handed to emit() as soon as it is measured (a
    run cut short keeps what it measured): kdtrain's baseline and SDPA at each head dim
    first (attn_fwdbwd_vs_sdpa), then kdtrain's other variants (variant_attn_slowdown,
    a target of its own), the baseline of each --kdtrain-build (the atomics build:
    attn_determinism_cost; the kernel choices), and last the PyTorch formulations of the
    variants. The H200 window of 6c903e5 cut this list in the variants, after 14 build rows."""
    variants = args.variants or VARIANTS
    builds = [parse_build(spec) for spec in args.kdtrain_build]
    torch_side = None

    def torch_row(name, variant, eager, compiled, D, dispatch=False):
        nonlocal torch_side
        if torch_side is None:
            try:
                torch_side = TorchCases(args)
            except (ImportError, RuntimeError) as e:
                torch_side = e
        if isinstance(torch_side, Exception):
            return {"kind": "torch", "case": name, "variant": variant, "D": D,
                    "error": f"{type(torch_side).__name__}: {torch_side}"}
        return torch_side.row(name, variant, eager, compiled, D, dispatch)

    def kdtrain_row(binary, variant, D, build=None):
        B, T = max(1, args.tokens // args.seq_len), args.seq_len
        label, env, extra = build or (None, {}, [])
        r = dict(kdtrain_attention(args, binary, variant, B, T, D, env, extra), kind="kdtrain")
        return dict(r, build=label) if label else r

    for D in args.head_dims:
        if args.kdtrain and "baseline" in variants:
            emit(kdtrain_row(args.kdtrain, "baseline", D))
        emit(torch_row("sdpa", "baseline", False, False, D))
        emit(torch_row(SDPA_DISPATCH, "baseline", False, False, D, dispatch=True))
    if args.kdtrain:
        for D in args.head_dims:
            for v in variants:
                if v != "baseline":
                    emit(kdtrain_row(args.kdtrain, v, D))
    for label, binary, env, extra in builds:
        for D in args.head_dims:
            emit(kdtrain_row(binary, "baseline", D, (label, env, extra)))
    for D in args.head_dims:
        for case in torch_cases(args):
            emit(torch_row(*case, D))


def summarize(rows):
    """The ratios of the measured rows (any subset: a cut run gives the ratios its rows
    allow), keyed by head dim as a string. Sets slowdown_vs_sdpa on the PyTorch rows."""
    ok = [r for r in rows if "error" not in r]
    torch_rows = [r for r in ok if r.get("kind", "torch") == "torch" and "ms" in r]
    mine = [r for r in ok if "fwd_bwd_ms" in r and "build" not in r]
    builds = [r for r in ok if "fwd_bwd_ms" in r and "build" in r]
    sdpa = {}  # per D, the faster SDPA
    for r in torch_rows:
        if r["case"] in ("sdpa", SDPA_DISPATCH):
            sdpa[r["D"]] = min(sdpa.get(r["D"], float("inf")), r["ms"])
    for r in torch_rows:
        if r["D"] in sdpa:
            r["slowdown_vs_sdpa"] = r["ms"] / sdpa[r["D"]]
    out = {"attn_fwdbwd_vs_sdpa": {}, "variant_attn_slowdown": {}, "variant_speedup_vs_torch_best": {},
           "attn_determinism_cost": {}, "attn_determinism_cost_by_choice": {}}
    for r in builds:  # a kernel choice against the atomics build run with the same choice
        choice = r["build"][len(ATOMIC_BUILD) + 1:] if r["build"].startswith(ATOMIC_BUILD + "+") else None
        det = next((b["fwd_bwd_ms"] for b in builds if b["D"] == r["D"] and b["build"] == choice), None)
        if choice and det:
            out["attn_determinism_cost_by_choice"].setdefault(str(r["D"]), {})[choice] = det / r["fwd_bwd_ms"] - 1
    for D in sorted({r["D"] for r in mine}):
        ms = {r["attention"]: r["fwd_bwd_ms"] for r in mine if r["D"] == D}
        base = ms.get("baseline")
        if base and D in sdpa:
            out["attn_fwdbwd_vs_sdpa"][str(D)] = sdpa[D] / base  # > 1: kdtrain faster
        if base:
            out["variant_attn_slowdown"][str(D)] = {v: t / base for v, t in ms.items()}
        atomic = next((r["fwd_bwd_ms"] for r in builds if r["D"] == D and r["build"] == ATOMIC_BUILD), None)
        if base and atomic:
            out["attn_determinism_cost"][str(D)] = base / atomic - 1  # deterministic / atomics - 1
        best = {}
        for r in torch_rows:
            if r["D"] == D and r["case"] != "sdpa":
                best[r["variant"]] = min(best.get(r["variant"], float("inf")), r["ms"])
        out["variant_speedup_vs_torch_best"][str(D)] = {v: best[v] / t for v, t in ms.items() if v in best}
    return out


def run(args, stream=None):
    """The whole report; with `stream` (a file), each row is also written to it as one
    JSON line the moment it is measured."""
    rows = []

    def emit(r):
        rows.append(r)
        if stream is not None:
            stream.write(json.dumps(r) + "\n")
            stream.flush()

    measure(args, emit)
    summary = summarize(rows)
    report = {"tool": "bench_attention", "device": args.device, "tokens": max(1, args.tokens // args.seq_len) * args.seq_len,
              "flop_convention": FLOP_CONVENTION,
              "results": [r for r in rows if r["kind"] == "torch"]}
    if any(r["kind"] == "torch" and "error" not in r for r in rows):
        import torch
        report.update(torch=torch.__version__, dtype="bfloat16" if args.device == "cuda" else "float32")
    if args.kdtrain or args.kdtrain_build:
        report["kdtrain"] = [r for r in rows if r["kind"] == "kdtrain" and "build" not in r]
        report["kdtrain_builds"] = [r for r in rows if r["kind"] == "kdtrain" and "build" in r]
        report.update(summary)
    return report


# The label of the float-atomics timing build (KDTRAIN_ATTN_ATOMIC_DQ) among --kdtrain-build;
# "atomic-dq+CHOICE" is that build run with the kernel choice labelled CHOICE
# (attn_determinism_cost_by_choice).
ATOMIC_BUILD = "atomic-dq"


def kdtrain_attention(args, binary, variant, B, T, D, env=None, extra=()):
    """One `kdtrain bench --attention-only --kernel-times` row (forward_ms, backward_ms,
    fwd_bwd_ms, kernel_ms and the attention path with the kernels it took), or an error
    row; a binary older than --kernel-times runs without it (no kernel_ms). `env`: extra
    environment variables; `extra`: extra kdtrain arguments
    (e.g. --set of a kernel choice)."""
    import os
    import subprocess
    cmd = [binary, "bench", "--attention-only", "--preset", args.kdtrain_preset,
           "--attention", variant, "--device", args.device, "--micro-batch", str(B),
           "--seq-len", str(T), "--head-dim", str(D), "--steps", str(args.iters),
           "--warmup", str(args.warmup), "--json", "--kernel-times", *extra]
    run_env = dict(os.environ, **(env or {}))
    if "KDTRAIN_LD_LIBRARY_PATH" in os.environ:  # the GPU scripts keep the pack's libraries from Python
        run_env["LD_LIBRARY_PATH"] = os.environ["KDTRAIN_LD_LIBRARY_PATH"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=run_env)
    if p.returncode != 0 and "--kernel-times" in p.stdout + p.stderr:
        cmd.remove("--kernel-times")
        p = subprocess.run(cmd, capture_output=True, text=True, env=run_env)
    if p.returncode != 0:
        return {"variant": variant, "D": D, "error": (p.stdout + p.stderr)[-300:]}
    r = json.loads(p.stdout.strip().splitlines()[-1])
    if r["H"] != args.channels // D:
        r["warning"] = f"kdtrain preset has H*D={r['H'] * D}, not --channels {args.channels}"
    return r


def kernel_times_line(row):
    """kdtrain row's kernel_ms as "fwd wgmma 0.512, bwd_main 1.903, ...": the forward's
    kernels first; None when the row has no kernel times."""
    ms = row.get("kernel_ms") or {}
    names = sorted(ms, key=lambda name: (not name.startswith("fwd"), name))
    return ", ".join(f"{name} {ms[name]:.3f}" for name in names) or None


def parse_build(spec):
    """'LABEL=[VAR=VALUE ...] BINARY [ARG ...]' -> (label, binary, {VAR: VALUE}, [ARG ...]):
    the words before the first one without '=' set the environment, the words after the
    binary are passed to kdtrain bench."""
    import shlex
    label, _, rest = spec.partition("=")
    words = shlex.split(rest)
    at = next((i for i, w in enumerate(words) if "=" not in w), None)
    if not label or at is None:
        raise SystemExit(f"bench_attention: --kdtrain-build wants LABEL=[VAR=VALUE ...] BINARY [ARG ...], got {spec!r}")
    return label, words[at], dict(w.split("=", 1) for w in words[:at]), words[at + 1:]


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
    ap.add_argument("--kdtrain-build", action="append", default=[],
                    metavar="LABEL=[VAR=VALUE ...] BINARY [ARG ...]",
                    help="another kdtrain build, or the same with environment variables or arguments (a kernel "
                         "choice: --set KEY=VALUE) timed on the baseline; atomic-dq: the float-atomics timing "
                         "build, for attn_determinism_cost; repeatable")
    ap.add_argument("--variants", nargs="+", choices=VARIANTS, default=None,
                    help="variants to time (default: all)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--jsonl", metavar="PATH", default="",
                    help="also write each row to PATH as one JSON line the moment it is measured")
    args = ap.parse_args(argv)
    if args.jsonl:
        with open(args.jsonl, "w") as stream:
            r = run(args, stream)
    else:
        r = run(args)
    if args.json:
        print(json.dumps(r))
        return
    print(f"bench_attention: {r['device']} {r.get('dtype', '')}, {r['tokens']} tokens; {r['flop_convention']}")
    def row(x, label, timing):
        """One printed result: its error in place of the timing when the case failed."""
        print(f"  D={x['D']:<4} {label} " + (x["error"] if "error" in x else timing(x)))

    for x in r["results"]:
        row(x, f"{x['case']:<28}", lambda x: f"{x['ms']:9.3f} ms {x['tflops']:8.3f} TFLOP/s "
                                             f"x{x.get('slowdown_vs_sdpa', float('nan')):.2f} vs sdpa   [{x['formulation']}]")
    for x in r.get("kdtrain", []):
        row(x, f"kdtrain {x['attention'] if 'attention' in x else x['variant']:<20}",
            lambda x: f"{x['fwd_bwd_ms']:9.3f} ms {x['tflops']:8.3f} TFLOP/s")
    for x in r.get("kdtrain_builds", []):
        row(x, f"kdtrain[{x['build']}] baseline", lambda x: f"{x['fwd_bwd_ms']:9.3f} ms")
    for x in r.get("kdtrain", []) + r.get("kdtrain_builds", []):
        if kernel_times_line(x):
            print(f"  D={x['D']:<4} kdtrain{'[' + x['build'] + ']' if 'build' in x else ''} "
                  f"{x.get('attention')} kernels (ms per call): {kernel_times_line(x)}")
    for key in ("attn_fwdbwd_vs_sdpa", "variant_attn_slowdown", "variant_speedup_vs_torch_best",
                "attn_determinism_cost"):
        if key in r:
            print(f"  {key}: {json.dumps(r[key])}")


if __name__ == "__main__":
    main()
