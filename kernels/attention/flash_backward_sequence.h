// The launch sequence of the fused attention backward, written once for both the CUDA
// launcher (flash_backward.cu) and the emulated tests, which differ only in how a
// launch happens. A Launcher provides:
//   zero(void* p, size_t bytes, const char* name)     memset on the stream; `name` says which
//                                                      (the kernel timer's, core/kernel_timer.h)
//   scan(const flash::ScanArgs<In>&)                  prefix_scan (prefix_scan_kernel.cuh)
//   prep<D, kSink, kAffine>(BwdGrid, const BwdArgs&)  bwd_prep, kPrepThreads per block
//   main<D, kAffine, kAtomic>(BwdGrid, const BwdArgs&) bwd_main, kBwdThreads per block
//   finalize<D, kAffine>(BwdGrid, const BwdArgs&)     bwd_finalize, likewise
// Order (each step reads what the previous ones wrote; the stream orders them):
//   1. zero the counters and semaphores;
//   2. affine: S = forward scan of v into vsum;
//   3. preprocessing: statistics, u [affine], dsinks [sink];
//   4. affine: R = reverse scan of u into vsum;
//   5. the main kernel, one block per work item: dq (and affine's row sums) accumulated
//      in fp32, the first contributor of each query tile storing;
//   6. bwd_finalize converts them to bf16 dq (and dalpha), one block per (b, h, query tile).
//   kAtomic (the timing build, kBwdAtomicDq): the accumulators are zeroed before 5, every
//   contributor adding.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/attention/flash_backward_args.h"
#include "kernels/attention/prefix_scan_kernel.cuh"

namespace kdtrain::flash {

struct BwdGrid {
  int64_t x = 1, y = 1, z = 1;
};

template <int D, bool kSink, bool kAffine, bool kAtomic = kBwdAtomicDq, typename Launcher>
void run_bwd_sequence(Launcher& launch, const BwdArgs& a, unsigned char* workspace) {
  const AttentionParams& p = a.p;
  const BwdWorkspace ws = bwd_workspace(p.B, p.T, p.H, p.Hkv, p.D, kSink, kAffine);
  launch.zero(workspace + ws.ints, ws.zeroed_bytes, "bwd_zero counters");
  ScanArgs<float> u_scan;
  if constexpr (kAffine) launch.scan(v_prefix_scan(p, a.vsum, a.scan_sums));
  launch.template prep<D, kSink, kAffine>(BwdGrid{a.n_chunks, p.Hkv, p.B}, a);
  if constexpr (kAffine) {
    u_scan.in = a.u;
    u_scan.batches = p.B;
    u_scan.rows = p.T;
    u_scan.cols = p.Hkv * D;
    u_scan.in_row_stride = p.Hkv * D;
    u_scan.in_batch_stride = p.T * p.Hkv * D;
    u_scan.out = a.vsum;
    u_scan.chunk_sums = a.scan_sums;
    u_scan.reverse = true;
    launch.scan(u_scan);
  }
  if constexpr (kAtomic) {  // after the u scan: u lives in the dq accumulator's region
    launch.zero(a.dq_acc, sizeof(float) * static_cast<size_t>(p.B * p.H * a.sched.n_qt) * a.sched.Br * D,
                "bwd_zero dq_acc");
    if constexpr (kAffine)
      launch.zero(a.rs_acc, sizeof(float) * static_cast<size_t>(p.B * p.H * a.T_pad), "bwd_zero rs_acc");
  }
  launch.template main<D, kAffine, kAtomic>(BwdGrid{a.sched.items, 1, 1}, a);
  launch.template finalize<D, kAffine>(BwdGrid{p.B * p.H * a.sched.n_qt, 1, 1}, a);
}

}  // namespace kdtrain::flash
