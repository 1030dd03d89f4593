// setmaxnreg (sm_90a): a warpgroup hands registers back to the block's pool or takes more,
// so that a block whose warpgroups need different amounts can run (a few-register writer
// warpgroup beside register-hungry MMA warpgroups). Every thread of the warpgroup must
// execute the same instruction (.sync.aligned); the count is 24..256, a multiple of 8
// (PTX ISA, setmaxnreg), checked at compile time on both targets. The emulator keeps each
// warp's count and the block's pool (kernels/tc/sim/simt_registers.cpp; model in
// kernels/tc/sim/simt.h): it reports a warpgroup whose warps execute different setmaxnreg,
// a count moved the wrong way, and a raise that no lowering will ever pay for. What a
// thread starts with: kernels/tc/register_budget.h.
#pragma once
#include "kernels/tc/primitives.cuh"
#include "kernels/tc/register_budget.h"

namespace kdtrain::tc {

// setmaxnreg.inc (kRaise) or .dec .sync.aligned.u32 N: this warp's registers per thread
// become N.
template <int N, bool kRaise>
TC_DEVICE void set_max_registers() {
  static_assert(N >= 24 && N <= 256 && N % kRegisterStep == 0, "setmaxnreg count: 24..256, a multiple of 8");
#if defined(__CUDACC__)
  if constexpr (kRaise) asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
  else asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
#else
  sim::set_max_registers(N, kRaise);
#endif
}

}  // namespace kdtrain::tc
