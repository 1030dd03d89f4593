// The setmaxnreg probe (kernels/tc/registers.cuh), one body for the GPU
// (registers_probe_sm90a.cu) and the host emulator (tests/tc/test_tc_registers.cpp).
//
// No instruction reads a warp's register count back, so the probe checks what a run can
// show, with the sm_90a backward's split (flash_backward_dq_warp.cuh): three warpgroups
// launched at 168 registers per thread (kEntry, kernels/tc/register_budget.h); warpgroup 0
// lowers to 24, warpgroups 1 and 2 raise to 240.
//   - The raises need 2 x 128 x (240 - 168) = 18,432 registers, exactly what the lowering
//     frees (128 x (168 - 24)). Per the PTX ISA, setmaxnreg.inc waits until the block's
//     pool holds them, so a .dec that freed nothing leaves the kernel waiting: the host
//     reports it past a deadline instead of hanging.
//   - ptxas allocates the code after a setmaxnreg up to the new count: after the raise the
//     kHeld live words sit in registers above the entry's 168 (nvcc 13.0: up to R237 there,
//     at most R21 after the lowering, no local memory; docs/flash_attention_backward.md), so
//     registers not granted, or not kept, show as wrong words.
//   - Words loaded before the setmaxnreg and used after it check that it keeps them.
// The emulator has no register file, so there no word can be lost to a missing register:
// it checks the split itself instead (each warp's count, the pool: a raise the lowering
// did not pay for is reported as a deadlock), and the same body checks the words the
// probe claims, so the GPU's can be compared with them bit for bit. Integer arithmetic
// only, exact on both.
#pragma once
#include <cstdint>

#include "kernels/tc/primitives.cuh"
#include "kernels/tc/registers.cuh"

namespace kdtrain::regprobe {

constexpr int kThreads = 384, kLowered = 24, kRaised = 240;
constexpr int kEntry = tc::entry_registers_per_thread(kThreads);
constexpr int kHeld = 192;                    // words per thread of the raised warpgroups
constexpr int kAcross = 32, kLowAcross = 8;   // words held across the raise / the lowering
constexpr int kRounds = 4;
constexpr int kWords = kThreads * kHeld;      // in and out
static_assert(kEntry == 168 && 2 * (kRaised - kEntry) == kEntry - kLowered,
              "one warpgroup lowers, two raise, by exactly the registers it frees");

TC_HOST_DEVICE uint32_t rotl5(uint32_t x) { return (x << 5) | (x >> 27); }

// Rounds over the thread's kHeld words, each word mixing in the word 7 ahead (in place,
// in index order): every word stays live until the last round.
TC_DEVICE void raised_warpgroup(const uint32_t* in, uint32_t* out) {
  uint32_t v[kHeld];
  TC_UNROLL
  for (int i = 0; i < kAcross; ++i) v[i] = in[i];
  tc::set_max_registers<kRaised, true>();
  TC_UNROLL
  for (int i = kAcross; i < kHeld; ++i) v[i] = in[i];
  TC_UNROLL
  for (int r = 0; r < kRounds; ++r)
    TC_UNROLL
    for (int i = 0; i < kHeld; ++i) v[i] = rotl5(v[i] ^ v[(i + 7) % kHeld]) * 0x9e3779b9u + static_cast<uint32_t>(r);
  TC_UNROLL
  for (int i = 0; i < kHeld; ++i) out[i] = v[i];
}

// Few registers: out[i] = in[i] + held[i % kLowAcross] + a running sum of the words before i.
TC_DEVICE void lowered_warpgroup(const uint32_t* in, uint32_t* out) {
  uint32_t held[kLowAcross];
  TC_UNROLL
  for (int i = 0; i < kLowAcross; ++i) held[i] = in[kHeld - 1 - i] * 3u;
  tc::set_max_registers<kLowered, false>();
  uint32_t sum = 0;
  for (int i0 = 0; i0 < kHeld; i0 += kLowAcross)
    TC_UNROLL
    for (int j = 0; j < kLowAcross; ++j) {  // unrolled: held stays in registers
      out[i0 + j] = in[i0 + j] + held[j] + sum;
      sum = sum * 31u + in[i0 + j];
    }
}

// One block of kThreads threads; thread t reads and writes words [t kHeld, (t + 1) kHeld).
TC_DEVICE void registers_probe_body(const uint32_t* in, uint32_t* out) {
  const int t = static_cast<int>(tc::thread_idx().x);
  if (t / 128 == 0) lowered_warpgroup(in + t * kHeld, out + t * kHeld);
  else raised_warpgroup(in + t * kHeld, out + t * kHeld);
}

}  // namespace kdtrain::regprobe
