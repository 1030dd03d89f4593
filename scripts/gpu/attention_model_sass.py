"""The SASS side of the attention performance model (scripts/gpu/attention_model.py): a
kernel's registers from ptxas -v, its loops, the code only one warp runs, the forward's
masked / unmasked softmax pairs, a loop's per-warp instruction counts by pipe, and the SM
clocks those counts need at the model's rates (docs/attention_model.md)."""
import re

SMEM_BYTES = [("LDSM", r"\.4$", 512), ("LDSM", r"\.2$", 256), ("LDSM", r"", 128), ("LDGSTS", r"\.128", 512),
              ("STS", r"\.128", 512), ("STS", r"\.64", 256), ("STS", r"", 128), ("LDS", r"\.128", 512),
              ("LDS", r"\.64", 256), ("LDS", r"", 128)]


def registers(ptxas):
    """{mangled kernel name: registers} from ptxas -v."""
    out, cur = {}, None
    for line in ptxas.splitlines():
        m = re.search(r"Compiling entry function '([^']+)'", line)
        if m:
            cur = m.group(1)
        m = re.search(r"Used (\d+) registers", line)
        if m and cur:
            out[cur] = int(m.group(1))
    return out


def loops(ins):
    """[(first index, last index)] of every backward branch (loop) of a function."""
    at = {a: i for i, (a, _, _) in enumerate(ins)}
    out = []
    for i, (a, op, args) in enumerate(ins):
        m = re.match(r"(0x[0-9a-f]+)", args)
        if op.startswith("BRA") and m and int(m.group(1), 16) <= a and int(m.group(1), 16) in at:
            out.append((at[int(m.group(1), 16)], i))
    return out


def forward_target(ins, at, k):
    """Index of the instruction a forward BRA at k jumps to, else None."""
    m = re.match(r"(0x[0-9a-f]+)", ins[k][2])
    if ins[k][1].startswith("BRA") and m and int(m.group(1), 16) > ins[k][0]:
        return at.get(int(m.group(1), 16))
    return None


ONE_THREAD_OPS = ("LDG.E.STRONG", "STG.E.STRONG", "UBLKRED", "UBLKCP", "NANOSLEEP", "CCTL", "MEMBAR.ALL.GPU",
                  "MEMBAR.SC.GPU")
BLOCK_WIDE_OPS = ("HMMA", "HGMMA", "WARPGROUP", "BAR.", "LDGSTS", "LDSM")


def one_warp_code(ins, f, l):
    """Indices in f..l that only one warp runs: code a forward branch skips that holds the
    dq writer's thread-0 operations (semaphore, gpu-scope fences, bulk copies: DqWriter in
    flash_backward_steps.cuh) and none of the whole block's (products, barriers, prefetch)."""
    at = {a: i for i, (a, _, _) in enumerate(ins)}
    out = set()
    for k in range(f, l + 1):
        t = forward_target(ins, at, k)
        if t is None:
            continue
        skipped = range(k + 1, min(t, l + 1))
        ops = [ins[j][1] for j in skipped]
        if any(op.startswith(ONE_THREAD_OPS) for op in ops) and not any(op.startswith(BLOCK_WIDE_OPS) for op in ops):
            out.update(skipped)
    return out


def masked_branches(ins, f, l):
    """[(masked, unmasked)] index ranges of the if / else pairs in f..l that choose between a
    masked and an unmasked softmax: a forward branch to t whose instruction before t jumps
    forward past the second part (to u <= l + 1); the part that selects -INF (the mask's
    FSEL) more often is the masked one. Pairs where neither part selects -INF are other
    code, left as counted."""
    at = {a: i for i, (a, _, _) in enumerate(ins)}
    out = []
    for k in range(f, l + 1):
        t = forward_target(ins, at, k)
        if t is None or t > l or t - 1 <= k:
            continue
        u = forward_target(ins, at, t - 1)
        if u is None or not t < u <= l + 1:
            continue
        first, second = range(k + 1, t), range(t, u)
        inf = [sum("INF" in ins[j][2] for j in part) for part in (first, second)]
        if inf[0] != inf[1]:
            out.append((first, second) if inf[0] > inf[1] else (second, first))
    return out


def main_loop(ins):
    """(first, last) of the loop that issues the prefetch (LDGSTS) and tensor-core work: a
    lockstep kernel's tile (forward) or step (backward)."""
    main = [(f, l) for f, l in loops(ins) if any(ins[k][1].startswith("LDGSTS") for k in range(f, l + 1)) and
            any(ins[k][1].startswith(("HMMA", "HGMMA")) for k in range(f, l + 1))]
    if not main:
        raise SystemExit("attention_model: no main loop with LDGSTS and HMMA/HGMMA found")
    return main[0]


def outer_loop(ins, has, what):
    """(first, last) of the outermost loop holding an instruction of each opcode prefix in
    `has` (a warp-specialised kernel's consumer or producer loop)."""
    found = [(f, l) for f, l in loops(ins) if all(any(ins[k][1].startswith(op) for k in range(f, l + 1))
                                                  for op in has)]
    outer = [(f, l) for f, l in found if not any(f2 <= f and l <= l2 and (f2, l2) != (f, l) for f2, l2 in found)]
    if len(outer) != 1:
        raise SystemExit(f"attention_model: {len(outer)} outermost loops with {', '.join(has)} ({what}), expected 1")
    return outer[0]


def tile_counts(ins, inner_trips=1, warps=1, masked_fraction=None):
    """Per-warp instruction counts of one tile (forward) or step (backward) of a lockstep
    kernel: loop_counts of its main_loop."""
    return loop_counts(ins, *main_loop(ins), inner_trips, warps, masked_fraction)


def loop_counts(ins, f, l, inner_trips=1, warps=1, masked_fraction=None, inner_ops=("HMMA", "HGMMA")):
    """Per-warp instruction counts of one trip of the loop f..l: an inner loop with an
    instruction of inner_ops counts inner_trips times; code only one warp runs
    (one_warp_code) counts 1/warps. With masked_fraction (the forward), each masked /
    unmasked softmax pair (masked_branches) counts as the average tile runs it: the masked
    part masked_fraction, the other the rest."""
    weight = [1] * (l + 1 - f)
    for f2, l2 in loops(ins):
        if f < f2 and l2 < l and any(ins[k][1].startswith(inner_ops) for k in range(f2, l2 + 1)):
            for k in range(f2, l2 + 1):
                weight[k - f] = inner_trips
    for k in one_warp_code(ins, f, l):
        weight[k - f] /= warps
    if masked_fraction is not None:
        pairs = masked_branches(ins, f, l)
        if not pairs:
            raise SystemExit("attention_model: no masked / unmasked softmax pair found in the forward's loop")
        for masked, unmasked in pairs:
            for k in masked:
                weight[k - f] *= masked_fraction
            for k in unmasked:
                weight[k - f] *= 1 - masked_fraction
    counts = {"instr": 0, "hmma": 0, "hgmma_fma": 0, "hgmma_smem": 0, "smem_bytes": 0, "mufu": 0}
    for (_, op, args), w in zip(ins[f:l + 1], weight):
        counts["instr"] += w
        if op.startswith("HMMA.16816"):
            counts["hmma"] += w
        m = re.match(r"HGMMA\.64x(\d+)x16", op)
        if m:
            counts["hgmma_fma"] += w * 64 * int(m.group(1)) * 16
            counts["hgmma_smem"] += w * int(m.group(1)) * 16 * 2  # B: N x 16 bf16
            if not re.match(r"R\d+, R\d+, gdesc", args):  # A from shared memory too (not RS)
                counts["hgmma_smem"] += w * 64 * 16 * 2
        if op.startswith("MUFU"):
            counts["mufu"] += w
        for prefix, suffix, nbytes in SMEM_BYTES:
            base = op.split(".")[0]
            if base == prefix and re.search(suffix, op):
                counts["smem_bytes"] += w * nbytes
                break
    return counts


def pipe_clocks(c, warps, a, others=()):
    """SM clocks of one tile for a block of `warps` warps with per-warp counts c; others:
    [(counts, warps)] of the block's other warp roles (a warp-specialised kernel's
    producer), whose work adds to the same pipes."""
    pipes = {"tensor": 0, "smem": 0, "mufu": 0, "issue": 0}
    for c, warps in ((c, warps), *others):
        pipes["tensor"] += (warps * c["hmma"] / a["hmma16816_per_clk"] +
                            (warps / 4) * c["hgmma_fma"] / a["wgmma_fma_per_clk"])
        pipes["smem"] += (warps * c["smem_bytes"] + (warps / 4) * c["hgmma_smem"]) / a["smem_bytes_per_clk"]
        pipes["mufu"] += warps * c["mufu"] * 32 / a["mufu_lanes_per_clk"]
        pipes["issue"] += warps * c["instr"] / a["issue_per_clk"]
    bound = max(pipes, key=pipes.get)
    return pipes[bound] * (1 + a["overhead"]), bound, pipes


def no_overlap_clk(pipes):
    """A tile's or step's clocks if the tensor-core work overlapped none of the other pipes'
    (the tensor pipe + the busiest other): an estimate, not a bound. On the H200
    (2026-11-28) every kernel's measured step came to 0.86-1.39x of it, and 1.14-2.45x the
    lower bound's (docs/attention_model.md, "Measured on an H200")."""
    return pipes["tensor"] + max(v for k, v in pipes.items() if k not in ("tensor", "dq_writer"))


def greedy_efficiency(durations, slots):
    """Ideal / list-scheduled makespan of jobs started in order on `slots` slots."""
    import heapq
    free = [0.0] * slots
    heapq.heapify(free)
    end = 0.0
    for d in durations:
        t = heapq.heappop(free) + d
        end = max(end, t)
        heapq.heappush(free, t)
    return sum(durations) / slots / end if end else 1.0


def kernel(fns, pattern):
    hits = [(n, i) for n, i in fns.items() if re.search(pattern, n)]
    if not hits:
        raise SystemExit(f"attention_model: no kernel matching {pattern}")
    return hits[0]
