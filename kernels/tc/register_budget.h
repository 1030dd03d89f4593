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
// `threads` threads under __launch_bounds__(threads, 1), when it raises some warpgroup to
// at least that count (as the sm_90a backward and the probe do): ptxas then gives every
// thread the largest count in steps of 8 that lets one block fit the register file, not
// just what the code before the first setmaxnreg needs, so that the warpgroups' counts can
// add up to the block's whole share. Measured (ptxas -v, nvcc 13.0, sm_90a): 168, 128 and 96
// at 384, 512 and 640 threads. ptxas starts lower, and this is not its count, when the
// highest raise is lower (160 at 384 threads for a raise to 160) and where the share
// passes kMaxThreadRegisters (blocks of 128 or 256 threads: 255, or the highest raise).
constexpr int entry_registers_per_thread(int threads) { return kSmRegisters / threads / kRegisterStep * kRegisterStep; }

}  // namespace kdtrain::tc
