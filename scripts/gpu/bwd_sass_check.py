#!/usr/bin/env python3
"""SASS checks of the attention backward's main kernel (docs/flash_attention.md, "dq off the
MMA warps"): reads `cuobjdump -sass` of kernels/attention/flash_backward.cu and fails when
the dq accumulation puts global memory back on the MMA warps' critical path.

Per deterministic instantiation (bwd_main_kernel<D, kAffine, false>), with the step loop
found as the block barrier after `DEPBAR.LE SB0` that precedes the prefetch's LDGSTS (top)
and the branch back to it:
  - dQ phase (from the step's last block barrier to the branch back): it holds HMMAs; the
    first one's C operand is RZ and its A / B registers come from LDSM; no global load,
    atomic, reduction, CCTL or gpu-scope MEMBAR in it (nothing global feeds the products);
  - no MEMBAR.*.GPU between a step's last dQ HMMA and the next step's first LDGSTS
    (around the back edge), so no release or acquire holds the prefetch back;
  - the semaphore poll (LDG.E.STRONG.GPU) is issued before the step's first HMMA (early),
    and the loop issues the bulk reduction (UBLKRED) and the first contributor's bulk store
    (UBLKCP);
  - nothing of the old design: no LDG.E.128 / STG.E.128 of dq slices inside the loop.
Per atomics instantiation (bwd_main_kernel<D, kAffine, true>, the timing build): D/16
vector reductions REDG.E.ADD.F32x4 and no scalar REDG.E.ADD.F32 beyond affine's row sum.

usage: bwd_sass_check.py DETERMINISTIC.sass [ATOMIC.sass]    (exit 1 on a failed check)
"""
import re
import sys

INSTR = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Za-z0-9_.]*)\s*(.*?)\s*;")
FUNC = re.compile(r"Function : (\S+)")
MAIN = re.compile(r"bwd_main_kernelILi(\d+)ELb([01])ELb([01])E")


def functions(text):
    """{mangled name: [(addr, opcode, operands)]} of a cuobjdump -sass listing."""
    out, cur = {}, None
    for line in text.splitlines():
        m = FUNC.search(line)
        if m:
            cur = out.setdefault(m.group(1), [])
            continue
        m = INSTR.search(line)
        if m and cur is not None:
            cur.append((int(m.group(1), 16), m.group(3), m.group(4)))
    return out


def is_gpu_membar(op):
    return op.startswith("MEMBAR") and op.endswith(".GPU")


def is_global(op):
    return op.startswith(("LDG", "ATOMG", "REDG", "RED.", "CCTL")) or is_gpu_membar(op)


def regs(operand):
    m = re.match(r"R(\d+)", operand.strip())
    return int(m.group(1)) if m else None


def step_loop(ins):
    """(top barrier index, index of the branch back to the loop head)."""
    for i, (_, op, _) in enumerate(ins):
        if not op.startswith("BAR.SYNC"):
            continue
        before = [k for k in range(max(0, i - 24), i) if ins[k][1].startswith(("DEPBAR", "BAR.SYNC"))]
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


def check_deterministic(name, ins):
    errors = []
    loop = step_loop(ins)
    if loop is None:
        return ["no step loop found (block barrier after DEPBAR.LE SB0 followed by LDGSTS, and a branch back)"]
    top, back = loop
    body = ins[top:back + 1]
    ds_bar = max(k for k in range(top + 1, back) if ins[k][1].startswith("BAR.SYNC"))
    dq = ins[ds_bar + 1:back + 1]
    hmma = [k for k, (_, op, _) in enumerate(dq) if op.startswith("HMMA")]
    if not hmma:
        return ["no HMMA after the step's last block barrier (dQ products not found)"]
    first = dq[hmma[0]]
    ops = [o.strip() for o in first[2].split(",")]
    if len(ops) < 4 or ops[3] != "RZ":
        errors.append(f"first dQ HMMA at {first[0]:#x} accumulates onto {ops[3] if len(ops) > 3 else '?'}, not RZ")
    for src in (regs(ops[1]) if len(ops) > 1 else None, regs(ops[2]) if len(ops) > 2 else None):
        writer = next((op for _, op, a in reversed(dq[:hmma[0]]) if regs(a.split(",")[0]) == src), None)
        if writer is not None and not writer.startswith("LDSM"):
            errors.append(f"first dQ HMMA at {first[0]:#x}: operand R{src} comes from {writer}, not LDSM")
    for addr, op, _ in dq:
        if is_global(op) or op.startswith("LDGSTS"):
            errors.append(f"{op} at {addr:#x} in the dQ phase (after the barrier at {ins[ds_bar][0]:#x})")
    # Around the back edge: last dQ HMMA .. branch, then loop head .. first LDGSTS.
    first_ldgsts = next(k for k in range(top, back) if ins[k][1].startswith("LDGSTS"))
    edge = dq[hmma[-1]:] + ins[top:first_ldgsts]
    for addr, op, _ in edge:
        if is_gpu_membar(op):
            errors.append(f"{op} at {addr:#x} between the dQ products and the next step's prefetch")
    first_hmma = next(k for k in range(top, back) if ins[k][1].startswith("HMMA"))
    polls = [k for k in range(top, back) if ins[k][1].startswith("LDG.E.STRONG")]
    if not polls or polls[0] > first_hmma:
        errors.append("the semaphore poll (LDG.E.STRONG.GPU) is not issued before the step's first HMMA")
    names = [op for _, op, _ in body]
    if not any(op.startswith("UBLKRED") for op in names):
        errors.append("no bulk reduction (UBLKRED) in the step loop")
    if not any(op.startswith("UBLKCP") for op in names):
        errors.append("no bulk store (UBLKCP) in the step loop")
    for addr, op, _ in body:
        if op.startswith(("LDG.E.128", "STG.E.128")):
            errors.append(f"{op} at {addr:#x} in the step loop (a dq slice moved by the MMA warps)")
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
            if not m or (m.group(3) == "1") != want_atomic:
                continue
            d, affine = int(m.group(1)), m.group(2) == "1"
            label = f"bwd_main D={d}{' affine' if affine else ''}{' atomics' if want_atomic else ''}"
            errors = check_atomic(name, d, affine, ins) if want_atomic else check_deterministic(name, ins)
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
