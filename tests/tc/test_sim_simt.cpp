// The host SIMT emulator (kernels/tc/sim/) and the tensor-core primitives it backs
// (kernels/tc/primitives.cuh): fragment layouts against a plain matmul and against the
// PTX ISA's stated positions, ldmatrix (+.trans) against direct indexing, the swizzle
// (bijective, bank-conflict free per 8-lane phase), cp.async deferral, barrier
// schedules exposing a missing sync_block, error reporting, bf16 rounding.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <stdexcept>
#include <vector>

#include "kernels/tc/primitives.cuh"

#ifdef KDTRAIN_HAVE_CUDA
#include <cuda_bf16.h>
#endif

using namespace kdtrain;

namespace {

sim::LaunchConfig one_block(unsigned threads, size_t smem, sim::Schedule s = sim::Schedule::forward) {
  sim::LaunchConfig c;
  c.block = {threads, 1, 1};
  c.grid = {1, 1, 1};
  c.shared_bytes = smem;
  c.schedule = s;
  return c;
}

uint16_t bf(float x) { return sim::bf16_round(x); }

// Max number of distinct 4-byte words any bank serves among the accesses of one
// phase (one phase = the lanes the hardware serves together: 8 lanes for 16-byte
// accesses, 32 for 4-byte ones). 1 = conflict-free.
int bank_ways(const std::vector<size_t>& byte_addrs, int bytes_per_access) {
  std::vector<std::set<size_t>> words(32);
  for (size_t a : byte_addrs)
    for (int w = 0; w < bytes_per_access / 4; ++w) words[((a / 4) + w) % 32].insert(a / 4 + w);
  size_t ways = 0;
  for (const auto& s : words) ways = std::max(ways, s.size());
  return static_cast<int>(ways);
}

}  // namespace

TEST_CASE("sim ldmatrix returns the PTX ISA positions, with and without .trans", "[sim]") {
  // Four 8x8 matrices of distinct values; each matrix's rows at scattered 16-byte slots.
  constexpr int kSlots = 64;
  std::vector<uint16_t> value(4 * 64);
  for (int k = 0; k < 4 * 64; ++k) value[k] = bf(static_cast<float>(k + 1));
  auto slot_of = [](int m, int r) { return (m * 8 + r) * 37 % kSlots; };  // a permutation
  for (int num : {1, 2, 4}) {
    for (bool trans : {false, true}) {
      std::vector<uint32_t> got(32 * 4, 0);
      sim::launch(one_block(32, kSlots * 16), [&](unsigned char* smem) {
        const int l = tc::lane_id();
        auto* rows = reinterpret_cast<uint16_t*>(smem);
        if (l == 0)
          for (int m = 0; m < 4; ++m)
            for (int r = 0; r < 8; ++r)
              for (int c = 0; c < 8; ++c) rows[slot_of(m, r) * 8 + c] = value[m * 64 + r * 8 + c];
        tc::sync_warp();
        const void* addr = rows + slot_of(l / 8 % num, l % 8) * 8;
        uint32_t r4[4] = {};
        if (num == 1) {
          uint32_t r[1];
          trans ? tc::ldmatrix<1, true>(r, addr) : tc::ldmatrix<1>(r, addr);
          r4[0] = r[0];
        } else if (num == 2) {
          uint32_t r[2];
          trans ? tc::ldmatrix<2, true>(r, addr) : tc::ldmatrix<2>(r, addr);
          std::memcpy(r4, r, sizeof r);
        } else {
          trans ? tc::ldmatrix<4, true>(r4, addr) : tc::ldmatrix<4>(r4, addr);
        }
        for (int m = 0; m < 4; ++m) got[l * 4 + m] = r4[m];
      });
      INFO("x" << num << (trans ? ".trans" : ""));
      for (int l = 0; l < 32; ++l)
        for (int m = 0; m < num; ++m) {
          // ISA: lane l holds (row l/4, cols 2(l%4)..+1); .trans: (rows 2(l%4)..+1, col l/4).
          const int r0 = trans ? 2 * (l % 4) : l / 4, c0 = trans ? l / 4 : 2 * (l % 4);
          const int r1 = trans ? r0 + 1 : r0, c1 = trans ? c0 : c0 + 1;
          const uint32_t want = value[m * 64 + r0 * 8 + c0] | (uint32_t(value[m * 64 + r1 * 8 + c1]) << 16);
          CHECK(got[l * 4 + m] == want);
        }
    }
  }
}

TEST_CASE("sim mma fragments follow the PTX ISA and match a plain matmul", "[sim]") {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  // A 16x16 row-major, B 16x8 (k x n) stored both as [k][n] and as B^T [n][k], C 16x8.
  std::vector<uint16_t> A(256), Bkn(128), Bnk(128);
  std::vector<float> C(128);
  for (auto& x : A) x = bf(u(rng));
  for (int k = 0; k < 16; ++k)
    for (int n = 0; n < 8; ++n) Bnk[n * 16 + k] = Bkn[k * 8 + n] = bf(u(rng));
  for (auto& x : C) x = u(rng);
  std::vector<float> D1(128, NAN), D2(128, NAN);
  std::vector<uint32_t> afrag(32 * 4);
  sim::launch(one_block(32, 1024), [&](unsigned char* smem) {
    const int l = tc::lane_id(), g = l / 4, t = l % 4;
    auto* sA = reinterpret_cast<uint16_t*>(smem);        // 16 rows x 16
    auto* sBkn = sA + 256;                                // 16 rows x 8
    auto* sBnk = sBkn + 128;                              // 8 rows x 16
    for (int k = l; k < 256; k += 32) sA[k] = A[k];
    for (int k = l; k < 128; k += 32) {
      sBkn[k] = Bkn[k];
      sBnk[k] = Bnk[k];
    }
    tc::sync_warp();
    uint32_t a[4], b1[2], b2[2];
    tc::ldmatrix<4>(a, sA + (l % 16) * 16 + (l / 16) * 8);           // rows l%16, k half l/16
    tc::ldmatrix<2>(b1, sBnk + (l % 8) * 16 + ((l / 8) % 2) * 8);    // B^T rows n, k halves
    tc::ldmatrix<2, true>(b2, sBkn + (l % 16) * 8);                  // B rows k, transposed
    for (int i = 0; i < 4; ++i) afrag[l * 4 + i] = a[i];
    const float c[4] = {C[g * 8 + 2 * t], C[g * 8 + 2 * t + 1], C[(g + 8) * 8 + 2 * t], C[(g + 8) * 8 + 2 * t + 1]};
    float d1[4], d2[4];
    tc::mma_bf16_16816(d1, a, b1, c);
    tc::mma_bf16_16816(d2, a, b2, c);
    const int pos[4] = {g * 8 + 2 * t, g * 8 + 2 * t + 1, (g + 8) * 8 + 2 * t, (g + 8) * 8 + 2 * t + 1};
    for (int i = 0; i < 4; ++i) {
      D1[pos[i]] = d1[i];
      D2[pos[i]] = d2[i];
    }
  });
  // The ISA's A positions for lane 5 (groupID 1, threadID_in_group 1), literally.
  auto a_pair = [&](int row, int col) { return A[row * 16 + col] | (uint32_t(A[row * 16 + col + 1]) << 16); };
  CHECK(afrag[5 * 4 + 0] == a_pair(1, 2));
  CHECK(afrag[5 * 4 + 1] == a_pair(9, 2));
  CHECK(afrag[5 * 4 + 2] == a_pair(1, 10));
  CHECK(afrag[5 * 4 + 3] == a_pair(9, 10));
  for (int i = 0; i < 16; ++i)
    for (int n = 0; n < 8; ++n) {
      double ref = C[i * 8 + n], mag = std::fabs(ref);
      for (int k = 0; k < 16; ++k) {
        const double p = double(sim::bf16_value(A[i * 16 + k])) * sim::bf16_value(Bkn[k * 8 + n]);
        ref += p;
        mag += std::fabs(p);
      }
      // fp32 sum of 17 terms: |err| <= 17 * 2^-24 * sum |terms|.
      INFO("D[" << i << "][" << n << "]");
      CHECK(std::fabs(D1[i * 8 + n] - ref) <= 17 * std::ldexp(mag, -24));
      CHECK(std::memcmp(&D1[i * 8 + n], &D2[i * 8 + n], 4) == 0);  // both B paths agree bit for bit
    }
}

TEST_CASE("sim swizzle is a bijection and bank-conflict free", "[sim]") {
  auto check = [](auto swz, int row_elems) {
    constexpr int kRows = 128;
    std::set<int> seen;
    for (int r = 0; r < kRows; ++r)
      for (int c = 0; c < row_elems; ++c) seen.insert(decltype(swz)::offset(r, c));
    CHECK(seen.size() == size_t(kRows * row_elems));
    CHECK(*seen.begin() == 0);
    CHECK(*seen.rbegin() == kRows * row_elems - 1);
    for (int r = 0; r < kRows; ++r)
      for (int c = 0; c < row_elems; c += 8) CHECK(decltype(swz)::offset(r, c) % 8 == 0);  // chunks whole
    // ldmatrix phase: 8 rows r0..r0+7 (r0 % 8 == 0) at one logical chunk.
    int worst = 0;
    for (int r0 = 0; r0 < kRows; r0 += 8)
      for (int c = 0; c < row_elems; c += 8) {
        std::vector<size_t> addrs;
        for (int r = r0; r < r0 + 8; ++r) addrs.push_back(2 * size_t(decltype(swz)::offset(r, c)));
        worst = std::max(worst, bank_ways(addrs, 16));
      }
    CHECK(worst == 1);
    // cp.async / 16-byte stores: 8 consecutive lanes write 8 consecutive chunks of a row.
    worst = 0;
    for (int r = 0; r < kRows; ++r)
      for (int c0 = 0; c0 < row_elems; c0 += 64) {
        std::vector<size_t> addrs;
        for (int k = 0; k < 8; ++k) addrs.push_back(2 * size_t(decltype(swz)::offset(r, c0 + 8 * k)));
        worst = std::max(worst, bank_ways(addrs, 16));
      }
    CHECK(worst == 1);
    // 4-byte stores of an mma C fragment (lane g*4+t -> row g, cols 8n + 2t), one warp phase.
    worst = 0;
    for (int r0 = 0; r0 < kRows; r0 += 8)
      for (int n = 0; n < row_elems / 8; ++n) {
        std::vector<size_t> addrs;
        for (int l = 0; l < 32; ++l)
          addrs.push_back(2 * size_t(decltype(swz)::offset(r0 + l / 4, 8 * n + 2 * (l % 4))));
        worst = std::max(worst, bank_ways(addrs, 4));
      }
    CHECK(worst == 1);
  };
  check(tc::Swizzle<64>{}, 64);
  check(tc::Swizzle<128>{}, 128);
  // Unswizzled 128-byte rows would conflict 8 ways: the counter can fail.
  std::vector<size_t> plain;
  for (int r = 0; r < 8; ++r) plain.push_back(size_t(r) * 128);
  CHECK(bank_ways(plain, 16) == 8);
}

TEST_CASE("sim cp.async lands at the wait that retires its group", "[sim]") {
  alignas(16) static uint32_t src[32 * 8];
  for (int k = 0; k < 32 * 8; ++k) src[k] = 1000 + k;
  std::vector<uint32_t> before(32), after1(32), after0(32), zero(32);
  const auto stats = sim::launch(one_block(32, 32 * 48), [&](unsigned char* smem) {
    const int l = tc::lane_id();
    auto* a = reinterpret_cast<uint32_t*>(smem) + l * 4;
    auto* b = reinterpret_cast<uint32_t*>(smem + 32 * 16) + l * 4;
    auto* z = reinterpret_cast<uint32_t*>(smem + 64 * 16) + l * 4;
    tc::cp_async_16(a, src + l * 4);
    tc::cp_async_commit();
    tc::cp_async_16(b, src + 128 + l * 4);
    tc::cp_async_16(z, src, /*valid=*/false);
    tc::cp_async_commit();
    before[l] = a[0];
    tc::cp_async_wait<1>();
    after1[l] = a[0] == 1000u + l * 4 && b[0] == sim::kSharedPoison;
    tc::cp_async_wait<0>();
    after0[l] = b[3];
    zero[l] = z[0] | z[1] | z[2] | z[3];
  });
  for (int l = 0; l < 32; ++l) {
    CHECK(before[l] == sim::kSharedPoison);  // nothing lands before its wait
    CHECK(after1[l] == 1);
    CHECK(after0[l] == 1000u + 128 + l * 4 + 3);
    CHECK(zero[l] == 0);
  }
  CHECK(stats.cp_async == 96);
  CHECK(stats.cp_async_zero_fill == 32);
  CHECK(stats.cp_async_dropped == 0);
  // Never waited for: dropped, counted.
  const auto s2 = sim::launch(one_block(32, 512), [&](unsigned char* smem) {
    tc::cp_async_16(smem + tc::lane_id() * 16, src);
    tc::cp_async_commit();
  });
  CHECK(s2.cp_async_dropped == 32);
  // Landing at issue (the other legal timing): visible before the wait.
  auto eager = one_block(32, 512);
  eager.cp_async_at_issue = true;
  sim::launch(eager, [&](unsigned char* smem) {
    const int l = tc::lane_id();
    tc::cp_async_16(smem + l * 16, src + l * 4);
    before[l] = reinterpret_cast<uint32_t*>(smem)[l * 4];
    tc::cp_async_commit();
    tc::cp_async_wait<0>();
  });
  for (int l = 0; l < 32; ++l) CHECK(before[l] == 1000u + l * 4);
}

TEST_CASE("sim schedules expose a missing sync_block", "[sim]") {
  constexpr unsigned kN = 64;
  auto run = [](bool with_barrier, sim::Schedule s, uint64_t seed) {
    std::vector<uint32_t> out(kN);
    auto cfg = one_block(kN, kN * 4, s);
    cfg.seed = seed;
    sim::launch(cfg, [&](unsigned char* smem) {
      auto* x = reinterpret_cast<uint32_t*>(smem);
      const unsigned t = tc::thread_idx().x;
      x[t] = t + 1;
      if (with_barrier) tc::sync_block();
      out[t] = x[(t + 1) % kN];
    });
    return out;
  };
  const auto good = run(true, sim::Schedule::forward, 1);
  for (unsigned t = 0; t < kN; ++t) CHECK(good[t] == (t + 1) % kN + 1);
  CHECK(run(true, sim::Schedule::reverse, 1) == good);
  CHECK(run(true, sim::Schedule::shuffled, 5) == good);
  CHECK(run(true, sim::Schedule::shuffled, 6) == good);
  CHECK(run(false, sim::Schedule::forward, 1) != run(false, sim::Schedule::reverse, 1));
  CHECK(run(false, sim::Schedule::shuffled, 3) == run(false, sim::Schedule::shuffled, 3));  // reproducible
}

TEST_CASE("sim reports divergence, bad addresses and exceptions", "[sim]") {
  CHECK_THROWS_WITH(sim::launch(one_block(64, 0),
                                [](unsigned char*) {
                                  if (tc::thread_idx().x < 16) tc::sync_block();
                                }),
                    Catch::Contains("divergent __syncthreads"));
  CHECK_THROWS_WITH(sim::launch(one_block(32, 0),
                                [](unsigned char*) {
                                  if (tc::lane_id() < 16)
                                    tc::shfl_xor(1u, 1);
                                  else
                                    tc::sync_warp();
                                }),
                    Catch::Contains("different collectives"));
  CHECK_THROWS_WITH(sim::launch(one_block(32, 256),
                                [](unsigned char* smem) {
                                  uint32_t r[1];
                                  tc::ldmatrix<1>(r, smem + 256);
                                }),
                    Catch::Contains("outside the block's shared memory"));
  CHECK_THROWS_WITH(sim::launch(one_block(32, 64),
                                [](unsigned char* smem) {
                                  static uint32_t g[8];
                                  tc::cp_async_16(smem + 8, g);
                                }),
                    Catch::Contains("aligned"));
  CHECK_THROWS_WITH(sim::launch(one_block(32, 0),
                                [](unsigned char*) {
                                  if (tc::lane_id() == 3) throw std::runtime_error("boom");
                                }),
                    Catch::Contains("boom"));
  // The emulator is usable again after a failure.
  CHECK(sim::launch(one_block(32, 0), [](unsigned char*) { tc::sync_warp(); }).warp_collectives == 1);
  CHECK_THROWS(tc::sync_block());  // outside a launch
}

TEST_CASE("sim vector copies move N elements and refuse a misaligned address", "[sim]") {
  alignas(16) uint16_t h[16];
  alignas(16) float f[8];
  for (int i = 0; i < 16; ++i) h[i] = static_cast<uint16_t>(100 + i);
  for (int i = 0; i < 8; ++i) f[i] = 0.5f * static_cast<float>(i);
  sim::launch(one_block(32, 0), [&](unsigned char*) {
    if (tc::lane_id() != 0) return;
    alignas(16) uint16_t h4[4];
    tc::copy_vec<4>(h4, h + 4);  // 8 bytes at an 8-byte boundary
    alignas(16) float f4[4];
    tc::copy_vec<4>(f4, f + 4);  // 16 bytes at a 16-byte boundary
    for (int i = 0; i < 4; ++i) f4[i] += static_cast<float>(h4[i]);
    tc::copy_vec<4>(f, f4);
  });
  for (int i = 0; i < 4; ++i) CHECK(f[i] == 0.5f * static_cast<float>(i + 4) + static_cast<float>(104 + i));
  CHECK_THROWS_WITH(sim::launch(one_block(32, 0),
                                [&](unsigned char*) {
                                  alignas(4) uint16_t h2[2];
                                  tc::copy_vec<2>(h2, h + 1);  // 4 bytes at a 2-byte boundary
                                }),
                    Catch::Contains("copy_vec source") && Catch::Contains("not 4-byte aligned"));
  CHECK_THROWS_WITH(sim::launch(one_block(32, 0),
                                [&](unsigned char*) {
                                  alignas(8) const float v[2] = {1.f, 2.f};
                                  tc::copy_vec<2>(f + 1, v);  // 8 bytes at a 4-byte boundary
                                }),
                    Catch::Contains("copy_vec destination") && Catch::Contains("not 8-byte aligned"));
  // The global-memory store: the same copy, the same refusal.
  sim::launch(one_block(32, 0), [&](unsigned char*) {
    alignas(16) const float v[4] = {7.f, 8.f, 9.f, 10.f};
    if (tc::lane_id() == 0) tc::store_global_vec<4>(f + 4, v);
  });
  for (int i = 0; i < 4; ++i) CHECK(f[4 + i] == static_cast<float>(7 + i));
  CHECK_THROWS_WITH(sim::launch(one_block(32, 0),
                                [&](unsigned char*) {
                                  alignas(16) const float v[4] = {1.f, 2.f, 3.f, 4.f};
                                  tc::store_global_vec<4>(f + 2, v);  // 16 bytes at an 8-byte boundary
                                }),
                    Catch::Contains("store_global_vec destination") && Catch::Contains("not 16-byte aligned"));
}

TEST_CASE("sim shuffles, reductions, indices", "[sim]") {
  std::vector<float> qs(32), qm(32), ws(32);
  std::vector<uint32_t> idx(32), tr(4 * 32);
  sim::launch(one_block(32, 0, sim::Schedule::reverse), [&](unsigned char*) {
    const int l = tc::lane_id();
    uint32_t x[4];
    for (int k = 0; k < 4; ++k) x[k] = static_cast<uint32_t>(4 * l + k);
    tc::quad_transpose(x);
    for (int k = 0; k < 4; ++k) tr[4 * l + k] = x[k];
    qs[l] = tc::quad_sum(static_cast<float>(l));
    qm[l] = tc::quad_max(static_cast<float>((l * 7) % 32));
    ws[l] = tc::warp_sum(1.f);
    idx[l] = tc::shfl_idx(static_cast<uint32_t>(100 + l), 31 - l);
  });
  for (int l = 0; l < 32; ++l) {
    const int q = l / 4 * 4;
    CHECK(qs[l] == float(4 * q + 6));
    float mx = 0;
    for (int k = q; k < q + 4; ++k) mx = std::max(mx, float((k * 7) % 32));
    CHECK(qm[l] == mx);
    CHECK(ws[l] == 32.f);
    CHECK(idx[l] == uint32_t(100 + 31 - l));
    for (int k = 0; k < 4; ++k) CHECK(tr[4 * l + k] == uint32_t(4 * (q + k) + l % 4));  // lane q+k's word l%4
  }
  // Grid and block indices: every (block, thread) visited once.
  sim::LaunchConfig cfg = one_block(48, 0);
  cfg.grid = {2, 3, 1};
  std::vector<int> hits(2 * 3 * 48, 0);
  const auto st = sim::launch(cfg, [&](unsigned char*) {
    const auto b = tc::block_idx(), t = tc::thread_idx();
    CHECK(tc::block_dim().x == 48);
    CHECK(tc::grid_dim().y == 3);
    ++hits[(b.y * 2 + b.x) * 48 + t.x];
  });
  CHECK(st.blocks == 6);
  for (int h : hits) CHECK(h == 1);
}

TEST_CASE("bf16 rounding is round to nearest even", "[sim]") {
  auto bits = [](uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return sim::bf16_round(f);
  };
  CHECK(bits(0x3f808000u) == 0x3f80);  // tie, even below
  CHECK(bits(0x3f818000u) == 0x3f82);  // tie, odd below: up
  CHECK(bits(0x3f808001u) == 0x3f81);  // above the tie
  CHECK(bits(0xbf808001u) == 0xbf81);  // sign kept
  CHECK(bits(0x7f800000u) == 0x7f80);  // inf
  CHECK(bits(0x7f7fffffu) == 0x7f80);  // FLT_MAX overflows to inf
  CHECK(bits(0x00008000u) == 0x0000);  // subnormal tie to even
  CHECK(bits(0x00018000u) == 0x0002);
  CHECK(bits(0x7fc00001u) == 0x7fff);  // NaN canonical
  CHECK(bits(0xffc00000u) == 0x7fff);
  CHECK(tc::pack_bf16x2(1.f, -2.f) == (0x3f80u | (0xc000u << 16)));  // lo in the low half
  CHECK(tc::bf16x2_hi(tc::pack_bf16x2(1.f, -2.f)) == -2.f);
#ifdef KDTRAIN_HAVE_CUDA
  // Bit-identical to CUDA's __float2bfloat16_rn (its host implementation).
  std::mt19937 rng(11);
  int mismatches = 0;
  for (int k = 0; k < (1 << 20); ++k) {
    const uint32_t u = k < 4096 ? (k * 0x00100001u) ^ (k << 20) : rng();
    float f;
    std::memcpy(&f, &u, 4);
    const __nv_bfloat16 h = __float2bfloat16_rn(f);
    uint16_t ref;
    std::memcpy(&ref, &h, 2);
    mismatches += ref != sim::bf16_round(f);
  }
  CHECK(mismatches == 0);
#endif
}
