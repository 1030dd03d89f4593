// One wgmma, self-contained: a shared-memory image copied in, descriptors relative to it,
// this thread's A registers and C, and D written out. The same body runs on an H100/H200
// (wgmma_probe_sm90a.cu) and in the host emulator, so test_cuda_wgmma.cpp compares the
// hardware with the emulator's reading of the PTX ISA on identical inputs.
#pragma once
#include <cstdint>
#include <type_traits>

#include "kernels/tc/wgmma.cuh"

namespace kdtrain::wgmmatest {

struct WgmmaProbeArgs {
  int n = 128;  // wgmma N: 32, 64 or 128
  bool a_regs = false, trans_a = false, trans_b = false, accumulate = false;
  const unsigned char* image = nullptr;  // shared-memory contents, image_bytes a multiple of 16
  int image_bytes = 0;
  uint64_t a_desc = 0, b_desc = 0;  // start addresses relative to the image
  const uint32_t* a = nullptr;      // [128 threads][4] when a_regs
  const float* c = nullptr;         // [128 threads][n/2]
  float* d = nullptr;               // [128 threads][n/2], written
};

template <int N, bool kRegs, bool kTransA, bool kTransB>
TC_DEVICE void wgmma_probe_body(const WgmmaProbeArgs& p, unsigned char* smem) {
  const int t = static_cast<int>(tc::thread_idx().x);
  for (int k = 16 * t; k < p.image_bytes; k += 16 * tc::kWarpgroupThreads) tc::copy16(smem + k, p.image + k);
  tc::fence_proxy_async();
  tc::sync_block();
  const uint64_t base = tc::shared_address(smem) >> 4;  // added to the start address fields
  float d[N / 2];
  for (int i = 0; i < N / 2; ++i) d[i] = p.c[t * (N / 2) + i];
  // A registers stay live until the wait that retires the product reading them.
  uint32_t a[4] = {0, 0, 0, 0};
  if constexpr (kRegs)
    for (int j = 0; j < 4; ++j) a[j] = p.a[4 * t + j];
  tc::wgmma_fence_operand(d);
  tc::wgmma_fence();
  if constexpr (kRegs) {
    tc::wgmma_rs<N, kTransB>(d, a, p.b_desc + base, p.accumulate);
  } else {
    tc::wgmma_ss<N, kTransA, kTransB>(d, p.a_desc + base, p.b_desc + base, p.accumulate);
  }
  tc::wgmma_commit();
  tc::wgmma_wait<0>();
  tc::wgmma_fence_operand(d);
  tc::wgmma_fence_operand(a);
  for (int i = 0; i < N / 2; ++i) p.d[t * (N / 2) + i] = d[i];
}

// f(N, kRegs, kTransA, kTransB) with std::integral_constant arguments for p's shape and flags.
template <typename F>
void wgmma_probe_dispatch(const WgmmaProbeArgs& p, F&& f) {
  auto flags = [&](auto n) {
    using B0 = std::false_type;
    using B1 = std::true_type;
    if (p.a_regs) {
      p.trans_b ? f(n, B1{}, B0{}, B1{}) : f(n, B1{}, B0{}, B0{});
      return;
    }
    if (p.trans_a)
      p.trans_b ? f(n, B0{}, B1{}, B1{}) : f(n, B0{}, B1{}, B0{});
    else
      p.trans_b ? f(n, B0{}, B0{}, B1{}) : f(n, B0{}, B0{}, B0{});
  };
  if (p.n == 32)
    flags(std::integral_constant<int, 32>{});
  else if (p.n == 64)
    flags(std::integral_constant<int, 64>{});
  else
    flags(std::integral_constant<int, 128>{});
}

}  // namespace kdtrain::wgmmatest
