// Which CUDA implementation runs the attention core of one call. This is the one
// place the choice is made: CudaBackend asks it for every forward and backward
// (src/backend/cuda/attention_entry.cu), logs and `kdtrain bench` report its answer.
// The forward kernel inside the fused path is chosen once per backend
// (choose_flash_forward_kernel).
//
//   flash: the fused kernels (flash.cuh), the training path. They take
//          head dims 64 and 128, B and H up to 65535 (grid dimensions), and
//          16-byte aligned qkv/out/dout/dqkv (their vector loads and stores).
//   row:   one block per query/key row (row.cuh): any head dim, slow. Only
//          where the fused kernels cannot run, and within its own limits
//          (kernels/attention/row_limits.h: B*H <= 65535, T up to ~29K).
//   none:  neither fits; the call fails with the reason before any launch.
//
// Plain C++ with no CUDA types, so the rule is unit-tested on the CPU.
#pragma once
#include <cstdint>

#include "backend/backend.h"
#include "core/error.h"
#include "kernels/attention/flash_forward_kernels.h"
#include "kernels/attention/flash_tiles.h"
#include "kernels/attention/row_limits.h"

namespace kdtrain::cuda {

enum class AttentionPath { flash, row, none };

inline const char* to_string(AttentionPath p) {
  return p == AttentionPath::flash ? "flash" : p == AttentionPath::row ? "row" : "none";
}

struct AttentionPathChoice {
  AttentionPath path = AttentionPath::row;
  const char* reason = "";  // why: "fused kernels", or what rules them out
};

// The fused kernels' shape rule: null when they take this shape, else why not. Training
// on CUDA runs the fused kernels only (the row kernels are not a training path), so this
// is also what the training path refuses, checked before a run builds anything
// (training_path_refusal in backend.h); alignment is the buffers', known per call.
inline const char* training_path_refusal(const AttentionShape& s) {
  if (!flash::flash_supports_head_dim(s.D)) return "head dim not 64 or 128";
  if (s.B > flash::kFlashMaxGridDim || s.H > flash::kFlashMaxGridDim) return "batch or heads above 65535";
  return nullptr;
}

// `buffers_aligned`: every bf16 tensor pointer of the call is 16-byte aligned (the
// row strides are multiples of 16 bytes whenever D is 64 or 128).
inline AttentionPathChoice choose_attention_path(const AttentionShape& s, bool buffers_aligned) {
  const char* why = training_path_refusal(s);  // what rules the fused kernels out
  if (why == nullptr && !buffers_aligned) why = "a buffer is not 16-byte aligned";
  if (why == nullptr) return {AttentionPath::flash, "fused kernels"};
  if (s.B * s.H > row::kMaxGridY)
    return {AttentionPath::none, "the fused kernels cannot run it and batch x heads is above the row kernels' 65535"};
  if (!row::fits(s.B, s.T, s.H, s.D))
    return {AttentionPath::none, "the fused kernels cannot run it and the sequence is too long for the row kernels' "
                                 "shared memory"};
  return {AttentionPath::row, why};
}

// Whether this build's sm_90a (wgmma) kernels run on a device of compute capability
// cc_major.cc_minor: where they were built (`built`: CMake KDTRAIN_CUDA_SM90A) on 9.0
// exactly (sm_90a code runs on no other). `asked` (the choice `key` was set to, when it
// names a wgmma kernel; else null): where they do not, an error naming what is missing.
inline bool sm90a_runs_here(const char* key, const char* asked, int cc_major, int cc_minor, bool built) {
  const bool runs = built && cc_major == 9 && cc_minor == 0;
  if (asked != nullptr)
    KD_CHECK(runs, key, "=", asked, ": the wgmma kernel needs a build with KDTRAIN_CUDA_SM90A (",
             built ? "yes" : "no", ") and a device of compute capability 9.0 (", cc_major, ".", cc_minor, ")");
  return runs;
}

// The rule both passes' kernel choices share: a wgmma choice asks for an sm_90a kernel
// (`asked`, its name; an error where sm90a_runs_here says it cannot run), `auto` takes one
// wherever it runs, `mma_sync` never.
inline bool sm90a_chosen(const char* key, const char* asked, bool automatic, int cc_major, int cc_minor,
                         bool built) {
  const bool runs_here = sm90a_runs_here(key, asked, cc_major, cc_minor, built);
  return asked != nullptr || (automatic && runs_here);
}


// The forward kernel of every call of one backend, chosen once when it is built from
// train.attention_forward, this build and the device (sm90a_chosen), at head dims 64 and
// 128 (the only ones the fused path takes): a wgmma kernel wherever one runs, the
// warp-specialised one unless the lockstep one is asked for (an H200 timed the lockstep
// kernel at 0.51 ms against the mma.sync kernel's 0.65 at D 64 and 0.38 against 0.73 at
// D 128; the warp-specialised one gives its bits and is predicted faster, not yet timed:
// docs/flash_attention_forward_hopper.md).
inline FlashForwardKernel choose_flash_forward_kernel(AttentionForward request, int cc_major, int cc_minor,
                                                      bool built) {
  const bool lockstep = request == AttentionForward::wgmma_lockstep;
  const char* asked = request == AttentionForward::wgmma || lockstep ? choice_name(request) : nullptr;
  const bool wgmma = sm90a_chosen("train.attention_forward", asked, request == AttentionForward::auto_select,
                                  cc_major, cc_minor, built);
  if (!wgmma) return FlashForwardKernel::mma_sync;
  return lockstep ? FlashForwardKernel::wgmma_sm90a_lockstep : FlashForwardKernel::wgmma_sm90a;
}

// Within the fused path, which build of the backward's main kernel: mma.sync throughout
// (sm_90), or S^T, dP^T, dV and dK on wgmma (sm_90a; the rest of the backward is shared).
enum class FlashBackwardKernel { mma_sync, wgmma_sm90a };

inline const char* to_string(FlashBackwardKernel k) {
  return k == FlashBackwardKernel::wgmma_sm90a ? "wgmma_sm90a" : "mma_sync";
}

// The backward's main kernel of every call of one backend, chosen once from
// train.attention_backward by the forward's rule (sm90a_chosen). An H200 timed the wgmma
// backward at 1.38 ms against the mma.sync kernel's 2.18 at D 64 and 1.16 against 1.69 at
// D 128, and its GPU test passed for every variant (docs/flash_attention_backward.md,
// "Hopper backward").
inline FlashBackwardKernel choose_flash_backward_kernel(AttentionBackward request, int cc_major, int cc_minor,
                                                        bool built) {
  const char* asked = request == AttentionBackward::wgmma ? choice_name(request) : nullptr;
  const bool wgmma = sm90a_chosen("train.attention_backward", asked, request == AttentionBackward::auto_select,
                                  cc_major, cc_minor, built);
  return wgmma ? FlashBackwardKernel::wgmma_sm90a : FlashBackwardKernel::mma_sync;
}

}  // namespace kdtrain::cuda
