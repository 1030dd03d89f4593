// The register budget that setmaxnreg (kernels/tc/registers.cuh) moves between warpgroups,
// for the kernels that use it, which run one block per SM: what a thread starts with. Shared
// by the kernels' compile-time checks and the host emulator (kernels/tc/sim/simt_registers.cpp),
// which has no ptxas report to read it from. Plain C++: no CUDA header needed.
#pragma once

namespace kdtrain::tc {

constexpr int kSmRegisters = 65536;       // 32-bit registers per SM (sm_90)
constexpr int kMaxThreadRegisters = 255;  // ptxas's limit per thread
constexpr int kRegisterStep = 8;          // setmaxnreg counts, and allocations, come in steps of 8

// Registers per thread at the entry of a kernel that uses setmaxnreg, launched with
// `threads` threads under __launch_bounds__(threads, 1): ptxas then gives every thread the
// largest count in steps of 8 that lets one block fit the register file, not just what the
// code before the first setmaxnreg needs, so that the warpgroups' later counts can add up to
// the block's whole share (384 threads: 168, as the probe's SASS shows,
// scripts/tests/test_setmaxnreg_sass.py); never above ptxas's limit.
constexpr int entry_registers_per_thread(int threads) {
  const int fit = kSmRegisters / threads / kRegisterStep * kRegisterStep;
  const int cap = kMaxThreadRegisters / kRegisterStep * kRegisterStep;
  return fit < cap ? fit : cap;
}

}  // namespace kdtrain::tc
