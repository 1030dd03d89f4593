// What Hopper forbids around wgmma, refused by the emulator (kernels/tc/sim/simt_wgmma.cpp,
// simt_async_proxy.cpp; PTX ISA 9.7.15 and the proxy rules of the memory model). Each
// case is a misuse that fails on its hazard, next to the correct form that passes:
// - operands (shared memory, A registers) are read at issue and must be unchanged until
//   the wait_group that retires them;
// - wgmma.fence / commit_group / wait_group are per warp: a warp runs past its own wait
//   while its siblings' parts are in flight, so it may not overwrite a shared operand
//   before a block barrier;
// - a plain st.shared read by wgmma needs a fence.proxy.async after it;
// - accumulator registers are not written while a product on them is in flight, and the
//   warps of a warpgroup execute the same wgmma sequence.
#include <catch2/catch.hpp>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/tc/wgmma.cuh"
#include "support/wgmma_test_util.h"

using namespace kdtrain;
using namespace kdtrain::wgmmatest;

namespace {

using T64 = tc::WgmmaTile<64, 64>;  // A and B, 64 x 64, K-major, 128B swizzle

// A and B of random bf16, written by every thread with plain stores; `fence`: followed by
// fence.proxy.async (the correct form) or not; then a block barrier.
void fill_ab(unsigned char* smem, bool fence = true) {
  static const std::vector<uint16_t> v = random_bf16(2 * 64 * 64, 17);
  auto* s = reinterpret_cast<uint16_t*>(smem);
  for (int e = static_cast<int>(tc::thread_idx().x); e < 2 * 64 * 64; e += static_cast<int>(tc::block_dim().x)) s[e] = v[e];
  if (fence) tc::fence_proxy_async();
  tc::sync_block();
}
uint64_t desc_a(unsigned char* smem) { return T64::desc_k_major(tc::shared_address(smem), 0, 0); }
uint64_t desc_b(unsigned char* smem) { return T64::desc_k_major(tc::shared_address(smem + T64::kBytes), 0, 0); }
uint16_t* b_tile(unsigned char* smem) { return reinterpret_cast<uint16_t*>(smem + T64::kBytes); }

void mma_ss(unsigned char* smem, float (&d)[32]) {
  tc::wgmma_fence();
  tc::wgmma_ss<64, false, false>(d, desc_a(smem), desc_b(smem), false);
  tc::wgmma_commit();
}

// The launch's error ("" when it ran through), one warpgroup.
template <typename Body>
std::string launch_error(Body body) {
  sim::LaunchConfig c;
  c.block = {128, 1, 1};
  c.shared_bytes = 2 * T64::kBytes;
  try {
    sim::launch(c, body);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

int warp_id() { return static_cast<int>(tc::thread_idx().x) / 32; }

}  // namespace

TEST_CASE("sim wgmma hazard: a shared operand written before the wait that retires it", "[sim][wgmma][hazard]") {
  auto body = [](bool write_early) {
    return [write_early](unsigned char* smem) {
      fill_ab(smem);
      float d[32];
      mma_ss(smem, d);
      tc::sync_block();  // every warp has issued
      if (!write_early) {
        tc::wgmma_wait<0>();
        tc::sync_block();  // every warp has waited
      }
      // A refill of B, fenced and published as a correct refill is: only its place
      // relative to the waits differs.
      for (int e = static_cast<int>(tc::thread_idx().x); e < 64 * 64; e += 128) b_tile(smem)[e] = 0;
      tc::fence_proxy_async();
      tc::sync_block();
      if (write_early) tc::wgmma_wait<0>();
    };
  };
  CHECK(launch_error(body(false)).empty());
  CHECK_THAT(launch_error(body(true)), Catch::Contains("B operand in shared memory") &&
                                           Catch::Contains("changed between the mma_async and the wgmma.wait_group"));
}

TEST_CASE("sim wgmma hazard: A registers changed before the wait that retires them", "[sim][wgmma][hazard]") {
  auto body = [](bool change_early) {
    return [change_early](unsigned char* smem) {
      fill_ab(smem);
      uint32_t a[4] = {0x3f803f80u, 0x3f803f80u, 0x3f803f80u, 0x3f803f80u};  // bf16 1.0 pairs
      float d[32];
      tc::wgmma_fence();
      tc::wgmma_rs<64, false>(d, a, desc_b(smem), false);
      tc::wgmma_commit();
      if (change_early) a[1] = 0;  // the register file reused while the product reads it
      tc::wgmma_wait<0>();
      a[1] = 0;  // after the wait: free
    };
  };
  CHECK(launch_error(body(false)).empty());
  CHECK_THAT(launch_error(body(true)), Catch::Contains("A registers changed between the mma_async"));
}

TEST_CASE("sim wgmma: each warp waits for its own part; a warp runs past its wait while siblings are in flight",
          "[sim][wgmma][hazard]") {
  // Forward schedule: warp 0 runs first, as far as its own collectives allow.
  bool warp0_waited_before_warp1_issued = false, warp0_results = false;
  bool warp0_done = false;
  CHECK(launch_error([&](unsigned char* smem) {
          fill_ab(smem);
          float d[32];
          if (warp_id() == 1 && tc::thread_idx().x % 32 == 0) warp0_waited_before_warp1_issued = warp0_done;
          mma_ss(smem, d);
          tc::wgmma_wait<0>();
          if (warp_id() == 0 && tc::thread_idx().x % 32 == 0) {
            warp0_done = true;
            warp0_results = !std::isnan(d[0]) && !std::isnan(d[31]);
          }
        }).empty());
  CHECK(warp0_waited_before_warp1_issued);  // a warpgroup rendezvous would forbid this
  CHECK(warp0_results);
  // So warp 0 overwriting B after its own wait, with no block barrier before its
  // siblings' waits, corrupts their products: refused. With the barrier it is fine.
  auto refill_after_own_wait = [](bool barrier) {
    return [barrier](unsigned char* smem) {
      fill_ab(smem);
      float d[32];
      mma_ss(smem, d);
      tc::wgmma_wait<0>();
      if (barrier) tc::sync_block();
      if (warp_id() == 0)
        for (int e = static_cast<int>(tc::thread_idx().x); e < 64 * 64; e += 32) b_tile(smem)[e] = 0;
    };
  };
  CHECK(launch_error(refill_after_own_wait(true)).empty());
  CHECK_THAT(launch_error(refill_after_own_wait(false)), Catch::Contains("B operand in shared memory") &&
                                                             Catch::Contains("changed"));
}

TEST_CASE("sim wgmma hazard: plain shared-memory stores read by wgmma without fence.proxy.async",
          "[sim][wgmma][hazard]") {
  auto run = [](bool fence) {
    return launch_error([fence](unsigned char* smem) {
      fill_ab(smem, fence);
      float d[32];
      mma_ss(smem, d);
      tc::wgmma_wait<0>();
    });
  };
  CHECK(run(true).empty());
  CHECK_THAT(run(false), Catch::Contains("written by a plain store (st.shared) with no fence.proxy.async after it"));
  // A fence before the stores is no fence for them.
  CHECK_THAT(launch_error([](unsigned char* smem) {
               fill_ab(smem);
               b_tile(smem)[tc::thread_idx().x] = 0;
               tc::sync_block();
               float d[32];
               mma_ss(smem, d);
               tc::wgmma_wait<0>();
             }),
             Catch::Contains("plain store"));
}

TEST_CASE("sim wgmma hazard: accumulators written in flight, warps at different wgmma sequences",
          "[sim][wgmma][hazard]") {
  CHECK_THAT(launch_error([](unsigned char* smem) {
               fill_ab(smem);
               float d[32];
               mma_ss(smem, d);
               d[3] = 0.f;
               tc::wgmma_wait<0>();
             }),
             Catch::Contains("accumulator registers written while an mma_async on them was in flight"));
  CHECK_THAT(launch_error([](unsigned char*) {
               if (warp_id() == 2) tc::wgmma_fence();
             }),
             Catch::Contains("warps at different wgmma instructions"));
}
