"""scripts/gpu/attention_model.py's treatment of the forward's masked and unmasked softmax,
without nvcc: the share of softmax passes that take the masked branch (worked out by hand
on small shapes), the if / else pairs it finds in a listing (the part that selects -INF is
the masked one), and the per-tile counts that weight each part by how often it runs
(docs/attention_model.md)."""
import sys

import pytest

from repo_paths import REPO

sys.path.insert(0, str(REPO / "scripts" / "gpu"))
import attention_model  # noqa: E402


def test_wgmma_forward_masks_one_tile_per_block():
    # T 256, Br = Bc = 128: block 0 runs 1 key tile, block 1 runs 2; each masks its last.
    assert attention_model.masked_fraction(256, 128, 128, True) == pytest.approx(2 / 3)
    # T 2048: 16 blocks, 1 + 2 + ... + 16 = 136 tiles, 16 masked.
    assert attention_model.masked_fraction(2048, 128, 128, True) == pytest.approx(16 / 136)


def test_mma_sync_forward_masks_the_tiles_crossing_each_m_tiles_diagonal():
    # T 32, Br 32, Bc 16: one block, m-tiles at rows 0 and 16, key tiles at 0 and 16.
    # m-tile 0: key tile 0 crosses its diagonal, key tile 16 is skipped (after all its rows);
    # m-tile 16: key tile 0 lies below its diagonal, key tile 16 crosses it: 2 of 3 masked.
    assert attention_model.masked_fraction(32, 32, 16, False) == pytest.approx(2 / 3)
    # Bc 64 over m-tiles of 16: every tile an m-tile runs within 64 keys of its rows crosses.
    assert attention_model.masked_fraction(64, 64, 64, False) == pytest.approx(1.0)


def listing(body):
    """(address, opcode, operands) of instruction i at 16 i, as bwd_sass_check.functions gives."""
    out = []
    for i, ins in enumerate(body):
        op, _, args = ins.partition(" ")
        out.append((16 * i, op, args))
    return out


# A loop (0..12) with an if / else: BRA at 2 jumps to 7 (the second part), the first part
# ends with a BRA past the second (to 11). The second part selects -INF: it is the mask.
LOOP = ["LDGSTS.E.BYPASS.128 [R1], desc[UR4][R2.64]", "HMMA.16816.F32.BF16 R4, R8, R12, RZ", "BRA 0x70",
        "FMNMX R3, R4, R5, !PT", "MUFU.EX2 R4, R4", "MUFU.EX2 R5, R5", "BRA 0xb0",
        "ISETP.GT.AND P0, PT, R6, R7, PT", "FSEL R4, R4, -INF , !P0", "MUFU.EX2 R4, R4", "MUFU.EX2 R5, R5",
        "FADD R9, R4, R5", "BRA 0x0"]


def test_finds_the_masked_and_the_unmasked_part():
    ins = listing(LOOP)
    assert attention_model.masked_branches(ins, 0, 12) == [(range(7, 11), range(3, 7))]
    # Neither part selects -INF: not a softmax pair, nothing found.
    plain = listing([x.replace("-INF", "R8") for x in LOOP])
    assert attention_model.masked_branches(plain, 0, 12) == []


def test_tile_counts_weight_each_part_by_how_often_it_runs():
    ins = listing(LOOP)
    both = attention_model.tile_counts(ins)
    assert both["mufu"] == 4 and both["instr"] == 13
    for f in (0.0, 0.25, 1.0):
        c = attention_model.tile_counts(ins, masked_fraction=f)
        assert c["mufu"] == pytest.approx(2)  # 2 MUFU on either branch
        assert c["instr"] == pytest.approx(5 + 4 * f + 4 * (1 - f))
    with pytest.raises(SystemExit, match="no masked / unmasked softmax pair"):
        attention_model.tile_counts(listing([x.replace("-INF", "R8") for x in LOOP]), masked_fraction=0.5)
