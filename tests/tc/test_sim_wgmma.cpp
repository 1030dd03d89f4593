// The emulator's wgmma (kernels/tc/sim/simt_wgmma.cpp) and the descriptors it decodes
// (kernels/tc/wgmma_desc.h), tested as test_sim_simt.cpp tests mma.sync:
// - the descriptor's bit fields at the PTX ISA's positions, literally;
// - operands placed in shared memory by this file's own reading of the ISA's canonical
//   layouts (every swizzle mode, K-major and MN-major, A from shared memory and from
//   registers), the product against a double matmul and the D fragment at the ISA's
//   positions (warp w, lane 4g + q: rows 16w + g (+8), cols 8j + 2q (+1));
// - WgmmaTile (the kernels' tile layout, written as a chunk XOR on element indices)
//   read back through its descriptors (the emulator's address-bit swizzle);
// - the asynchrony: accumulators unreadable until wait_group, wait_group N retiring only
//   older groups, chained k-steps, and the errors for a missing wgmma.fence, a missing
//   fence.proxy.async after cp.async, divergent or non-uniform collectives and groups
//   never waited for. What Hopper forbids between issue and wait (operands changed,
//   per-warp waits, plain stores without the proxy fence): test_sim_wgmma_hazards.cpp.
// CuTe's encoding, a second source: scripts/tests/test_wgmma_desc_cute.py.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include "kernels/tc/wgmma.cuh"
#include "support/wgmma_test_util.h"

using namespace kdtrain;
using tc::WgmmaMajor;
using tc::WgmmaSwizzle;
using namespace kdtrain::wgmmatest;

namespace {

sim::LaunchConfig block_of(unsigned threads, size_t smem) {
  sim::LaunchConfig c;
  c.block = {threads, 1, 1};
  c.shared_bytes = smem;
  return c;
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
  for (WgmmaSwizzle s : kSwizzles)
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

// One wgmma case (wgmma_test_util.h: operands placed by this file's reading of the
// layouts, C and A registers at the ISA's fragment positions) run by the emulator
// through the probe body, against a double matmul.
template <int N, bool kTransA, bool kTransB>
void check_product(const Operand* a, const Operand& b, bool accumulate, uint32_t seed) {
  const WgmmaCase w(N, a, b, kTransA, kTransB, accumulate, seed);
  const std::vector<float> d = emulate(w);
  CHECK(count_off_reference(w, d) == 0);
}

}  // namespace

TEST_CASE("sim wgmma: A and B from shared memory in every swizzle mode and major-ness match a matmul", "[sim][wgmma]") {
  uint32_t seed = 11;
  for (WgmmaSwizzle s : kSwizzles) {
    INFO("swizzle " << name(s));
    const DenseOperands o(s, 128), o64(s, 64);
    check_product<128, false, false>(&o.ak, o.bk, true, seed++);
    check_product<128, false, true>(&o.ak, o.bmn, false, seed++);
    check_product<128, true, false>(&o.amn, o.bk, true, seed++);
    check_product<128, true, true>(&o.amn, o.bmn, true, seed++);
    check_product<64, false, false>(&o.ak, o64.bk, true, seed++);
    check_product<64, true, true>(&o.amn, o64.bmn, false, seed++);
    check_product<32, false, false>(&o.ak, dense(s, WgmmaMajor::k, 32), true, seed++);
    check_product<32, true, true>(&o.amn, dense(s, WgmmaMajor::mn, 32), false, seed++);
  }
}

TEST_CASE("sim wgmma: N 32 with B starting 64 bytes into its 128-byte swizzled rows matches a matmul", "[sim][wgmma]") {
  // The D 64 backward's dQ: B = K MN-major, columns 32..63 of 64-column 128B-swizzled rows.
  Operand b = dense(WgmmaSwizzle::b128, WgmmaMajor::mn, 64);
  b.mn_first = 32;
  const DenseOperands o(WgmmaSwizzle::b128, 64);
  check_product<32, true, true>(&o.amn, b, true, 71);
  check_product<32, false, true>(&o.ak, b, false, 72);
}

TEST_CASE("sim wgmma: A from registers (the ISA's fragment) matches a matmul", "[sim][wgmma]") {
  uint32_t seed = 101;
  for (WgmmaSwizzle s : kSwizzles) {
    INFO("swizzle " << name(s));
    check_product<128, false, false>(nullptr, dense(s, WgmmaMajor::k, 128), true, seed++);
    check_product<128, false, true>(nullptr, dense(s, WgmmaMajor::mn, 128), true, seed++);
    check_product<64, false, true>(nullptr, dense(s, WgmmaMajor::mn, 64), false, seed++);
    check_product<32, false, false>(nullptr, dense(s, WgmmaMajor::k, 32), true, seed++);  // D 64 backward's S^T, dP^T
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
    tc::fence_proxy_async();  // plain stores, read by wgmma through the async proxy
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

TEST_CASE("sim wgmma: accumulators are unreadable until wait_group, which retires the older groups first", "[sim][wgmma]") {
  bool poisoned_before = false, written_after = false, older_only = false, reuse_ok = false;
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
    tc::wgmma_wait<1>();  // the first group only
    if (t == 0) older_only = !all_nan(d1) && all_nan(d2);
    // The same product P on C = 1 and C = 2, so d2 - d1 = 1 (fp32 sums of |terms| < 64:
    // each rounding error below 64 * 2^-24, far under the 1e-3 allowed).
    float first[32];
    std::memcpy(first, d1, sizeof first);
    tc::wgmma_wait<0>();
    if (t == 0) {
      written_after = true;
      for (int i = 0; i < 32; ++i) written_after = written_after && std::fabs(d2[i] - first[i] - 1.f) < 1e-3f;
    }
    // Registers changed after the wait are what the next accumulate reads: 5 + P.
    for (float& x : d1) x = 5.f;
    tc::wgmma_fence();
    tc::wgmma_ss<64, false, false>(d1, desc_a(smem), desc_b(smem), true);
    tc::wgmma_commit();
    tc::wgmma_wait<0>();
    if (t == 0) {
      reuse_ok = true;
      for (int i = 0; i < 32; ++i) reuse_ok = reuse_ok && std::fabs(d1[i] - first[i] - 4.f) < 1e-3f;
    }
  });
  CHECK(poisoned_before);
  CHECK(older_only);
  CHECK(written_after);
  CHECK(reuse_ok);
}

TEST_CASE("sim wgmma: misuse is reported", "[sim][wgmma]") {
  auto mma = [](unsigned char* smem, float (&d)[32]) { tc::wgmma_ss<64, false, false>(d, desc_a(smem), desc_b(smem), false); };
  // A correctly fenced and committed product, left for the case to wait for (or not).
  auto filled_committed_mma = [&](unsigned char* smem, float (&d)[32]) {
    fill_ab(smem, 1);
    tc::wgmma_fence();
    mma(smem, d);
    tc::wgmma_commit();
  };
  // No wgmma.fence before the first mma_async, and none after a wait.
  CHECK_THAT(launch_error(128, [&](unsigned char* smem) {
               fill_ab(smem, 1);
               float d[32];
               mma(smem, d);
             }),
             Catch::Contains("without a wgmma.fence"));
  CHECK_THAT(launch_error(128, [&](unsigned char* smem) {
               float d[32];
               filled_committed_mma(smem, d);
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
               float d[32];
               filled_committed_mma(smem, d);
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
