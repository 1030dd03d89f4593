#!/usr/bin/env python3
"""SASS checks of the attention backward's main kernel (docs/flash_attention_backward.md, "dq off the
MMA warps"): reads `cuobjdump -sass` of kernels/attention/flash_backward.cu (mma.sync,
sm_90) or flash_backward_sm90a.cu (wgmma, sm_90a) and fails when the dq accumulation puts
global memory back on the MMA warps' critical path.

Per deterministic instantiation (bwd_main_kernel<D, kAffine, false>, or
bwd_main_sm90a_kernel<D, kAffine> from a build without KDTRAIN_ATTN_ATOMIC_DQ), with the
step loop found as the block barrier after `DEPBAR.LE SB0` that precedes the prefetch's
LDGSTS (top) and the branch back to it; the dQ products are HMMA (mma.sync) or HGMMA (wgmma):
  - dQ phase (from the step's last block barrier to the branch back): it holds dQ products;
    the first one's C operand is RZ; mma.sync: its A / B registers come from LDSM; wgmma: its
    A and B are shared-memory descriptors (dS K is an SS product); no global load reaches
    its operand registers (descriptors included, traced back through their writers); no
    global load, atomic, reduction, CCTL or gpu-scope MEMBAR in the phase;
  - no MEMBAR.*.GPU between a step's last dQ product and the next step's first LDGSTS
    (around the back edge), so no release or acquire holds the prefetch back;
  - mma.sync (thread 0 of warp 0 writes dq between its products): the semaphore poll
    (LDG.E.STRONG.GPU) is issued before the step's first product (early), and the loop
    issues the bulk reduction (UBLKRED) and the first contributor's bulk store (UBLKCP);
  - wgmma (a ninth warp writes dq, flash_backward_dq_warp.cuh): the MMA warps' step loop
    holds no semaphore poll, no gpu-scope MEMBAR, no bulk operation and nothing global
    but the prefetch, and signals the writer with BAR.ARV; the writer's code (outside
    the loop) holds the poll, the bulk reduction and the bulk store;
  - nothing of the old design: no LDG.E.128 / STG.E.128 of dq slices inside the loop.
Per atomics instantiation (the timing build: bwd_main_kernel<D, kAffine, true>, or the
sm_90a kernel from a KDTRAIN_ATTN_ATOMIC_DQ build): D/16 vector reductions
REDG.E.ADD.F32x4 and no scalar REDG.E.ADD.F32 beyond affine's row sum.

usage: bwd_sass_check.py DETERMINISTIC.sass [ATOMIC.sass]    (exit 1 on a failed check)
  The sm_90a kernel's name does not say which build it is: its instantiations count as
  deterministic in the first file and as atomics in the second.
"""
import re
import sys

INSTR = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Za-z0-9_.]*)\s*(.*?)\s*;")
FUNC = re.compile(r"Function : (\S+)")
MAIN = re.compile(r"bwd_main(_sm90a)?_kernelILi(\d+)ELb([01])E(?:Lb([01])E)?")


def functions(text):
    """{mangled name: [(addr, opcode, operands)]} of a cuobjdump -sass listing; an
    instruction under the never-true predicate @!PT is a NOP (its own opcode kept in the
    operands)."""
    out, cur = {}, None
    for line in text.splitlines():
        m = FUNC.search(line)
        if m:
            cur = out.setdefault(m.group(1), [])
            continue
        m = INSTR.search(line)
        if m and cur is not None:
            if (m.group(2) or "").strip() == "@!PT":  # never runs: only its issue slot (ptxas pads with these)
                cur.append((int(m.group(1), 16), "NOP", f"@!PT {m.group(3)} {m.group(4)}"))
            else:
                cur.append((int(m.group(1), 16), m.group(3), m.group(4)))
    return out


def is_gpu_membar(op):
    return op.startswith("MEMBAR") and op.endswith(".GPU")


def is_global(op):
    return op.startswith(("LDG", "ATOMG", "REDG", "RED.", "CCTL")) or is_gpu_membar(op)


def regs(operand):
    m = re.match(r"R(\d+)", operand.strip())
    return int(m.group(1)) if m else None


def is_global_load(op):
    return op.startswith(("LDG", "LD.", "ATOMG", "ATOM.")) and not op.startswith("LDGSTS")


def read_registers(operand):
    """Registers an operand reads: Rn / URn, and gdesc[URn] as its four (A and B descriptors)."""
    m = re.match(r"gdesc\[UR(\d+)\]", operand)
    if m:
        return [f"UR{int(m.group(1)) + k}" for k in range(4)]
    return re.findall(r"\bU?R\d+\b", operand)


def written_registers(op, args):
    """Registers an instruction's first operand writes (a .64 / .128 load writes 2 / 4)."""
    m = re.match(r"(U?R)(\d+)", args.strip())
    if not m:
        return []
    width = 4 if ".128" in op else 2 if ".64" in op else 1
    return [f"{m.group(1)}{int(m.group(2)) + k}" for k in range(width)]


def global_feeders(ins, at, operands, depth=8):
    """[(addr, opcode)] of global loads among the transitive writers of the registers that
    `operands` of ins[at] read, searching backwards from `at` (straight-line, `depth` levels)."""
    found, frontier, seen = [], [(r, at) for o in operands for r in read_registers(o)], set()
    for _ in range(depth):
        nxt = []
        for reg, pos in frontier:
            if (reg, pos) in seen:
                continue
            seen.add((reg, pos))
            k = next((k for k in range(pos - 1, -1, -1) if reg in written_registers(ins[k][1], ins[k][2])), None)
            if k is None:
                continue
            if is_global_load(ins[k][1]):
                found.append((ins[k][0], ins[k][1]))
            else:
                nxt += [(r, k) for o in ins[k][2].split(",")[1:] for r in read_registers(o.strip())]
        frontier = nxt
    return found


def step_loop(ins):
    """(top barrier index, index of the branch back to the loop head)."""
    for i, (_, op, _) in enumerate(ins):
        if not op.startswith("BAR.SYNC"):
            continue
        before = [k for k in range(max(0, i - 64), i) if ins[k][1].startswith(("DEPBAR", "BAR.SYNC"))]
        if not before or not ins[before[-1]][1].startswith("DEPBAR"):
            continue
        nxt = next((k for k in range(i + 1, len(ins)) if ins[k][1].startswith(("LDGSTS", "BAR.SYNC"))), None)
        if nxt is None or not ins[nxt][1].startswith("LDGSTS"):
            continue
        prev_bar = max((ins[k][0] for k in range(i) if ins[k][1].startswith("BAR.SYNC")), default=-1)
        for k in range(i + 1, len(ins)):
            m = re.match(r"(0x[0-9a-f]+)", ins[k][2])
            if ins[k][1].startswith("BRA") and m and prev_bar < int(m.group(1), 16) <= ins[i][0]:
                return i, k
    return None


def ds_barrier(ins, top, back, mma):
    """Index of the dS^T barrier: the step's last block barrier that products follow (the
    wgmma build's "buffer free" barrier comes after its dQ products), or None."""
    bars = [k for k in range(top + 1, back) if ins[k][1].startswith("BAR.SYNC")
            and any(ins[j][1].startswith(mma + ".") for j in range(k + 1, back + 1))]
    return bars[-1] if bars else None


def first_product_errors(ins, at, mma):
    """The first dQ product ins[at] starts from zero and reads nothing global."""
    addr, op, args = ins[at]
    ops = [o.strip() for o in args.split(",")]
    errors = []
    if mma == "HMMA":
        c_operand, inputs = (ops[3] if len(ops) > 3 else "?"), ops[1:3]
        for src in (regs(o) for o in inputs):
            writer = next((w for _, w, a in reversed(ins[:at]) if regs(a.split(",")[0]) == src), None)
            if writer is not None and not writer.startswith("LDSM"):
                errors.append(f"first dQ HMMA at {addr:#x}: operand R{src} comes from {writer}, not LDSM")
    else:  # HGMMA: D, gdesc[A and B], C (SS) or D, A registers, gdesc[B], C (RS)
        ss = len(ops) > 1 and ops[1].startswith("gdesc")
        c_operand = (ops[2] if ss else ops[3]) if len(ops) > (2 if ss else 3) else "?"
        inputs = ops[1:2] if ss else ops[1:3]
        if not ss:
            errors.append(f"first dQ HGMMA at {addr:#x} takes A from registers ({ops[1]}), not by descriptor")
    if c_operand != "RZ":
        errors.append(f"first dQ {mma} at {addr:#x} accumulates onto {c_operand}, not RZ")
    for faddr, fop in global_feeders(ins, at, inputs + [c_operand]):
        errors.append(f"first dQ {mma} at {addr:#x} is fed by the global load {fop} at {faddr:#x}")
    return errors


def check_deterministic(name, ins, mma="HMMA"):
    """mma: the dQ product's opcode, HMMA (mma.sync build) or HGMMA (wgmma build)."""
    errors = []
    loop = step_loop(ins)
    if loop is None:
        return ["no step loop found (block barrier after DEPBAR.LE SB0 followed by LDGSTS, and a branch back)"]
    top, back = loop
    body = ins[top:back + 1]
    ds_bar = ds_barrier(ins, top, back, mma)
    if ds_bar is None:
        return [f"no {mma} after the step's last block barrier (dQ products not found)"]
    products = [k for k in range(ds_bar + 1, back + 1) if ins[k][1].startswith(mma + ".")]
    errors += first_product_errors(ins, products[0], mma)
    for addr, op, _ in ins[ds_bar + 1:back + 1]:
        if is_global(op) or op.startswith("LDGSTS"):
            errors.append(f"{op} at {addr:#x} in the dQ phase (after the barrier at {ins[ds_bar][0]:#x})")
    # Around the back edge: last dQ product .. branch, then loop head .. first LDGSTS.
    first_ldgsts = next(k for k in range(top, back) if ins[k][1].startswith("LDGSTS"))
    for addr, op, _ in ins[products[-1]:back + 1] + ins[top:first_ldgsts]:
        if is_gpu_membar(op):
            errors.append(f"{op} at {addr:#x} between the dQ products and the next step's prefetch")
    if mma == "HGMMA":
        errors += writer_warp_errors(ins, top, back)
    else:
        errors += thread0_writer_errors(ins, top, back, mma)
    for addr, op, _ in body:
        if op.startswith(("LDG.E.128", "STG.E.128")):
            errors.append(f"{op} at {addr:#x} in the step loop (a dq slice moved by the MMA warps)")
    return errors


def thread0_writer_errors(ins, top, back, mma):
    """Thread 0 writes dq inside the step loop: its poll early, its bulk operations there."""
    errors = []
    first_mma = next(k for k in range(top, back) if ins[k][1].startswith(mma + "."))
    polls = [k for k in range(top, back) if ins[k][1].startswith("LDG.E.STRONG")]
    if not polls or polls[0] > first_mma:
        errors.append(f"the semaphore poll (LDG.E.STRONG.GPU) is not issued before the step's first {mma}")
    names = [op for _, op, _ in ins[top:back + 1]]
    if not any(op.startswith("UBLKRED") for op in names):
        errors.append("no bulk reduction (UBLKRED) in the step loop")
    if not any(op.startswith("UBLKCP") for op in names):
        errors.append("no bulk store (UBLKCP) in the step loop")
    return errors


def writer_warp_errors(ins, top, back):
    """A ninth warp writes dq: nothing of it in the MMA warps' loop, all of it outside."""
    errors = []
    for addr, op, _ in ins[top:back + 1]:
        if (is_global(op) and not op.startswith(("LDGSTS", "LDGDEPBAR"))) or op.startswith(("UBLK", "STG")):
            errors.append(f"{op} at {addr:#x} in the MMA warps' step loop (the writer warp's work)")
    if not any(op.startswith("BAR.ARV") for _, op, _ in ins[top:back + 1]):
        errors.append("no BAR.ARV in the step loop (the MMA warps do not signal the writer warp)")
    outside = [op for _, op, _ in ins[:top] + ins[back + 1:]]
    for want, what in (("LDG.E.STRONG", "semaphore poll"), ("UBLKRED", "bulk reduction"), ("UBLKCP", "bulk store")):
        if not any(op.startswith(want) for op in outside):
            errors.append(f"no {what} ({want}) in the writer warp's code")
    return errors


def check_atomic(name, d, affine, ins):
    v4 = sum(op.startswith("REDG.E.ADD.F32x4") for _, op, _ in ins)
    scalar = sum(op.startswith("REDG.E.ADD.F32") and not op.startswith("REDG.E.ADD.F32x4") for _, op, _ in ins)
    errors = []
    if v4 != d // 16:
        errors.append(f"{v4} REDG.E.ADD.F32x4, expected {d // 16} (one per dQ fragment)")
    if scalar > (1 if affine else 0):
        errors.append(f"{scalar} scalar REDG.E.ADD.F32 (only affine's row sum may be scalar)")
    return errors


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    failed, checked = False, 0
    for path, want_atomic in zip(argv[1:3], (False, True)):
        for name, ins in functions(open(path).read()).items():
            m = MAIN.search(name)
            if not m:
                continue
            wgmma, d, affine = m.group(1) is not None, int(m.group(2)), m.group(3) == "1"
            if not wgmma and (m.group(4) == "1") != want_atomic:
                continue
            label = (f"bwd_main{' wgmma' if wgmma else ''} D={d}{' affine' if affine else ''}"
                     f"{' atomics' if want_atomic else ''}")
            if want_atomic:
                errors = check_atomic(name, d, affine, ins)
            else:
                errors = check_deterministic(name, ins, "HGMMA" if wgmma else "HMMA")
            checked += 1
            print(f"{label}: {'OK' if not errors else 'FAILED'}")
            for e in errors:
                print(f"  {e}")
            failed = failed or bool(errors)
    if checked == 0:
        print("bwd_sass_check: no bwd_main_kernel instantiation found")
        return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
