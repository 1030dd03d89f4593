"""The attention kernels' SASS checks and performance model, without a GPU.
- scripts/gpu/bwd_sass_check.py on small hand-written listings (no nvcc needed): a good
  step loop of each build (mma.sync: HMMA; wgmma: HGMMA) passes, and each deliberately bad
  one (a global load feeding the first dQ product, a gpu-scope MEMBAR before the prefetch,
  a late poll, ...) fails with its message.
- On the real kernels (compiles the forward and the backward, mma.sync and wgmma builds,
  deterministic and atomics, with nvcc once): bwd_sass_check.py must pass on both
  backward builds (dq off the MMA warps, the atomics builds' vector reductions:
  docs/flash_attention.md) and fail on the wgmma build's SASS with a global load spliced
  in; scripts/gpu/attention_model.py must read the same SASS and write a JSON with a
  prediction per kernel and per head dim; scripts/gpu/load_order_check.py must pass on the
  prefix scan, the backward's prep and both forwards (their global loads before their
  stores) and fail on hand-written listings that load after a store. These skip, saying
  why, where nvcc or cuobjdump is absent."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from cuda_tools import nvcc_and_cuobjdump
from repo_paths import REPO

GPU_SCRIPTS = REPO / "scripts" / "gpu"
sys.path.insert(0, str(GPU_SCRIPTS))
import bwd_sass_check  # noqa: E402
import load_order_check  # noqa: E402

MMA_KERNEL = "_ZN7kdtrain4cuda12_GLOBAL__N_115bwd_main_kernelILi64ELb0ELb0EEEvNS_5flash7BwdArgsE"
WGMMA_KERNEL = "_ZN7kdtrain4cuda12_GLOBAL__N_121bwd_main_sm90a_kernelILi64ELb0EEEvNS_5flash7BwdArgsE"
POLL = "LDG.E.STRONG.GPU R30, desc[UR12][R92.64]"
BULK_RED = "UBLKRED.G.S.ADD.F32.RN [UR8], [UR5], UR6"
PREFETCH = "LDGSTS.E.BYPASS.128 [R73], desc[UR12][R20.64]"
PRODUCTS = {  # the step's S^T product and the dQ phase, as nvcc 13.0 writes them
    "HMMA": (["HMMA.16816.F32.BF16 R40, R8, R12, RZ"],
             ["LDSM.16.M88.4 R8, [R3]", "LDSM.16.MT88.4 R12, [R5]", "HMMA.16816.F32.BF16 R104, R8, R12, RZ",
              "HMMA.16816.F32.BF16 R104, R8, R14, R104"]),
    "HGMMA": (["WARPGROUP.ARRIVE", "HGMMA.64x32x16.F32.BF16 R168, gdesc[UR16], RZ, !UPT, gsb0",
               "WARPGROUP.DEPBAR.LE gsb0, 0x0"],
              ["IMAD.MOV.U32 R88, RZ, RZ, R22", "R2UR UR8, R88", "R2UR UR9, R89", "R2UR UR10, R90", "R2UR UR11, R91",
               "WARPGROUP.ARRIVE", "HGMMA.64x32x16.F32.BF16 R104, gdesc[UR8].tnspA.tnspB, RZ, !UPT",
               "HGMMA.64x32x16.F32.BF16 R104, gdesc[UR8].tnspA.tnspB, R104, gsb0", "WARPGROUP.DEPBAR.LE gsb0, 0x0"]),
}


def step_loop(mma):
    """A deterministic kernel's step loop. mma.sync: barrier, prefetch, poll, S^T product,
    thread 0's bulk operations, the dS^T barrier, the dQ products, staging, branch back.
    wgmma: the MMA warps' loop (barrier, prefetch, S^T product, the dS^T barrier, the dQ
    products, the "buffer free" wait, staging, the "staged" arrive, branch back), then the
    writer warp's code (its wait, poll, acquire, bulk operations, arrive, release)."""
    sub, dq = PRODUCTS[mma]
    if mma == "HGMMA":
        return (["S2R R0, SR_TID.X", "DEPBAR.LE SB0, 0x0", "BAR.SYNC.DEFER_BLOCKING 0x1, 0x100", PREFETCH, "LDGDEPBAR"]
                + sub + ["FENCE.VIEW.ASYNC.S", "BAR.SYNC.DEFER_BLOCKING 0x1, 0x100"] + dq
                + ["BAR.SYNC.DEFER_BLOCKING R89, 0x120", "STS.128 [R13+0x14400], R104", "MEMBAR.ALL.CTA",
                   "BAR.ARV R90, 0x120", "BRA 0x10", "EXIT"]
                + ["BAR.SYNC.DEFER_BLOCKING R2, 0x120", POLL, "MEMBAR.ALL.GPU", BULK_RED,
                   "UBLKCP.G.S [UR8], [UR5], UR6", "DEPBAR.LE SB0, 0x0", "BAR.ARV R2, 0x120", "MEMBAR.ALL.GPU",
                   "STG.E.STRONG.GPU desc[UR12][R92.64], R7", "EXIT"])
    return (["S2R R0, SR_TID.X", "DEPBAR.LE SB0, 0x0", "BAR.SYNC.DEFER_BLOCKING 0x0", PREFETCH, "LDGDEPBAR", POLL]
            + sub + [BULK_RED, "UBLKCP.G.S [UR8], [UR5], UR6",
                     "FENCE.VIEW.ASYNC.S", "BAR.SYNC.DEFER_BLOCKING 0x0"]
            + dq + ["STS.128 [R13+0x14400], R104", "MEMBAR.ALL.CTA", "BRA 0x10", "EXIT"])


def listing(kernel, body):
    """cuobjdump -sass text of one function (instruction i at address 16 i)."""
    return "\n".join([f"\t\tFunction : {kernel}"] + [f"        /*{16 * i:04x}*/                   {ins} ;"
                                                        for i, ins in enumerate(body)]) + "\n"


def check(tmp_path, capsys, deterministic, atomic=None):
    paths = []
    for name, text in (("det.sass", deterministic), ("atomic.sass", atomic)):
        if text is not None:
            (tmp_path / name).write_text(text)
            paths.append(str(tmp_path / name))
    rc = bwd_sass_check.main(["bwd_sass_check.py"] + paths)
    return rc, capsys.readouterr().out


def edit(body, old, new):
    """body with the instruction `old` replaced by the list `new` (exactly one match)."""
    assert body.count(old) == 1, old
    i = body.index(old)
    return body[:i] + new + body[i + 1:]


@pytest.mark.parametrize("mma, kernel", [("HMMA", MMA_KERNEL), ("HGMMA", WGMMA_KERNEL)])
def test_sass_check_passes_a_good_step_loop(tmp_path, capsys, mma, kernel):
    rc, out = check(tmp_path, capsys, listing(kernel, step_loop(mma)))
    assert rc == 0 and out == f"bwd_main{' wgmma' if mma == 'HGMMA' else ''} D=64: OK\n", out


ST_PRODUCT = "HGMMA.64x32x16.F32.BF16 R168, gdesc[UR16], RZ, !UPT, gsb0"
FIRST_DQ = "HGMMA.64x32x16.F32.BF16 R104, gdesc[UR8].tnspA.tnspB, RZ, !UPT"
LAST_DQ = "HGMMA.64x32x16.F32.BF16 R104, gdesc[UR8].tnspA.tnspB, R104, gsb0"
WGMMA_MUTANTS = {  # name: (edits of the good wgmma loop, messages the check must print)
    "dq C operand loaded from global": (
        [(FIRST_DQ, ["LDG.E.128 R60, desc[UR12][R40.64]",
                     "HGMMA.64x32x16.F32.BF16 R104, gdesc[UR8].tnspA.tnspB, R60"])],
        ["accumulates onto R60, not RZ", "fed by the global load LDG.E.128", "LDG.E.128 at", "in the dQ phase"]),
    "dq descriptor from a global load before the dS barrier": (
        [("IMAD.MOV.U32 R88, RZ, RZ, R22", []), (PREFETCH, [PREFETCH, "LDG.E.64 R88, desc[UR12][R40.64]"])],
        ["first dQ HGMMA at 0x", "is fed by the global load LDG.E.64 at"]),
    "gpu MEMBAR before the prefetch": (
        [(PREFETCH, ["MEMBAR.ALL.GPU", PREFETCH])],
        ["MEMBAR.ALL.GPU at 0x30 between the dQ products and the next step's prefetch"]),
    "release right after the dQ products": (
        [(LAST_DQ, [LAST_DQ, "MEMBAR.SC.GPU"])], ["MEMBAR.SC.GPU at 0x", "in the dQ phase",
                                                   "between the dQ products and the next step's prefetch"]),
    "semaphore poll on an MMA warp": (
        [(ST_PRODUCT, [ST_PRODUCT, POLL])],
        ["LDG.E.STRONG.GPU at 0x", "in the MMA warps' step loop (the writer warp's work)"]),
    "gpu-scope fence on an MMA warp": (
        [(ST_PRODUCT, [ST_PRODUCT, "MEMBAR.ALL.GPU"])], ["MEMBAR.ALL.GPU at 0x", "in the MMA warps' step loop"]),
    "bulk reduction on an MMA warp": (
        [(BULK_RED, []), (ST_PRODUCT, [ST_PRODUCT, BULK_RED])],
        ["UBLKRED.G.S.ADD.F32.RN at 0x", "in the MMA warps' step loop",
         "no bulk reduction (UBLKRED) in the writer warp's code"]),
    "no signal to the writer": (
        [("BAR.ARV R90, 0x120", [])], ["no BAR.ARV in the step loop"]),
    "dq A from registers": (
        [(FIRST_DQ, ["HGMMA.64x32x16.F32.BF16 R104, R8, gdesc[UR8].tnspB, RZ, !UPT"])],
        ["takes A from registers (R8), not by descriptor"]),
    "no bulk reduction": (
        [(BULK_RED, [])], ["no bulk reduction (UBLKRED) in the writer warp's code"]),
}


@pytest.mark.parametrize("mutant", sorted(WGMMA_MUTANTS))
def test_sass_check_fails_a_bad_wgmma_step_loop(tmp_path, capsys, mutant):
    edits, messages = WGMMA_MUTANTS[mutant]
    body = step_loop("HGMMA")
    for old, new in edits:
        body = edit(body, old, new)
    rc, out = check(tmp_path, capsys, listing(WGMMA_KERNEL, body))
    assert rc == 1 and "bwd_main wgmma D=64: FAILED" in out, out
    for m in messages:
        assert m in out, (m, out)


def test_sass_check_fails_a_late_poll_in_the_mma_sync_loop(tmp_path, capsys):
    """The mma.sync build's thread 0 must poll its semaphore before the step's first HMMA."""
    body = edit(step_loop("HMMA"), POLL, [])
    body = edit(body, "HMMA.16816.F32.BF16 R40, R8, R12, RZ", ["HMMA.16816.F32.BF16 R40, R8, R12, RZ", POLL])
    rc, out = check(tmp_path, capsys, listing(MMA_KERNEL, body))
    assert rc == 1 and "the semaphore poll (LDG.E.STRONG.GPU) is not issued before the step's first HMMA" in out, out


def test_sass_check_fails_an_hmma_operand_from_global(tmp_path, capsys):
    body = edit(step_loop("HMMA"), "LDSM.16.MT88.4 R12, [R5]", ["LDG.E.128 R12, desc[UR12][R40.64]"])
    rc, out = check(tmp_path, capsys, listing(MMA_KERNEL, body))
    assert rc == 1 and "operand R12 comes from LDG.E.128, not LDSM" in out, out


def test_sass_check_counts_the_wgmma_atomics_builds_vector_reductions(tmp_path, capsys):
    """The sm_90a kernel's name has no atomics flag: the second file's is the atomics build."""
    reds = ["REDG.E.ADD.F32x4.FTZ.RN.STRONG.GPU desc[UR12][R40.64], R104"] * 4
    good = listing(WGMMA_KERNEL, ["S2R R0, SR_TID.X"] + reds + ["EXIT"])
    bad = listing(WGMMA_KERNEL, ["S2R R0, SR_TID.X"] + reds[1:] + ["EXIT"])
    det = listing(WGMMA_KERNEL, step_loop("HGMMA"))
    assert check(tmp_path, capsys, det, good)[0] == 0
    rc, out = check(tmp_path, capsys, det, bad)
    assert rc == 1 and "3 REDG.E.ADD.F32x4, expected 4" in out, out


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    nvcc, _ = nvcc_and_cuobjdump()
    import attention_model
    out = tmp_path_factory.mktemp("attention_sass")
    os.environ["NVCC"] = nvcc
    attention_model.compile_all(str(out))
    return out


@pytest.mark.parametrize("build", ["bwd", "bwd_sm90a"])
def test_backward_dq_sass_checks_pass(built, build):
    r = subprocess.run([sys.executable, str(GPU_SCRIPTS / "bwd_sass_check.py"), str(built / f"{build}.sass"),
                        str(built / f"{build}_atomic.sass")], capture_output=True, text=True)
    print(r.stdout)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count(": OK") == 8  # 4 deterministic + 4 atomics instantiations


def test_sass_check_fails_the_real_wgmma_kernel_spliced(built, tmp_path, capsys):
    """The wgmma build's D 64 kernel, re-listed (instruction i at 16 i, as cuobjdump has it),
    passes; with the instruction before the first dQ HGMMA made a global load that the
    product accumulates onto, or the one after the step's top barrier a gpu-scope MEMBAR,
    it fails."""
    name, ins = next((n, i) for n, i in bwd_sass_check.functions((built / "bwd_sm90a.sass").read_text()).items()
                     if "bwd_main_sm90a_kernelILi64ELb0E" in n)
    assert [a for a, _, _ in ins] == [16 * k for k in range(len(ins))]
    body = [f"{op} {args}" for _, op, args in ins]
    top, back = bwd_sass_check.step_loop(ins)
    ds_bar = bwd_sass_check.ds_barrier(ins, top, back, "HGMMA")
    first = next(k for k in range(ds_bar, back) if ins[k][1].startswith("HGMMA"))
    assert check(tmp_path, capsys, listing(name, body))[0] == 0
    fed = list(body)
    fed[first - 1] = "LDG.E.128 R60, desc[UR12][R40.64]"
    fed[first] = body[first].replace("RZ, !UPT", "R60")
    rc, out = check(tmp_path, capsys, listing(name, fed))
    assert rc == 1 and "accumulates onto R60, not RZ" in out and "fed by the global load LDG.E.128" in out, out
    fenced = list(body)
    fenced[top + 1] = "MEMBAR.ALL.GPU"
    rc, out = check(tmp_path, capsys, listing(name, fenced))
    assert rc == 1 and "MEMBAR.ALL.GPU at" in out and "next step's prefetch" in out, out


def test_performance_model_predicts_each_kernel(built, tmp_path):
    out = tmp_path / "model.json"
    r = subprocess.run([sys.executable, str(GPU_SCRIPTS / "attention_model.py"), "--sass-dir", str(built), "--json",
                        str(out)], capture_output=True, text=True)
    print(r.stdout)
    assert r.returncode == 0, r.stdout + r.stderr
    result = json.loads(out.read_text())
    assert {(k["kernel"], k["D"]) for k in result["kernels"]} == {
        (k, d) for k in ("mma_sync", "wgmma", "wgmma ws", "bwd_main", "bwd_main atomics", "bwd_main wgmma",
                         "bwd_main wgmma atomics") for d in (64, 128)}
    for k in result["kernels"]:
        assert 0.05 < k["ms"] < 20, k
    # auto's forward (warp-specialised) with each backward; the lockstep one with the wgmma backward
    assert [(t["D"], t["forward"], t["backward"]) for t in result["totals"]] == [
        (d, f, b) for d in (64, 128) for f, b in (("wgmma ws", "bwd_main"), ("wgmma ws", "bwd_main wgmma"),
                                                  ("wgmma", "bwd_main wgmma"))]
    ms = {(k["kernel"], k["D"]): k["ms"] for k in result["kernels"]}
    for t in result["totals"]:  # each backward against its own atomics timing build
        atomics = ms[(t["backward"] + " atomics", t["D"])]
        assert t["determinism_cost"] == pytest.approx(ms[(t["backward"], t["D"])] / atomics - 1)
    assert r.stdout.count("attn_determinism_cost") == 6
    for t in result["totals"]:  # a lower bound: the back-test's band lies above it
        assert t["fwd_bwd_ms"] == t["calibrated"]["lower_bound_ms"] < t["calibrated"]["band_ms"][0], t
    assert r.stdout.count("back-test band") == 6
    assert set(result["calibration"]["predicted_over_measured"]) == {"fwd", "bwd"}  # a range per pass
    for k in result["kernels"]:  # no overlap: the tensor pipe added to the busiest other, never below the bound's pipe
        others = [v for p, v in k["pipes_clk"].items() if p not in ("tensor", "dq_writer")]
        assert k["no_overlap_clk"] >= k["pipes_clk"]["tensor"] + max(others) - 1e-6, k
        assert k["no_overlap_ms"] > k["ms"] / (1 + result["assumptions"]["overhead"]), k
    assert "clock_ghz" in result["assumptions"]
    # Every variant at both head dims, each its own kernels' instantiation on auto's forward:
    # the baseline row is that total, the others at least its kernels' time plus their side costs.
    import attention_model_variants
    rows = {(v["variant"], v["D"], v["backward"]): v for v in result["variants"]}
    assert set(rows) == {(v, d, b) for v in attention_model_variants.FEATURES for d in (64, 128)
                         for b in ("bwd_main", "bwd_main wgmma")}
    for t in (t for t in result["totals"] if t["forward"] == "wgmma ws"):  # each backward's baseline row
        base = rows[("baseline", t["D"], t["backward"])]
        assert base["forward"] == "wgmma ws"
        assert base["slowdown"] == 1 and base["fwd_bwd_ms"] == pytest.approx(t["fwd_bwd_ms"])
        for (v, d, b), row in rows.items():
            if (d, b) == (t["D"], t["backward"]):
                assert row["fwd_bwd_ms"] == pytest.approx(row["fwd_ms"] + row["bwd_ms"])
                assert row["slowdown"] == pytest.approx(row["fwd_bwd_ms"] / base["fwd_bwd_ms"])
    assert r.stdout.count("variant_attn_slowdown target") == 4


@pytest.mark.parametrize("d", [64, 128])
def test_model_counts_one_softmax_per_forward_tile(built, d):
    """The wgmma forward's loop holds a masked and an unmasked softmax; the model counts the
    average tile, which runs one of them: per warp 16 rows x Bc keys of ex2 over 32 lanes,
    plus one per row pair for the running max's rescale."""
    import attention_model
    fns = bwd_sass_check.functions((built / "fwd_sm90a.sass").read_text())
    name, ins = attention_model.kernel(fns, rf"flash_forward_sm90a_kernelILi{d}ELb0ELb0E")
    f, l = next((f, l) for f, l in attention_model.loops(ins) if any(ins[k][1].startswith("HGMMA")
                                                                    for k in range(f, l + 1)))
    pairs = attention_model.masked_branches(ins, f, l)
    assert len(pairs) == 1
    masked, unmasked = pairs[0]
    mufu = [sum(ins[k][1].startswith("MUFU.EX2") for k in part) for part in (masked, unmasked)]
    bc = 128
    assert mufu == [16 * bc // 32 + 2] * 2
    c = attention_model.tile_counts(ins, masked_fraction=attention_model.masked_fraction(2048, 128, bc, True))
    assert c["mufu"] == pytest.approx(16 * bc // 32 + 2)


@pytest.mark.parametrize("d", [64, 128])
def test_model_counts_both_roles_of_the_warp_specialised_forward(built, d):
    """The warp-specialised forward: the consumers' loop holds the tile's products (S: D/16
    wgmma of N 128, P V: 128/16 of N D) and one softmax per tile, as the lockstep kernel's;
    the producer's loop holds no product and copies K and V (2 x 128 rows x D/8 16-byte
    chunks per tile over its 4 warps); their pipes add up."""
    import attention_model
    import attention_model_sass
    fns = bwd_sass_check.functions((built / "fwd_sm90a.sass").read_text())
    _, ins = attention_model.kernel(fns, rf"flash_forward_sm90a_ws_kernelILi{d}ELb0ELb0E")
    consumer = attention_model_sass.outer_loop(ins, ("HGMMA",), "consumer")
    producer = attention_model_sass.outer_loop(ins, ("LDGSTS", "BAR"), "producer")
    assert consumer[1] < producer[0]  # disjoint: the producer's branch follows the consumers'
    k = attention_model.forward_ws(fns, {}, {"B": 8, "T": 2048, "HD": 2048, "gqa": 4}, d, attention_model.ASSUME)
    c, p = k["per_tile_per_warp"]["consumer"], k["per_tile_per_warp"]["producer"]
    assert c["hgmma_fma"] == 64 * 128 * d + 64 * d * 128 and p["hgmma_fma"] == 0
    assert c["mufu"] == pytest.approx(16 * 128 // 32 + 2)
    assert p["smem_bytes"] == pytest.approx(2 * 128 * (d // 8) * 16 / 4)  # LDGSTS.128 lands 512 B per warp
    lone = attention_model.pipe_clocks(c, 8, attention_model.ASSUME)[2]
    issue_per_clk = attention_model.ASSUME["issue_per_clk"]
    assert k["pipes_clk"]["issue"] == pytest.approx(lone["issue"] + 4 * p["instr"] / issue_per_clk)
    assert k["pipes_clk"]["tensor"] == pytest.approx(lone["tensor"])


def test_never_true_predicate_is_a_nop():
    """ptxas pads with `@!PT LDS RZ, [RZ]` (before each LDGSTS of a rolled copy loop): it
    issues but never runs, so the model counts it as an instruction, never as shared-memory
    traffic."""
    fns = bwd_sass_check.functions(listing("k", ["@!PT LDS RZ, [RZ]", "@P0 LDS R2, [R3]", "EXIT"]))
    ops = [(op, args) for _, op, args in fns["k"]]
    assert ops[0] == ("NOP", "@!PT LDS RZ, [RZ]") and ops[1] == ("LDS", "R2, [R3]")


def test_load_order_checks_pass_on_the_real_kernels(built):
    """Every prefix scan kernel (totals, apply; bf16 and fp32 input), backward prep
    (6 instantiations) and forward (mma.sync, lockstep wgmma and warp-specialised wgmma,
    6 each) issues its global loads before its stores, in the windows load_order_check.py
    names."""
    r = subprocess.run([sys.executable, str(GPU_SCRIPTS / "load_order_check.py")] +
                       [str(built / f"{b}.sass") for b in ("scan", "bwd", "fwd", "fwd_sm90a")],
                       capture_output=True, text=True)
    print(r.stdout)
    assert r.returncode == 0, r.stdout + r.stderr
    ok = [line.split(":")[0] for line in r.stdout.splitlines() if line.endswith(": OK")]
    assert sorted(set(ok)) == ["backward prep", "forward epilogue", "prefix scan apply", "prefix scan totals"]
    assert len(ok) == 2 + 2 + 6 + 18


LOAD = "LDG.E R4, desc[UR4][R2.64]"
STORE = "STG.E desc[UR4][R6.64], R4"
BAR = "BAR.SYNC.DEFER_BLOCKING 0x0"
WG_BAR = "BAR.SYNC.DEFER_BLOCKING R2, 0x80"  # the warp-specialised forward's "retired" barrier
PRODUCER = ["USETMAXREG.DEALLOC.CTAPOOL 0x18", "BAR.SYNC.DEFER_BLOCKING R3, 0x180", LOAD, "EXIT"]


@pytest.mark.parametrize("kernel, body, failed", [
    ("scan_apply_kernelIfEEv", [LOAD, LOAD, "FADD R5, R4, R5", STORE, STORE, "EXIT"], False),
    ("scan_apply_kernelIfEEv", [LOAD, STORE, LOAD, STORE, "EXIT"], True),  # one round trip per row
    ("bwd_prep_kernelILi64ELb1ELb0EEEv", [LOAD, LOAD, STORE, "STS [R1], R4", BAR, LOAD, STORE, "EXIT"], False),
    ("bwd_prep_kernelILi64ELb1ELb0EEEv", [LOAD, STORE, LOAD, STORE, BAR, "EXIT"], True),
    ("flash_forward_sm90a_kernelILi64ELb0ELb1EEEv", [LOAD, "STS [R1], R4", BAR, LOAD, LOAD, "STS [R1], R4", STORE,
                                                     "EXIT"], False),
    ("flash_forward_sm90a_kernelILi64ELb0ELb1EEEv", [BAR, LOAD, "STS [R1], R4", LOAD, "STS [R1], R4", "EXIT"], True),
    ("flash_forward_kernelILi64ELi128ELi64ELi4ELb0ELb1EEEv", [BAR, LOAD, STORE, LOAD, "EXIT"], True),
    # The warp-specialised forward: its epilogue runs from the consumers' warpgroup barrier to
    # their EXIT; the producer's code after it (its own barrier last) is not the epilogue.
    ("flash_forward_sm90a_ws_kernelILi64ELb0ELb1EEEv", [WG_BAR, LOAD, LOAD, "STS [R1], R4", STORE, "EXIT"] + PRODUCER,
     False),
    ("flash_forward_sm90a_ws_kernelILi64ELb0ELb1EEEv", [WG_BAR, LOAD, "STS [R1], R4", LOAD, "EXIT"] + PRODUCER, True),
])
def test_load_order_check_on_listings(tmp_path, capsys, kernel, body, failed):
    path = tmp_path / "k.sass"
    path.write_text(listing("_ZN7kdtrain4cuda12_GLOBAL__N_1" + kernel, body))
    rc = load_order_check.main(["load_order_check.py", str(path)])
    out = capsys.readouterr().out
    assert rc == int(failed), out
    assert ("FAIL: LDG.E at" in out) == failed, out


def test_load_order_check_refuses_a_listing_without_its_kernels(tmp_path, capsys):
    path = tmp_path / "other.sass"
    path.write_text(listing("_ZN7kdtrain4cuda12_GLOBAL__N_115bwd_main_kernelILi64ELb0ELb0EEEv", [LOAD, STORE, LOAD]))
    assert load_order_check.main(["load_order_check.py", str(path)]) == 1
    assert "no kernel the rules cover" in capsys.readouterr().out
