// Backend op arguments as the tests build them, on any backend: the arrays of a
// loss chunk and of an AdamW update, and a step of AdamW's multi-tensor
// (segments) form next to the reference it must equal, one plain call per segment.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/backend.h"

namespace kdtrain::testing {

// LossChunkArgs over n rows of V logits; the settings keep their defaults.
inline LossChunkArgs loss_chunk_args(int64_t n, int64_t V, void* logits, const void* teacher_logits,
                                     const int32_t* targets, float* ce, float* kd) {
  return LossChunkArgs{n, V, logits, teacher_logits, targets, ce, kd};
}

// AdamWArgs over arrays of n elements; the hyperparameters keep their defaults.
inline AdamWArgs adamw_args(float* master, void* compute, const float* grad, float* m, float* v,
                            int64_t n) {
  return AdamWArgs{master, compute, grad, m, v, n};
}

// One step of `segmented` (arrays and hyperparameters) over `segments` in one call,
// then the same step as one plain call per segment, each with the segment's weight
// decay, on the arrays of `per_segment` (whose compute elements are
// compute_elem_size bytes).
inline void adamw_step_both_ways(Backend& be, AdamWArgs segmented, const std::vector<ParamSegment>& segments,
                                 const AdamWArgs& per_segment, size_t compute_elem_size) {
  segmented.segments = segments.data();
  segmented.num_segments = static_cast<int64_t>(segments.size());
  be.adamw_update(segmented);
  for (const ParamSegment& s : segments) {
    AdamWArgs b = segmented;
    b.segments = nullptr;
    b.num_segments = 0;
    b.weight_decay = s.weight_decay;
    b.master = per_segment.master + s.begin;
    b.compute = static_cast<char*>(per_segment.compute) + s.begin * compute_elem_size;
    b.grad = per_segment.grad + s.begin;
    b.m = per_segment.m + s.begin;
    b.v = per_segment.v + s.begin;
    b.n = s.end - s.begin;
    be.adamw_update(b);
  }
}

}  // namespace kdtrain::testing
