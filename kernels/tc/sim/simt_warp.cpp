// SIMT emulator: warp collectives and bf16 rounding. Each lane deposits its operands
// in the warp's slot and waits; the last lane to arrive computes every lane's result
// from the PTX ISA definitions (sections cited per function) and releases the warp.
#include <cstring>
#include <sstream>

#include "kernels/tc/sim/simt_internal.h"

namespace kdtrain::sim {
using namespace detail;

namespace {

const char* name_of(Collective c) {
  switch (c) {
    case Collective::none: return "none";
    case Collective::sync: return "sync_warp";
    case Collective::shfl_xor: return "shfl_xor";
    case Collective::shfl_idx: return "shfl_idx";
    case Collective::mma: return "mma";
    case Collective::ldmatrix: return "ldmatrix";
  }
  return "?";
}

// The current lane joins `op` (with its ldmatrix qualifiers) and gets its slot.
LaneIO& join(Collective op, int num = 0, bool trans = false) {
  BlockRun& r = current_run();
  Warp& w = r.warps[r.current->warp];
  if (w.arrived == 0) {
    w.op = op;
    w.num = num;
    w.trans = trans;
  } else if (w.op != op || w.num != num || w.trans != trans) {
    std::ostringstream s;
    s << "lanes of warp " << r.current->warp << " reached different collectives (" << name_of(w.op)
      << " and " << name_of(op) << "): divergent warp-synchronous code";
    fail(s.str());
  }
  return w.io[r.current->lane];
}

float as_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
uint32_t as_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
float lo_bf16(uint32_t v) { return as_float(v << 16); }
float hi_bf16(uint32_t v) { return as_float(v & 0xffff0000u); }

// mma.m16n8k16 .row.col .f32.bf16.bf16.f32 (PTX ISA 9.7.14.5.8), g = lane/4, t = lane%4:
//   A: a_i, i = 0..7 (two per register, low half first): row g for i in {0,1,4,5}, else
//      g + 8; col 2t + (i & 1), plus 8 for i >= 4.
//   B: b_i, i = 0..3: row (k) 2t + (i & 1), plus 8 for i >= 2; col (n) g.
//   C, D: c_i, i = 0..3: row g for i < 2, else g + 8; col 2t + (i & 1).
// D = A B + C with the products (exact in fp32: 8-bit significands) summed in fp32 in
// k order onto C.
void compute_mma(Warp& w) {
  float A[16][16], B[16][8], C[16][8];
  for (int l = 0; l < 32; ++l) {
    const LaneIO& io = w.io[l];
    const int g = l / 4, t = l % 4;
    for (int i = 0; i < 8; ++i) {
      const uint32_t reg = io.in[i / 2];
      const float v = (i & 1) ? hi_bf16(reg) : lo_bf16(reg);
      const int row = (i < 2 || (i >= 4 && i < 6)) ? g : g + 8;
      const int col = 2 * t + (i & 1) + (i >= 4 ? 8 : 0);
      A[row][col] = v;
    }
    for (int i = 0; i < 4; ++i) {
      const uint32_t reg = io.in[4 + i / 2];
      B[2 * t + (i & 1) + (i >= 2 ? 8 : 0)][g] = (i & 1) ? hi_bf16(reg) : lo_bf16(reg);
    }
    for (int i = 0; i < 4; ++i) C[i < 2 ? g : g + 8][2 * t + (i & 1)] = as_float(io.in[6 + i]);
  }
  for (int l = 0; l < 32; ++l) {
    const int g = l / 4, t = l % 4;
    for (int i = 0; i < 4; ++i) {
      const int row = i < 2 ? g : g + 8, col = 2 * t + (i & 1);
      float acc = C[row][col];
      for (int k = 0; k < 16; ++k) acc += A[row][k] * B[k][col];
      w.io[l].out[i] = as_bits(acc);
    }
  }
}

// ldmatrix.sync.aligned.m8n8.x{1,2,4}{.trans}.shared.b16 (PTX ISA 9.7.14.5.15): lanes
// 8m..8m+7 hold the addresses of rows 0..7 of matrix m (16 contiguous bytes each).
// Lane l receives in register m the elements (row l/4, cols 2(l%4), 2(l%4)+1) of matrix m,
// low half first; with .trans, (rows 2(l%4), 2(l%4)+1, col l/4).
void compute_ldmatrix(Warp& w) {
  for (int m = 0; m < w.num; ++m) {
    for (int r = 0; r < 8; ++r) {
      const unsigned char* a = w.io[8 * m + r].addr;
      check_shared(a, 16, "ldmatrix row address");
      if (reinterpret_cast<uintptr_t>(a) % 16 != 0) fail("ldmatrix row address is not 16-byte aligned");
    }
    for (int l = 0; l < 32; ++l) {
      uint16_t e0, e1;
      if (!w.trans) {
        const unsigned char* row = w.io[8 * m + l / 4].addr;
        std::memcpy(&e0, row + 2 * (2 * (l % 4)), 2);
        std::memcpy(&e1, row + 2 * (2 * (l % 4) + 1), 2);
      } else {
        std::memcpy(&e0, w.io[8 * m + 2 * (l % 4)].addr + 2 * (l / 4), 2);
        std::memcpy(&e1, w.io[8 * m + 2 * (l % 4) + 1].addr + 2 * (l / 4), 2);
      }
      w.io[l].out[m] = static_cast<uint32_t>(e0) | (static_cast<uint32_t>(e1) << 16);
    }
  }
}

// shfl.sync.bfly / shfl.sync.idx with a full member mask and width 32 (PTX ISA
// 9.7.9.6 shfl.sync): lane l reads lane l ^ mask, or lane src % 32.
void compute_shuffle(Warp& w, bool xor_mode) {
  for (int l = 0; l < w.lanes; ++l) {
    const int arg = static_cast<int>(w.io[l].in[1]);
    const int src = xor_mode ? (l ^ arg) : (arg & 31);
    if (src >= w.lanes) fail("shuffle reads a lane that does not exist in this warp");
    w.io[l].out[0] = w.io[src].in[0];
  }
}

// Completes the collective when the current lane is the last to arrive (computing every
// lane's result and releasing the others); otherwise waits for the rest of the warp.
void arrive() {
  BlockRun& r = current_run();
  Warp& w = r.warps[r.current->warp];
  if (++w.arrived < w.lanes) {
    wait_as(FiberState::at_warp_collective);
    return;
  }
  if ((w.op == Collective::mma || w.op == Collective::ldmatrix) && w.lanes != 32)
    fail("mma/ldmatrix need a full warp of 32 threads");
  switch (w.op) {
    case Collective::mma: compute_mma(w); ++r.stats->mma; break;
    case Collective::ldmatrix: compute_ldmatrix(w); ++r.stats->ldmatrix; break;
    case Collective::shfl_xor: compute_shuffle(w, true); break;
    case Collective::shfl_idx: compute_shuffle(w, false); break;
    case Collective::sync:
    case Collective::none: break;
  }
  ++r.stats->warp_collectives;
  w.arrived = 0;
  w.op = Collective::none;
  const unsigned first = r.current->warp * 32;
  for (int l = 0; l < w.lanes; ++l) {
    Fiber& f = (*r.fibers)[first + l];
    if (f.state == FiberState::at_warp_collective) f.state = FiberState::ready;
  }
}

}  // namespace

void sync_warp() {
  join(Collective::sync);
  arrive();
}

namespace {
// A shuffle: this lane's value and its operand (lane mask or source lane) in, one word out.
uint32_t shuffle(Collective kind, uint32_t value, int operand) {
  LaneIO& io = join(kind);
  io.in[0] = value;
  io.in[1] = static_cast<uint32_t>(operand);
  arrive();
  return io.out[0];
}
}  // namespace

uint32_t shfl_xor(uint32_t value, int lane_mask) { return shuffle(Collective::shfl_xor, value, lane_mask); }

uint32_t shfl_idx(uint32_t value, int src_lane) { return shuffle(Collective::shfl_idx, value, src_lane); }

void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2], const float (&c)[4]) {
  LaneIO& io = join(Collective::mma);
  for (int i = 0; i < 4; ++i) io.in[i] = a[i];
  io.in[4] = b[0];
  io.in[5] = b[1];
  for (int i = 0; i < 4; ++i) io.in[6 + i] = as_bits(c[i]);
  arrive();
  for (int i = 0; i < 4; ++i) d[i] = as_float(io.out[i]);
}

void ldmatrix(uint32_t* r, int num, bool trans, const void* smem_row) {
  LaneIO& io = join(Collective::ldmatrix, num, trans);
  io.addr = static_cast<const unsigned char*>(smem_row);
  arrive();
  for (int m = 0; m < num; ++m) r[m] = io.out[m];
}

// Round to nearest, ties to even, on the bit pattern (exact for normals, subnormals,
// infinities and overflow to infinity); NaN -> 0x7fff, as __float2bfloat16_rn and
// cvt.rn.bf16.f32.
uint16_t bf16_round(float x) {
  const uint32_t u = as_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fff;
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

float bf16_value(uint16_t bits) { return as_float(static_cast<uint32_t>(bits) << 16); }

}  // namespace kdtrain::sim
