// Shared by the wgmma tests (test_sim_wgmma.cpp: the emulator; test_cuda_wgmma.cpp: the
// hardware against the emulator): random bf16 operands, the tests' own reading of the
// ISA's canonical layouts, and one wgmma as a self-contained case (a shared-memory image,
// descriptors relative to it, A registers, C) with the kernel body that runs it
// (tests/tc/sm90a/wgmma_probe_body.cuh) under the emulator.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include <cmath>

#include "tc/sm90a/wgmma_probe_body.cuh"
#include "kernels/tc/sim/simt.h"
#include "kernels/tc/wgmma_desc.h"

namespace kdtrain::wgmmatest {

using tc::WgmmaMajor;
using tc::WgmmaSwizzle;

inline std::vector<uint16_t> random_bf16(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = sim::bf16_round(u(rng));
  return v;
}

// This file's reading of the ISA's canonical layouts (9.7.15.5.1.1): byte offset of
// element (mn, k), k < 16, from a start aligned to the swizzle pattern. W chunks of 16
// bytes per row; within each 128-byte line chunk c sits at c ^ (line % W).
inline int placed_at(WgmmaSwizzle s, WgmmaMajor major, int lbo, int sbo, int mn, int k) {
  const int W = tc::wgmma_swizzle_chunks(s);
  if (s == WgmmaSwizzle::none) {
    // Core matrices of 8 rows x 16 bytes, each contiguous.
    if (major == WgmmaMajor::k) return (mn / 8) * sbo + (k / 8) * lbo + (mn % 8) * 16 + (k % 8) * 2;
    return (mn / 8) * sbo + (k / 8) * lbo + (k % 8) * 16 + (mn % 8) * 2;
  }
  // Swizzled: rows of 16W bytes, 8 rows to a pattern; row = mn (K-major) or k (MN-major).
  const int row = major == WgmmaMajor::k ? mn % 8 : k % 8, col = major == WgmmaMajor::k ? k : mn % (8 * W);
  const int group = major == WgmmaMajor::k ? (mn / 8) * sbo : (k / 8) * sbo + (mn / (8 * W)) * lbo;
  const int p = row * 16 * W + (col / 8) * 16;  // the 16-byte chunk, unswizzled
  const int line = p / 128, chunk = (p % 128) / 16;
  return group + line * 128 + (chunk ^ (line % W)) * 16 + (col % 8) * 2;
}

struct Operand {
  WgmmaSwizzle swizzle;
  WgmmaMajor major;
  int lbo, sbo;  // bytes
  // MN-major only: the operand is columns mn_first.. of this placement, its descriptor
  // starting 2 mn_first bytes into the swizzle rows (mn_first < 8W, within one row), as
  // the D 64 backward's dQ reads K from the middle of 128-byte rows.
  int mn_first = 0;
};

// LBO/SBO of a dense placement of an mn_extent x 16 operand in each mode.
inline Operand dense(WgmmaSwizzle s, WgmmaMajor major, int mn_extent) {
  const int W = tc::wgmma_swizzle_chunks(s);
  if (s == WgmmaSwizzle::none) {
    if (major == WgmmaMajor::k) return {s, major, 128, 256};  // k halves 128 apart, 8-row groups 256
    return {s, major, 128 * (mn_extent / 8), 128};            // 8-k groups after all mn core matrices
  }
  if (major == WgmmaMajor::k) return {s, major, 16, 8 * 16 * W};
  // MN-major: a pattern is 8 k rows of one block of 8W mn; the mn blocks are adjacent,
  // the second k group after all of them (a whole pattern even when mn_extent < 8W).
  return {s, major, 8 * 16 * W, 8 * 16 * W * std::max(1, mn_extent / (8 * W))};
}

// A (64 x 16) and B (16 x n) densely placed in one swizzle mode, each K- and MN-major.
struct DenseOperands {
  Operand ak, amn, bk, bmn;
  DenseOperands(WgmmaSwizzle s, int n)
      : ak(dense(s, WgmmaMajor::k, 64)), amn(dense(s, WgmmaMajor::mn, 64)), bk(dense(s, WgmmaMajor::k, n)),
        bmn(dense(s, WgmmaMajor::mn, n)) {}
};

constexpr WgmmaSwizzle kSwizzles[] = {WgmmaSwizzle::none, WgmmaSwizzle::b32, WgmmaSwizzle::b64, WgmmaSwizzle::b128};

inline size_t operand_bytes(const Operand& o, int mn_extent) {
  size_t hi = 0;
  for (int mn = 0; mn < mn_extent; ++mn)
    for (int k = 0; k < 16; ++k)
      hi = std::max(hi, static_cast<size_t>(placed_at(o.swizzle, o.major, o.lbo, o.sbo, mn, k)) + 2);
  return (hi + 1023) / 1024 * 1024;
}

inline const char* name(WgmmaSwizzle s) {
  return s == WgmmaSwizzle::none ? "none" : s == WgmmaSwizzle::b32 ? "32B" : s == WgmmaSwizzle::b64 ? "64B" : "128B";
}

// One D = A B + C on a warpgroup, A (64 x 16) from shared memory (placed as `a`) or from
// registers (the ISA's fragment: register j of thread 32w + 4g + q holds row
// 16w + g + 8(j%2), cols 2q + 8(j/2), +1), B (16 x n) from shared memory (placed as `b`),
// C in the ISA's D positions (thread 32w + 4g + q, i < n/2: row 16w + g + 8((i%4)/2),
// col 8(i/4) + 2q + i%2).
struct WgmmaCase {
  WgmmaProbeArgs args;  // points into the vectors below; set d before running
  std::vector<unsigned char> image;
  std::vector<uint32_t> a;
  std::vector<float> c, C;         // C: [64][n] row-major
  std::vector<uint16_t> A, B;      // A: [64][16], B: [16][n] row-major
  WgmmaCase(int n, const Operand* a, const Operand& b, bool trans_a, bool trans_b, bool accumulate, uint32_t seed);
  WgmmaCase(const WgmmaCase&) = delete;  // args points into this object
};

inline int d_row(int t, int i) { return 16 * (t / 32) + (t % 32) / 4 + 8 * ((i % 4) / 2); }
inline int d_col(int t, int i) { return 8 * (i / 4) + 2 * (t % 4) + i % 2; }

// A case of n columns (32, 64 or 128): random A, B and C (from seed), A from shared memory
// placed as `a` or, with a null `a`, from registers.
inline WgmmaCase::WgmmaCase(int N, const Operand* a, const Operand& b, bool trans_a, bool trans_b, bool accumulate,
                            uint32_t seed) {
  WgmmaCase& w = *this;  // w.a, the A registers, beside the parameter a, A's placement
  w.A = random_bf16(64 * 16, seed);
  w.B = random_bf16(16 * N, seed + 1);
  std::mt19937 rng(seed + 2);
  std::uniform_real_distribution<float> u(-4.f, 4.f);
  w.C.resize(64 * N);
  for (auto& x : w.C) x = u(rng);
  if (b.mn_first != 0 && (b.major != WgmmaMajor::mn || b.swizzle == WgmmaSwizzle::none ||
                          b.mn_first >= 8 * tc::wgmma_swizzle_chunks(b.swizzle)))
    throw std::invalid_argument("WgmmaCase: mn_first needs an MN-major swizzled B and must stay within a row");
  const size_t a_bytes = a != nullptr ? operand_bytes(*a, 64) : 0, b_bytes = operand_bytes(b, N + b.mn_first);
  w.image.assign(a_bytes + b_bytes, 0);
  auto put = [&](size_t at, uint16_t v) { std::memcpy(&w.image[at], &v, 2); };
  for (int k = 0; k < 16; ++k) {
    if (a != nullptr)
      for (int m = 0; m < 64; ++m) put(placed_at(a->swizzle, a->major, a->lbo, a->sbo, m, k), w.A[m * 16 + k]);
    for (int n = 0; n < N; ++n)
      put(a_bytes + placed_at(b.swizzle, b.major, b.lbo, b.sbo, b.mn_first + n, k), w.B[k * N + n]);
  }
  w.a.assign(128 * 4, 0);
  w.c.resize(128 * (N / 2));
  for (int t = 0; t < 128; ++t) {
    for (int j = 0; j < 4; ++j) {
      const int row = 16 * (t / 32) + (t % 32) / 4 + 8 * (j % 2), col = 2 * (t % 4) + 8 * (j / 2);
      w.a[4 * t + j] = w.A[row * 16 + col] | (uint32_t(w.A[row * 16 + col + 1]) << 16);
    }
    for (int i = 0; i < N / 2; ++i) w.c[t * (N / 2) + i] = w.C[d_row(t, i) * N + d_col(t, i)];
  }
  WgmmaProbeArgs& p = w.args;
  p.n = N;
  p.a_regs = a == nullptr;
  p.trans_a = trans_a;
  p.trans_b = trans_b;
  p.accumulate = accumulate;
  p.image = w.image.data();
  p.image_bytes = static_cast<int>(w.image.size());
  p.a_desc = a != nullptr ? tc::wgmma_desc(0, a->lbo, a->sbo, a->swizzle) : 0;
  p.b_desc = tc::wgmma_desc(static_cast<uint32_t>(a_bytes + 2 * b.mn_first), b.lbo, b.sbo, b.swizzle);
  p.a = w.a.data();
  p.c = w.c.data();
}

// D of the case by the emulator ([thread][n/2]).
inline std::vector<float> emulate(const WgmmaCase& w) {
  std::vector<float> d(128 * static_cast<size_t>(w.args.n / 2), NAN);
  WgmmaProbeArgs p = w.args;
  p.d = d.data();
  sim::LaunchConfig cfg;
  cfg.block = {128, 1, 1};
  cfg.shared_bytes = static_cast<size_t>(p.image_bytes);
  sim::launch(cfg, [&](unsigned char* smem) {
    wgmma_probe_dispatch(p, [&](auto n, auto regs, auto ta, auto tb) {
      wgmma_probe_body<decltype(n)::value, decltype(regs)::value, decltype(ta)::value, decltype(tb)::value>(p, smem);
    });
  });
  return d;
}

// Elements of d ([thread][n/2]) farther from the double product than the fp32 bound of a
// 17-term sum, |err| <= 17 2^-24 sum |terms|, times `slack`.
inline int count_off_reference(const WgmmaCase& w, const std::vector<float>& d, double slack = 1.0) {
  const int n = w.args.n;
  int bad = 0;
  for (int t = 0; t < 128; ++t)
    for (int i = 0; i < n / 2; ++i) {
      const int m = d_row(t, i), c = d_col(t, i);
      double ref = w.args.accumulate ? w.C[m * n + c] : 0.0, mag = std::fabs(ref);
      for (int k = 0; k < 16; ++k) {
        const double p = double(sim::bf16_value(w.A[m * 16 + k])) * sim::bf16_value(w.B[k * n + c]);
        ref += p;
        mag += std::fabs(p);
      }
      bad += !(std::fabs(d[t * (n / 2) + i] - ref) <= slack * 17 * std::ldexp(mag, -24));
    }
  return bad;
}

}  // namespace kdtrain::wgmmatest
