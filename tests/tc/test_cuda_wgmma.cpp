// wgmma on the hardware against the emulator's reading of the PTX ISA, on identical
// inputs (tests/tc/sm90a/wgmma_probe_body.cuh run by wgmma_probe_sm90a.cu and by the
// emulator): every swizzle mode, K-major and MN-major A and B, A from registers, N 32
// (A from registers with B K-major, as the D 64 backward's S^T and dP^T; from shared
// memory, also with B starting 64 bytes into its 128-byte swizzled rows, as the D 64
// backward's dQ reads K), 64 and 128. Both
// must lie within the fp32 bound of a 17-term sum of the double product (|err| <=
// 17 2^-24 sum |terms|; the hardware may add in another order), so a wrong fragment
// position, descriptor field or swizzle on either side shows as an element far off.
// Skips, visibly, without a device of compute capability 9.0 or a build with
// KDTRAIN_CUDA_SM90A.
#include <catch2/catch.hpp>

#if !defined(KDTRAIN_HAVE_SM90A)

TEST_CASE("cuda wgmma matches the emulator", "[cuda][wgmma][sm90a]") {
  WARN("SKIPPED: built without the sm_90a target (CUDA, KDTRAIN_CUDA_SM90A)");
}

#else

#include <cuda_runtime.h>

#include "backend/cuda/cuda_probe.h"
#include "tc/sm90a/wgmma_probe.h"
#include "support/wgmma_test_util.h"

using namespace kdtrain;
using namespace kdtrain::wgmmatest;

namespace {

template <int N, bool kTransA, bool kTransB>
void compare(const Operand* a, const Operand& b, bool accumulate, uint32_t seed) {
  WgmmaCase w(N, a, b, kTransA, kTransB, accumulate, seed);
  const std::vector<float> sim_d = emulate(w);
  std::vector<float> hw_d(sim_d.size(), NAN);
  w.args.d = hw_d.data();
  run_wgmma_probe_on_device(w.args);
  INFO("N " << N << (a == nullptr ? " A registers" : kTransA ? " A MN-major" : " A K-major")
            << (kTransB ? ", B MN-major " : ", B K-major ") << name(b.swizzle));
  CHECK(count_off_reference(w, sim_d) == 0);
  CHECK(count_off_reference(w, hw_d) == 0);
}

}  // namespace

TEST_CASE("cuda wgmma matches the emulator", "[cuda][wgmma][sm90a]") {
  int device = 0, major = 0, minor = 0;
  if (!cuda::device_present()) {
    WARN("SKIPPED: no CUDA device");
    return;
  }
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  if (major != 9 || minor != 0) {
    WARN("SKIPPED: wgmma (sm_90a) needs compute capability 9.0, this device has " << major << "." << minor);
    return;
  }
  uint32_t seed = 500;
  for (WgmmaSwizzle s : kSwizzles) {
    const DenseOperands o(s, 128);
    compare<128, false, false>(&o.ak, o.bk, true, seed++);
    compare<128, false, true>(&o.ak, o.bmn, false, seed++);
    compare<128, true, false>(&o.amn, o.bk, true, seed++);
    compare<128, true, true>(&o.amn, o.bmn, true, seed++);
    compare<128, false, false>(nullptr, o.bk, true, seed++);
    compare<128, false, true>(nullptr, o.bmn, true, seed++);
    compare<64, false, true>(&o.ak, dense(s, WgmmaMajor::mn, 64), true, seed++);
    compare<64, false, false>(nullptr, dense(s, WgmmaMajor::k, 64), false, seed++);
    compare<32, false, false>(&o.ak, dense(s, WgmmaMajor::k, 32), true, seed++);
    compare<32, true, true>(&o.amn, dense(s, WgmmaMajor::mn, 32), false, seed++);
    compare<32, false, false>(nullptr, dense(s, WgmmaMajor::k, 32), true, seed++);
  }
  // The D 64 backward's dQ: B = K MN-major from the middle (byte 64) of 128B-swizzled rows.
  Operand b = dense(WgmmaSwizzle::b128, WgmmaMajor::mn, 64);
  b.mn_first = 32;
  const DenseOperands o(WgmmaSwizzle::b128, 64);
  compare<32, true, true>(&o.amn, b, true, seed++);
}

#endif
