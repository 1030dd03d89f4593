// The row kernels' limits (row.cu), in plain C++ so the path choice
// (src/backend/cuda/attention_path.h) knows them before a launch would fail: one query or
// key row per block in grid.y = B*H (B*Hkv), and that row's fp32 scores (two rows in the
// backward) in shared memory beside q/k vectors of D floats.
#pragma once
#include <cstddef>
#include <cstdint>

namespace kdtrain::row {

constexpr int64_t kMaxGridY = 65535;
constexpr size_t kReductionBytes = 32 * sizeof(float);  // block_sum's scratch beside the rows
// sm_90's per-block opt-in maximum of shared memory (H100, H200). The launchers read the
// device's own value; the path choice uses this one.
constexpr size_t kSmemOptInBytes = 227 * 1024;

constexpr size_t forward_smem_bytes(int64_t T, int64_t D) { return static_cast<size_t>(D + T) * sizeof(float); }
constexpr size_t backward_query_smem_bytes(int64_t T, int64_t D) {
  return static_cast<size_t>(3 * D + 2 * T) * sizeof(float);
}
constexpr size_t backward_key_smem_bytes(int64_t T, int64_t D) {
  return static_cast<size_t>(4 * D + 2 * T) * sizeof(float);
}
// Whether the row forward and backward both fit B, H, T, D (the key kernel needs the most).
constexpr bool fits(int64_t B, int64_t T, int64_t H, int64_t D) {
  return B * H <= kMaxGridY && backward_key_smem_bytes(T, D) + kReductionBytes <= kSmemOptInBytes;
}

}  // namespace kdtrain::row
