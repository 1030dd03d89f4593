// The work order of the fused attention backward: which block does which tile pair, in
// which order the dq contributions of a query tile arrive, and why that cannot deadlock.
// Shared by the CUDA kernel (flash_backward.cu), its CPU mirror and the host tests of
// the ordering (docs/flash_attention.md, "Tests and tolerances"). Plain C++17 and
// constexpr, so device code calls it too.
//
// Work item = (b, kv head g, key tile kt): it keeps dk and dv of its Bc key rows in
// registers and walks the tile pairs (query tile qt, query head h of the group) from
// the last query tile down to the first one that sees the key tile (heads inner).
// Every pair adds dS K (Br x D) to dq of (b, h, qt). Those contributions go, in the
// order kt = 0, 1, ..., last_kt(qt), into an fp32 accumulator in global memory:
//   - kt = 0 stores (no memset of the accumulator), 0 < kt < last reads, adds, stores,
//   - kt = last_kt(qt) (the key tile on the diagonal) adds and writes dq in bf16.
// The order is enforced by an integer semaphore per (b, h, qt, slice): a contributor of
// rank kt waits until it reads kt, updates its slice, then releases kt + 1. So the bits
// of dq depend only on the inputs, never on timing, and no float atomic is used.
//
// Deadlock freedom: blocks take their item from a ticket counter (an integer atomicAdd
// when the block starts), in ticket order. An item only waits on items of the same
// (b, g) with a smaller kt, and those have smaller tickets (see item()). Let n be the
// smallest ticket not finished. Every ticket below n is finished; ticket n has been
// taken (a later-started block cannot take a larger ticket first: tickets are handed out
// in increasing order, and the grid holds one block per ticket); all items it waits on
// are finished, so it runs to the end. By induction every item finishes. This does not
// rely on the hardware launching blocks in index order, only on resident blocks making
// progress.
//
// Why this order is also fast: the item with key tile kt meets query tile qt at the same
// local step as the item with kt - 1 (both walk qt downwards, heads inner), and kt - 1
// took its ticket earlier, so in steady state it is ahead and the wait is free. Items of
// one chunk of `chunk_groups` (b, g) pairs are ticketed together, kt outer: the longest
// items (small kt) start first, and the chunk's dq accumulators (chunk_groups x group x
// T x D floats) stay in L2 while its key tiles pass over them.
#pragma once
#include <cstdint>

#include "kernels/attention/params.h"
#include "kernels/attention/flash_tiles.h"

namespace kdtrain::flash {

struct BwdItem {
  int64_t b = 0;  // batch
  int64_t g = 0;  // kv head
  int kt = 0;     // key tile
};

struct BwdStep {
  int qt = 0;             // query tile
  int head_in_group = 0;  // query head h = g * group + head_in_group
};

// Per-step functions use 32-bit arithmetic (T < 2^31): they run once per tile pair on
// the GPU, where 64-bit division is a subroutine call.
struct BwdSchedule {
  int64_t T = 0;
  int group = 0;            // query heads per kv head
  int Br = 0, Bc = 0;       // query / key rows per tile
  int n_qt = 0, n_kt = 0;   // query / key tiles
  int64_t groups = 0;       // B * Hkv work-item groups
  int64_t chunk_groups = 1; // (b, g) pairs ticketed together
  int64_t items = 0;        // groups * n_kt

  // Query tiles that see key tile kt: qt >= first_qt(kt) (key kt*Bc <= some row of qt).
  constexpr int first_qt(int kt) const { return kt * Bc / Br; }
  // Key tiles that reach query tile qt: kt <= last_kt(qt); the last one adds last.
  constexpr int last_kt(int qt) const {
    const int k = ((qt + 1) * Br - 1) / Bc;
    return k < n_kt - 1 ? k : n_kt - 1;
  }
  // Whether some key of the pair lies after some query row (causal mask needed).
  // Also true for every pair holding padded keys (rows >= T) next to real query rows.
  constexpr bool masked(int qt, int kt) const { return kt * Bc + Bc - 1 > qt * Br; }
  // Tile pairs of an item, and the pair of local step s (0-based).
  constexpr int steps(int kt) const { return (n_qt - first_qt(kt)) * group; }
  constexpr BwdStep step(int s) const { return BwdStep{n_qt - 1 - s / group, s % group}; }
  // Ticket t -> item: chunks of chunk_groups consecutive (b, g), key tiles outer inside.
  constexpr BwdItem item(int64_t ticket, int64_t Hkv) const {
    const int64_t per_chunk = chunk_groups * n_kt;
    const int64_t chunk = ticket / per_chunk, local = ticket % per_chunk;
    const int64_t first = chunk * chunk_groups;
    const int64_t size = groups - first < chunk_groups ? groups - first : chunk_groups;
    const int64_t gi = first + local % size;
    return BwdItem{gi / Hkv, gi % Hkv, static_cast<int>(local / size)};
  }
  constexpr int64_t ticket(const BwdItem& it, int64_t Hkv) const {
    const int64_t gi = it.b * Hkv + it.g;
    const int64_t chunk = gi / chunk_groups, first = chunk * chunk_groups;
    const int64_t size = groups - first < chunk_groups ? groups - first : chunk_groups;
    return chunk * chunk_groups * n_kt + static_cast<int64_t>(it.kt) * size + (gi - first);
  }
};

constexpr BwdSchedule make_bwd_schedule(const FlashParams& p, FlashTiles tiles, int64_t chunk_groups) {
  BwdSchedule s;
  s.T = p.T;
  s.group = static_cast<int>(p.group);
  s.Br = tiles.Br;
  s.Bc = tiles.Bc;
  s.n_qt = static_cast<int>((p.T + tiles.Br - 1) / tiles.Br);
  s.n_kt = static_cast<int>((p.T + tiles.Bc - 1) / tiles.Bc);
  s.groups = p.B * p.Hkv;
  s.chunk_groups = chunk_groups > 0 ? chunk_groups : 1;
  s.items = s.groups * s.n_kt;
  return s;
}

// Rows per preprocessing work item (one CUDA block: (b, kv head, row chunk), every
// query head of the group); the sink gradient is summed per (h, b, chunk) first, then
// over (b, chunk) in a fixed order.
constexpr int kRowChunk = 32;

}  // namespace kdtrain::flash
