#!/usr/bin/env python3
"""SASS checks that the attention's memory-bound side kernels issue their global loads
before their stores (docs/attention_model.md, "Side kernels: one round trip").

nvcc cannot move a global load above a store that may alias it, so a loop that loads a
row, stores a result and loads the next row pays one memory round trip per row. These
kernels are written to load first (a chunk, a head's rows, an epilogue's rows) and store
after; each rule fails when the SASS shows a global load (LDG) after a store again:
  - prefix scan (scan_totals_kernel, scan_apply_kernel): no LDG after the first STG;
  - backward prep (bwd_prep_kernel): before its first block barrier (the sink's
    partials, whose last-block reduction loads after storing by design), no LDG after the
    first STG, so each head's rows cost one round trip;
  - forward (flash_forward_kernel, flash_forward_sm90a_kernel), after the last block
    barrier (the epilogue): no LDG after the first STS or STG, so the affine rows' alpha
    and prefix sums are loaded together before any row is staged; the warp-specialised
    forward (flash_forward_sm90a_ws_kernel), whose last barrier in the listing is its
    producer's, from its consumers' last warpgroup barrier (`BAR.SYNC ..., 0x80`: all
    products retired) to their EXIT.

usage: load_order_check.py LISTING.sass [...]   (cuobjdump -sass; exit 1 on a failed check,
       or when no listing holds a kernel the rules cover)"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bwd_sass_check import functions  # noqa: E402  (same folder)

# kernel name part: (what is checked, window of the body, stores that count), the first
# part a name holds deciding; flash_forward_ covers flash_forward_kernel and
# flash_forward_sm90a_kernel
RULES = {
    "scan_totals_kernel": ("prefix scan totals", "all", ("STG",)),
    "scan_apply_kernel": ("prefix scan apply", "all", ("STG",)),
    "bwd_prep_kernel": ("backward prep", "before_first_bar", ("STG",)),
    "flash_forward_sm90a_ws_kernel": ("forward epilogue", "consumer_epilogue", ("STS", "STG")),
    "flash_forward_": ("forward epilogue", "after_last_bar", ("STS", "STG")),
}


def rule_of(name):
    """The rule whose kernel name part `name` holds, else None."""
    return next((rule for part, rule in RULES.items() if part in name), None)


def window(ins, where):
    bars = [i for i, (_, op, _) in enumerate(ins) if op.startswith("BAR.SYNC")]
    if where == "before_first_bar":
        return ins[: bars[0]] if bars else ins
    if where == "after_last_bar":
        return ins[bars[-1] + 1:] if bars else ins
    if where == "consumer_epilogue":
        group = [i for i in bars if ins[i][2].replace(" ", "").endswith(",0x80")]
        if not group:
            raise ValueError("no warpgroup barrier (BAR.SYNC ..., 0x80) before the consumers' epilogue")
        end = next((i for i in range(group[-1], len(ins)) if ins[i][1] == "EXIT"), len(ins))
        return ins[group[-1] + 1:end]
    return ins


def late_load(ins, stores):
    """(store, load) instructions of the first global load after a store, else None."""
    first_store = None
    for addr, op, _ in ins:
        if first_store is None and op.split(".")[0] in stores:
            first_store = (addr, op)
        elif first_store is not None and op.split(".")[0] == "LDG":
            return first_store, (addr, op)
    return None


def check(text):
    """[(kernel, what, None or a failure message)] for each kernel a rule covers."""
    out = []
    for name, ins in functions(text).items():
        rule = rule_of(name)
        if rule is None:
            continue
        what, where, stores = rule
        late = late_load(window(ins, where), stores)
        msg = None
        if late:
            (sa, sop), (la, lop) = late
            msg = (f"{lop} at {la:#06x} after {sop} at {sa:#06x}: a load ordered after a store costs one "
                   "more memory round trip")
        out.append((name, what, msg))
    return out


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    results = [r for path in argv[1:] for r in check(open(path).read())]
    for name, what, msg in results:
        print(f"{what}: {name}: {'OK' if msg is None else 'FAIL: ' + msg}")
    if not results:
        print("load_order_check: no kernel the rules cover in " + ", ".join(argv[1:]))
        return 1
    return 0 if all(msg is None for _, _, msg in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
