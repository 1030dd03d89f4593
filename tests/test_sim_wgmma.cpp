// The emulator's wgmma (kernels/tc/sim/simt_wgmma.cpp) and the descriptors it decodes
// (kernels/tc/wgmma_desc.h), tested as test_sim_simt.cpp tests mma.sync:
// - the descriptor's bit fields at the PTX ISA's positions, literally;
// - operands placed in shared memory by this file's own reading of the ISA's canonical
//   layouts (every swizzle mode, K-major and MN-major, A from shared memory and from
//   registers), the product against a double matmul and the D fragment at the ISA's
//   positions (warp w, lane 4g + q: rows 16w + g (+8), cols 8j + 2q (+1));
// - WgmmaTile (the kernels' tile layout, written as a chunk XOR on element indices)
//   read back through its descriptors (the emulator's address-bit swizzle);
// - the asynchrony: accumulators unreadable until wait_group, operands read at the
//   wait, wait_group N retiring only older groups, chained k-steps, and the errors for a
//   missing wgmma.fence, a missing fence.proxy.async after cp.async, divergent or
//   non-uniform collectives and groups never waited for.
// CuTe's encoding, a second source: scripts/tests/test_wgmma_desc_cute.py.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include "kernels/tc/wgmma.cuh"

using namespace kdtrain;
using tc::WgmmaMajor;
using tc::WgmmaSwizzle;

namespace {

sim::LaunchConfig block_of(unsigned threads, size_t smem) {
  sim::LaunchConfig c;
  c.block = {threads, 1, 1};
  c.shared_bytes = smem;
  return c;
}

uint16_t bf(float x) { return sim::bf16_round(x); }

std::vector<uint16_t> random_bf16(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = bf(u(rng));
  return v;
}

// This file's reading of the ISA's canonical layouts (9.7.15.5.1.1): byte offset of
// element (mn, k), k < 16, from a start aligned to the swizzle pattern. W chunks of 16
// bytes per row; within each 128-byte line chunk c sits at c ^ (line % W).
int placed_at(WgmmaSwizzle s, WgmmaMajor major, int lbo, int sbo, int mn, int k) {
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
};

// LBO/SBO of a dense placement of an mn_extent x 16 operand in each mode.
Operand dense(WgmmaSwizzle s, WgmmaMajor major, int mn_extent) {
  const int W = tc::wgmma_swizzle_chunks(s);
  if (s == WgmmaSwizzle::none) {
    if (major == WgmmaMajor::k) return {s, major, 128, 256};  // k halves 128 apart, 8-row groups 256
    return {s, major, 128 * (mn_extent / 8), 128};            // 8-k groups after all mn core matrices
  }
  if (major == WgmmaMajor::k) return {s, major, 16, 8 * 16 * W};
  // MN-major: a pattern is 8 k rows of one block of 8W mn; the mn blocks are adjacent,
  // the second k group after all of them.
  return {s, major, 8 * 16 * W, 8 * 16 * W * (mn_extent / (8 * W))};
}

size_t operand_bytes(const Operand& o, int mn_extent) {
  size_t hi = 0;
  for (int mn = 0; mn < mn_extent; ++mn)
    for (int k = 0; k < 16; ++k)
      hi = std::max(hi, static_cast<size_t>(placed_at(o.swizzle, o.major, o.lbo, o.sbo, mn, k)) + 2);
  return (hi + 1023) / 1024 * 1024;
}

const char* name(WgmmaSwizzle s) {
  return s == WgmmaSwizzle::none ? "none" : s == WgmmaSwizzle::b32 ? "32B" : s == WgmmaSwizzle::b64 ? "64B" : "128B";
}

}  // namespace

TEST_CASE("wgmma descriptor fields sit at the PTX ISA's bit positions", "[sim][wgmma]") {
  // start 0x1230 -> 0x123 in bits 0-13; LBO 0x40 -> 4 at 16; SBO 0x400 -> 0x40 at 32;
  // base offset 5 at 49; 128B swizzle = 1 at 62.
  const uint64_t d = tc::wgmma_desc(0x1230, 0x40, 0x400, WgmmaSwizzle::b128, 5);
  CHECK(d == (0x123ull | (4ull << 16) | (0x40ull << 32) | (5ull << 49) | (1ull << 62)));
  CHECK(tc::wgmma_desc(0, 0, 0, WgmmaSwizzle::b64) == (2ull << 62));
  CHECK(tc::wgmma_desc(0, 0, 0, WgmmaSwizzle::b32) == (3ull << 62));
  CHECK(tc::wgmma_desc(0x3fff0, 0x3fff0, 0x3fff0, WgmmaSwizzle::none) ==
        (0x3fffull | (0x3fffull << 16) | (0x3fffull << 32)));
  const tc::WgmmaDescFields f = tc::wgmma_decode(d);
  CHECK(f.start == 0x1230);
  CHECK(f.lbo == 0x40);
  CHECK(f.sbo == 0x400);
  CHECK(f.base_offset == 5);
  CHECK(f.swizzle == WgmmaSwizzle::b128);
}

TEST_CASE("wgmma canonical layouts: the decoder agrees with the ISA's figures, literally", "[sim][wgmma]") {
  // 128B, K-major, SBO 1024: element (9, 10) is row 9 (pattern 1, row 1), chunk 1
  // (k 8..15) -> chunk 1 ^ 1 = 0 of line 1: 1024 + 128 + 0 + 2*2.
  const auto f = tc::wgmma_decode(tc::wgmma_desc(0, 16, 1024, WgmmaSwizzle::b128));
  CHECK(tc::wgmma_element_address(f, WgmmaMajor::k, 9, 10) == 1024 + 128 + 4);
  // Row 3, k 0: chunk 0 ^ 3 = 3.
  CHECK(tc::wgmma_element_address(f, WgmmaMajor::k, 3, 0) == 3 * 128 + 3 * 16);
  // 32B, K-major, SBO 256: rows of 32 bytes, 4 to a 128-byte line; row 5 is in line 1,
  // so its chunk 0 moves to chunk 1: 5*32 + 16.
  const auto g = tc::wgmma_decode(tc::wgmma_desc(0, 16, 256, WgmmaSwizzle::b32));
  CHECK(tc::wgmma_element_address(g, WgmmaMajor::k, 5, 0) == 5 * 32 + 16);
  // 64B, MN-major, LBO 1024, SBO 512: k row 3 is in line 1 (rows of 64 bytes), mn 40
  // is block 1 (32 elements per row), chunk 1 -> 1 ^ 1 = 0: 1024 + 3*64 + 0 + 0.
  const auto h = tc::wgmma_decode(tc::wgmma_desc(0, 1024, 512, WgmmaSwizzle::b64));
  CHECK(tc::wgmma_element_address(h, WgmmaMajor::mn, 40, 3) == 1024 + 3 * 64);
  // No swizzle, K-major: core matrices of 8 x 16 bytes, k halves LBO apart.
  const auto n = tc::wgmma_decode(tc::wgmma_desc(0, 128, 256, WgmmaSwizzle::none));
  CHECK(tc::wgmma_element_address(n, WgmmaMajor::k, 9, 10) == 256 + 128 + 16 + 4);
  // ... and this file's placement agrees with the decoder in every mode.
  for (WgmmaSwizzle s : {WgmmaSwizzle::none, WgmmaSwizzle::b32, WgmmaSwizzle::b64, WgmmaSwizzle::b128})
    for (WgmmaMajor m : {WgmmaMajor::k, WgmmaMajor::mn}) {
      const Operand o = dense(s, m, 128);
      const auto d = tc::wgmma_decode(tc::wgmma_desc(0, o.lbo, o.sbo, s));
      int mismatches = 0;
      for (int mn = 0; mn < 128; ++mn)
        for (int k = 0; k < 16; ++k)
          mismatches += tc::wgmma_element_address(d, m, mn, k) != static_cast<uint32_t>(placed_at(s, m, o.lbo, o.sbo, mn, k));
      INFO(name(s) << (m == WgmmaMajor::k ? " K-major" : " MN-major"));
      CHECK(mismatches == 0);
    }
}

namespace {

// D = A B + C on one warpgroup: A (64 x 16) from shared memory (a.has_value) or from
// registers, B (16 x N) from shared memory, the product read back through the ISA's D
// positions, against a double matmul (fp32 sum of 17 terms: |err| <= 17 2^-24 sum |t|).
template <int N, bool kTransA, bool kTransB>
void check_product(const Operand* a, const Operand& b, bool accumulate, uint32_t seed) {
  const std::vector<uint16_t> A = random_bf16(64 * 16, seed), B = random_bf16(16 * N, seed + 1);
  std::vector<float> C(64 * N);
  std::mt19937 rng(seed + 2);
  std::uniform_real_distribution<float> u(-4.f, 4.f);
  for (auto& c : C) c = u(rng);
  const size_t a_bytes = a != nullptr ? operand_bytes(*a, 64) : 0, b_bytes = operand_bytes(b, N);
  std::vector<float> D(64 * N, NAN);
  const sim::LaunchStats st = sim::launch(block_of(128, a_bytes + b_bytes), [&](unsigned char* smem) {
    const int t = static_cast<int>(tc::thread_idx().x), w = t / 32, g = (t % 32) / 4, q = t % 4;
    auto* sa = reinterpret_cast<uint16_t*>(smem);
    auto* sb = reinterpret_cast<uint16_t*>(smem + a_bytes);
    if (t == 0) {
      for (int k = 0; k < 16; ++k) {
        if (a != nullptr)
          for (int m = 0; m < 64; ++m) sa[placed_at(a->swizzle, a->major, a->lbo, a->sbo, m, k) / 2] = A[m * 16 + k];
        for (int n = 0; n < N; ++n) sb[placed_at(b.swizzle, b.major, b.lbo, b.sbo, n, k) / 2] = B[k * N + n];
      }
    }
    tc::fence_proxy_async();
    tc::sync_block();
    float d[N / 2];
    for (int i = 0; i < N / 2; ++i) d[i] = C[(16 * w + g + 8 * ((i % 4) / 2)) * N + 8 * (i / 4) + 2 * q + i % 2];
    const uint64_t bd = tc::wgmma_desc(tc::shared_address(sb), b.lbo, b.sbo, b.swizzle);
    tc::wgmma_fence();
    if (a != nullptr) {
      tc::wgmma_ss<N, kTransA, kTransB>(d, tc::wgmma_desc(tc::shared_address(sa), a->lbo, a->sbo, a->swizzle), bd,
                                         accumulate);
    } else {
      // The ISA's A fragment: register j holds (row 16w + g + 8(j%2), cols 2q + 8(j/2), +1).
      uint32_t af[4];
      for (int j = 0; j < 4; ++j) {
        const int row = 16 * w + g + 8 * (j % 2), col = 2 * q + 8 * (j / 2);
        af[j] = A[row * 16 + col] | (uint32_t(A[row * 16 + col + 1]) << 16);
      }
      tc::wgmma_rs<N, kTransB>(d, af, bd, accumulate);
    }
    tc::wgmma_commit();
    tc::wgmma_wait<0>();
    for (int i = 0; i < N / 2; ++i) D[(16 * w + g + 8 * ((i % 4) / 2)) * N + 8 * (i / 4) + 2 * q + i % 2] = d[i];
  });
  CHECK(st.wgmma == 1);
  int bad = 0;
  for (int m = 0; m < 64; ++m)
    for (int n = 0; n < N; ++n) {
      double ref = accumulate ? C[m * N + n] : 0.0, mag = std::fabs(ref);
      for (int k = 0; k < 16; ++k) {
        const double p = double(sim::bf16_value(A[m * 16 + k])) * sim::bf16_value(B[k * N + n]);
        ref += p;
        mag += std::fabs(p);
      }
      bad += !(std::fabs(D[m * N + n] - ref) <= 17 * std::ldexp(mag, -24));
    }
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("sim wgmma: A and B from shared memory in every swizzle mode and major-ness match a matmul", "[sim][wgmma]") {
  uint32_t seed = 11;
  for (WgmmaSwizzle s : {WgmmaSwizzle::none, WgmmaSwizzle::b32, WgmmaSwizzle::b64, WgmmaSwizzle::b128}) {
    INFO("swizzle " << name(s));
    const Operand ak = dense(s, WgmmaMajor::k, 64), amn = dense(s, WgmmaMajor::mn, 64);
    const Operand bk = dense(s, WgmmaMajor::k, 128), bmn = dense(s, WgmmaMajor::mn, 128);
    check_product<128, false, false>(&ak, bk, true, seed++);
    check_product<128, false, true>(&ak, bmn, false, seed++);
    check_product<128, true, false>(&amn, bk, true, seed++);
    check_product<128, true, true>(&amn, bmn, true, seed++);
    const Operand bk64 = dense(s, WgmmaMajor::k, 64), bmn64 = dense(s, WgmmaMajor::mn, 64);
    check_product<64, false, false>(&ak, bk64, true, seed++);
    check_product<64, true, true>(&amn, bmn64, false, seed++);
  }
}

TEST_CASE("sim wgmma: A from registers (the ISA's fragment) matches a matmul", "[sim][wgmma]") {
  uint32_t seed = 101;
  for (WgmmaSwizzle s : {WgmmaSwizzle::none, WgmmaSwizzle::b32, WgmmaSwizzle::b64, WgmmaSwizzle::b128}) {
    INFO("swizzle " << name(s));
    check_product<128, false, false>(nullptr, dense(s, WgmmaMajor::k, 128), true, seed++);
    check_product<128, false, true>(nullptr, dense(s, WgmmaMajor::mn, 128), true, seed++);
    check_product<64, false, true>(nullptr, dense(s, WgmmaMajor::mn, 64), false, seed++);
  }
}

TEST_CASE("sim wgmma: WgmmaTile's chunk-XOR layout read through its descriptors, k-steps chained", "[sim][wgmma]") {
  // S = X Y^T (64 x 128, K = 128: both K-major) and O = X V (64 x 128, K = 128, V
  // MN-major), each 8 chained k-steps in one group.
  using TX = tc::WgmmaTile<64, 128>;
  using TY = tc::WgmmaTile<128, 128>;
  const std::vector<uint16_t> X = random_bf16(64 * 128, 5), Y = random_bf16(128 * 128, 6), V = random_bf16(128 * 128, 7);
  std::vector<float> S(64 * 128, NAN), O(64 * 128, NAN);
  sim::launch(block_of(128, TX::kBytes + 2 * TY::kBytes), [&](unsigned char* smem) {
    const int t = static_cast<int>(tc::thread_idx().x), w = t / 32, g = (t % 32) / 4, q = t % 4;
    auto* sx = reinterpret_cast<uint16_t*>(smem);
    auto* sy = reinterpret_cast<uint16_t*>(smem + TX::kBytes);
    auto* sv = reinterpret_cast<uint16_t*>(smem + TX::kBytes + TY::kBytes);
    for (int e = t; e < 128 * 128; e += 128) {
      const int r = e / 128, c = e % 128;
      if (r < 64) sx[TX::offset(r, c)] = X[e];
      sy[TY::offset(r, c)] = Y[e];
      sv[TY::offset(r, c)] = V[e];
    }
    tc::sync_block();
    float s[64], o[64];
    tc::wgmma_fence();
    for (int kb = 0; kb < 8; ++kb) {
      tc::wgmma_ss<128, false, false>(s, TX::desc_k_major(tc::shared_address(sx), 0, kb),
                                      TY::desc_k_major(tc::shared_address(sy), 0, kb), kb > 0);
      tc::wgmma_ss<128, false, true>(o, TX::desc_k_major(tc::shared_address(sx), 0, kb),
                                     TY::desc_mn_major(tc::shared_address(sv), kb), kb > 0);
    }
    tc::wgmma_commit();
    tc::wgmma_wait<0>();
    for (int i = 0; i < 64; ++i) {
      const int pos = (16 * w + g + 8 * ((i % 4) / 2)) * 128 + 8 * (i / 4) + 2 * q + i % 2;
      S[pos] = s[i];
      O[pos] = o[i];
    }
  });
  int bad_s = 0, bad_o = 0;
  for (int m = 0; m < 64; ++m)
    for (int n = 0; n < 128; ++n) {
      double rs = 0, ms = 0, ro = 0, mo = 0;
      for (int k = 0; k < 128; ++k) {
        const double x = sim::bf16_value(X[m * 128 + k]);
        const double ps = x * sim::bf16_value(Y[n * 128 + k]), po = x * sim::bf16_value(V[k * 128 + n]);
        rs += ps;
        ms += std::fabs(ps);
        ro += po;
        mo += std::fabs(po);
      }
      // fp32 sums of 128 terms: |err| <= 128 2^-24 sum |t|.
      bad_s += !(std::fabs(S[m * 128 + n] - rs) <= 128 * std::ldexp(ms, -24));
      bad_o += !(std::fabs(O[m * 128 + n] - ro) <= 128 * std::ldexp(mo, -24));
    }
  CHECK(bad_s == 0);
  CHECK(bad_o == 0);
}

namespace {

using T64 = tc::WgmmaTile<64, 64>;

// A and B (both 64 x 64, K-major, 128B swizzle) of random bf16 in shared memory, filled
// by every thread, fenced for the async proxy and published by a barrier.
void fill_ab(unsigned char* smem, uint32_t seed) {
  const std::vector<uint16_t> v = random_bf16(2 * 64 * 64, seed);
  const int t = static_cast<int>(tc::thread_idx().x);
  auto* s = reinterpret_cast<uint16_t*>(smem);
  for (int e = t; e < 2 * 64 * 64; e += static_cast<int>(tc::block_dim().x)) s[e] = v[e];
  tc::fence_proxy_async();
  tc::sync_block();
}
uint64_t desc_a(unsigned char* smem) { return T64::desc_k_major(tc::shared_address(smem), 0, 0); }
uint64_t desc_b(unsigned char* smem) { return T64::desc_k_major(tc::shared_address(smem + T64::kBytes), 0, 0); }

bool all_nan(const float (&d)[32]) {
  for (float x : d)
    if (!std::isnan(x)) return false;
  return true;
}

template <typename Body>
std::string launch_error(unsigned threads, Body body) {
  try {
    sim::launch(block_of(threads, 2 * T64::kBytes), body);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("sim wgmma: accumulators are unreadable until wait_group, operands are read at the wait", "[sim][wgmma]") {
  bool poisoned_before = false, written_after = false, zero_b_seen = false, older_only = false, reuse_ok = false;
  sim::launch(block_of(128, 2 * T64::kBytes), [&](unsigned char* smem) {
    fill_ab(smem, 3);
    const int t = static_cast<int>(tc::thread_idx().x);
    float d1[32], d2[32];
    for (float& x : d1) x = 1.f;
    for (float& x : d2) x = 2.f;
    tc::wgmma_fence();
    tc::wgmma_ss<64, false, false>(d1, desc_a(smem), desc_b(smem), true);
    tc::wgmma_commit();
    tc::wgmma_ss<64, false, false>(d2, desc_a(smem), desc_b(smem), true);
    tc::wgmma_commit();
    if (t == 0) poisoned_before = all_nan(d1) && all_nan(d2);
    // B zeroed while both groups are in flight: they read it at their wait.
    auto* b = reinterpret_cast<uint16_t*>(smem + T64::kBytes);
    for (int e = t; e < 64 * 64; e += 128) b[e] = 0;
    tc::fence_proxy_async();
    tc::sync_block();
    tc::wgmma_wait<1>();  // the first group only
    if (t == 0) {
      older_only = !all_nan(d1) && all_nan(d2);
      zero_b_seen = true;
      for (float x : d1) zero_b_seen = zero_b_seen && x == 1.f;  // A 0 + C
    }
    tc::wgmma_wait<0>();
    if (t == 0) {
      written_after = true;
      for (float x : d2) written_after = written_after && x == 2.f;
    }
    // Registers changed after the wait are what the next accumulate reads.
    for (float& x : d1) x = 5.f;
    tc::wgmma_fence();
    tc::wgmma_ss<64, false, false>(d1, desc_a(smem), desc_b(smem), true);
    tc::wgmma_commit();
    tc::wgmma_wait<0>();
    if (t == 0) {
      reuse_ok = true;
      for (float x : d1) reuse_ok = reuse_ok && x == 5.f;
    }
  });
  CHECK(poisoned_before);
  CHECK(older_only);
  CHECK(zero_b_seen);
  CHECK(written_after);
  CHECK(reuse_ok);
}

TEST_CASE("sim wgmma: misuse is reported", "[sim][wgmma]") {
  auto mma = [](unsigned char* smem, float (&d)[32]) { tc::wgmma_ss<64, false, false>(d, desc_a(smem), desc_b(smem), false); };
  // No wgmma.fence before the first mma_async, and none after a wait.
  CHECK_THAT(launch_error(128, [&](unsigned char* smem) {
               fill_ab(smem, 1);
               float d[32];
               mma(smem, d);
             }),
             Catch::Contains("without a wgmma.fence"));
  CHECK_THAT(launch_error(128, [&](unsigned char* smem) {
               fill_ab(smem, 1);
               float d[32];
               tc::wgmma_fence();
               mma(smem, d);
               tc::wgmma_commit();
               tc::wgmma_wait<0>();
               mma(smem, d);
             }),
             Catch::Contains("without a wgmma.fence"));
  // cp.async data read by wgmma without fence.proxy.async.
  CHECK_THAT(launch_error(128, [&](unsigned char* smem) {
               static const std::vector<uint16_t> src = random_bf16(2 * 64 * 64, 9);
               const int t = static_cast<int>(tc::thread_idx().x);
               for (int c = t; c < 2 * 64 * 64 / 8; c += 128) tc::cp_async_16(smem + 16 * c, src.data() + 8 * c);
               tc::cp_async_commit();
               tc::cp_async_wait<0>();
               tc::sync_block();
               float d[32];
               tc::wgmma_fence();
               mma(smem, d);
               tc::wgmma_commit();
               tc::wgmma_wait<0>();
             }),
             Catch::Contains("without a following fence.proxy.async"));
  // Divergence, non-uniform descriptors, groups never waited for, partial warpgroups.
  CHECK_THAT(launch_error(128, [&](unsigned char*) {
               if (tc::thread_idx().x < 64)
                 tc::wgmma_fence();
               else
                 tc::wgmma_commit();
             }),
             Catch::Contains("different collectives"));
  CHECK_THAT(launch_error(128, [&](unsigned char* smem) {
               fill_ab(smem, 1);
               float d[32];
               tc::wgmma_fence();
               const int row0 = tc::thread_idx().x < 32 ? 0 : 8;
               tc::wgmma_ss<64, false, false>(d, T64::desc_k_major(tc::shared_address(smem), row0, 0), desc_b(smem), false);
             }),
             Catch::Contains("differ between the threads"));
  CHECK_THAT(launch_error(128, [&](unsigned char* smem) {
               fill_ab(smem, 1);
               float d[32];
               tc::wgmma_fence();
               mma(smem, d);
               tc::wgmma_commit();
             }),
             Catch::Contains("never retired"));
  CHECK_THAT(launch_error(96, [&](unsigned char*) { tc::wgmma_fence(); }), Catch::Contains("whole warpgroups"));
  // A swizzled operand whose start is not the first row of its pattern.
  CHECK_THAT(launch_error(128, [&](unsigned char* smem) {
               fill_ab(smem, 1);
               float d[32];
               tc::wgmma_fence();
               tc::wgmma_ss<64, false, false>(d, T64::desc_k_major(tc::shared_address(smem), 1, 0), desc_b(smem), false);
               tc::wgmma_commit();
               tc::wgmma_wait<0>();
             }),
             Catch::Contains("first row"));
}
