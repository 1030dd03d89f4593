// Optimizer support on fp32 state: the global gradient norm's sum of squares and
// AdamW with fp32 master weights and moments, writing the bf16 compute copy.
//
// sum_squares: deterministic two-pass reduction. Pass 1 cuts x into fixed chunks
// of kSumChunk elements (a constant, not a function of the GPU), each summed in
// double by a fixed block tree; pass 2 adds the chunk sums in order in one block.
//
// AdamW (decoupled, bias-corrected; per element, so deterministic; 16-byte packs
// when every array is aligned, one launch over many segments in the multi form):
//   g = grad_scale*grad; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2
//   w -= lr * (m/bc1 / (sqrt(v/bc2) + eps) + wd w);   compute = bf16(w)
// in fp32 with the bias corrections bc1 = 1-b1^t, bc2 = 1-b2^t computed in double
// on the host. The bf16 copy is rounded to nearest even, or, with stochastic
// rounding, up or down with probability proportional to the distance, from a
// counter-based hash of (seed, index): reproducible run after run.
#pragma once
#include "kernels/cuda_common.cuh"

namespace kdtrain::cuda {

size_t sum_squares_scratch_bytes(int64_t n);
// Returns sum x^2 (blocks the host until the result is back). x (n) fp32.
double sum_squares(const float* x, int64_t n, void* scratch, cudaStream_t stream);

struct AdamWParams {
  float* master = nullptr;     // (n) fp32, updated
  bf16* compute = nullptr;     // (n) bf16, rewritten; may be null
  const float* grad = nullptr; // (n)
  float* m = nullptr;          // (n)
  float* v = nullptr;          // (n)
  int64_t n = 0;
  float lr = 0.f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.f;
  float grad_scale = 1.f;
  int64_t step = 1;                   // 1-based
  bool stochastic_rounding = false;   // off by default
  uint32_t seed = 0;                  // for stochastic rounding
};

// A range [begin, end) of the arrays above with its weight decay.
struct AdamWSegment {
  int64_t begin, end;
  float weight_decay;
};

void adamw_update(const AdamWParams& p, cudaStream_t stream);
// Multi-tensor: the segments (device memory, sorted, disjoint) in one launch; each
// block takes a fixed chunk of [segments[0].begin, segments[count-1].end) and skips
// the gaps between segments. p.weight_decay is unused.
void adamw_update_segments(const AdamWParams& p, const AdamWSegment* segments, int64_t count,
                           int64_t range_begin, int64_t range_end, cudaStream_t stream);

}  // namespace kdtrain::cuda
