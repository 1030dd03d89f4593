// Which CUDA implementation runs the attention core of one call. This is the one
// place the choice is made: CudaBackend asks it for every forward and backward
// (src/backend/cuda/attention_entry.cu), logs and `kdtrain bench` report its answer.
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
#include <string>

#include "backend/backend.h"
#include "core/error.h"
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

// `buffers_aligned`: every bf16 tensor pointer of the call is 16-byte aligned (the
// row strides are multiples of 16 bytes whenever D is 64 or 128).
inline AttentionPathChoice choose_attention_path(const AttentionShape& s, bool buffers_aligned) {
  const char* why = nullptr;  // what rules the fused kernels out
  if (!flash::flash_supports_head_dim(s.D))
    why = "head dim not 64 or 128";
  else if (s.B > flash::kFlashMaxGridDim || s.H > flash::kFlashMaxGridDim)
    why = "batch or heads above 65535";
  else if (!buffers_aligned)
    why = "a buffer is not 16-byte aligned";
  if (why == nullptr) return {AttentionPath::flash, "fused kernels"};
  if (s.B * s.H > row::kMaxGridY)
    return {AttentionPath::none, "the fused kernels cannot run it and batch x heads is above the row kernels' 65535"};
  if (!row::fits(s.B, s.T, s.H, s.D))
    return {AttentionPath::none, "the fused kernels cannot run it and the sequence is too long for the row kernels' "
                                 "shared memory"};
  return {AttentionPath::row, why};
}

// Within the fused path, which forward kernel: the mma.sync one (sm_80 instructions,
// any head dim the fused path takes) or the Hopper one (wgmma, sm_90a).
enum class FlashForwardKernel { mma_sync, wgmma_sm90a };

inline const char* to_string(FlashForwardKernel k) {
  return k == FlashForwardKernel::wgmma_sm90a ? "wgmma_sm90a" : "mma_sync";
}

// The wgmma kernel is built for head dims 64 and 128 and chosen by default at 128 only:
// at 64 the forward is bound by its exponentials, not the tensor cores, so whether it
// pays there is for a GPU to measure (docs/flash_attention.md, "Hopper forward").
constexpr int64_t kSm90aForwardDefaultHeadDim = 128;

// The wgmma kernel runs where it was built (`built`: CMake KDTRAIN_CUDA_SM90A), on a
// device of compute capability exactly 9.0 (sm_90a code runs on no other), by default at
// head dim kSm90aForwardDefaultHeadDim; elsewhere the mma.sync kernel. `request` is
// $KDTRAIN_FLASH_FORWARD (null or "" or "auto": that rule; "mma_sync": always the
// mma.sync kernel, e.g. to time both; "wgmma": the wgmma kernel at head dim 64 or 128,
// an error where it cannot run).
inline FlashForwardKernel choose_flash_forward_kernel(int64_t D, int cc_major, int cc_minor, bool built,
                                                      const char* request) {
  const std::string r = request != nullptr ? request : "";
  KD_CHECK(r.empty() || r == "auto" || r == "mma_sync" || r == "wgmma", "KDTRAIN_FLASH_FORWARD=", r,
           ": expected auto, mma_sync or wgmma");
  const bool runs_here = built && cc_major == 9 && cc_minor == 0;
  if (r == "wgmma") {
    KD_CHECK(runs_here && flash::flash_supports_head_dim(D),
             "KDTRAIN_FLASH_FORWARD=wgmma: the wgmma forward needs a build with KDTRAIN_CUDA_SM90A (",
             built ? "yes" : "no", "), compute capability 9.0 (", cc_major, ".", cc_minor, ") and head dim 64 or 128 (",
             D, ")");
    return FlashForwardKernel::wgmma_sm90a;
  }
  if (r == "mma_sync") return FlashForwardKernel::mma_sync;
  return runs_here && D == kSm90aForwardDefaultHeadDim ? FlashForwardKernel::wgmma_sm90a : FlashForwardKernel::mma_sync;
}

}  // namespace kdtrain::cuda
