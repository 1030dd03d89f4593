// Which CUDA implementation runs the attention core of one call. This is the one
// place the choice is made: CudaBackend asks it for every forward and backward
// (src/backend/cuda/attention_entry.cu), logs and `kdtrain bench` report its answer.
//
//   flash: the fused kernels (flash.cuh), the training path. They take
//          head dims 64 and 128, B and H up to 65535 (grid dimensions), and
//          16-byte aligned qkv/out/dout/dqkv (their vector loads and stores).
//   row:   one block per query/key row (row.cuh): any head dim, slow. Only
//          where the fused kernels cannot run.
//
// Plain C++ with no CUDA types, so the rule is unit-tested on the CPU.
#pragma once
#include <cstdint>

#include "backend/backend.h"
#include "kernels/attention/flash_shape.h"

namespace kdtrain::cuda {

using flash::aligned_16;
using flash::flash_supports_head_dim;
using flash::kFlashMaxGridDim;

enum class AttentionPath { flash, row };

inline const char* to_string(AttentionPath p) { return p == AttentionPath::flash ? "flash" : "row"; }

struct AttentionPathChoice {
  AttentionPath path = AttentionPath::row;
  const char* reason = "";  // why: "fused kernels", or what rules them out
};

// `buffers_aligned`: every bf16 tensor pointer of the call is 16-byte aligned (the
// row strides are multiples of 16 bytes whenever D is 64 or 128).
inline AttentionPathChoice choose_attention_path(const AttentionShape& s, bool buffers_aligned) {
  if (!flash_supports_head_dim(s.D)) return {AttentionPath::row, "head dim not 64 or 128"};
  if (s.B > kFlashMaxGridDim || s.H > kFlashMaxGridDim)
    return {AttentionPath::row, "batch or heads above 65535"};
  if (!buffers_aligned) return {AttentionPath::row, "a buffer is not 16-byte aligned"};
  return {AttentionPath::flash, "fused kernels"};
}

}  // namespace kdtrain::cuda
