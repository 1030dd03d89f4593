// Bookkeeping both backends share for their reports (backend.h: attention_paths(),
// memory_stats()).
//
// "Peak memory" (MemoryStats::peak_bytes) is the high-water mark of the bytes the
// backend held at once, counted at allocation size: every alloc() (parameters,
// gradients, optimizer state, activations, loss buffers), the scratch buffer at
// its current capacity, and library workspaces (cuBLAS). It is the counterpart of
// PyTorch's torch.cuda.max_memory_allocated(). On the GPU, CudaBackend also samples
// cudaMemGetInfo at every allocation (device_used_peak_bytes): the difference is
// the CUDA context, the libraries' own allocations and anything else on the device,
// so memory taken outside the tracker shows there.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"

namespace kdtrain {

// Live and peak bytes of the allocations a backend makes. Not thread-safe: each
// backend is driven by one thread.
class MemoryTracker {
 public:
  void on_alloc(const void* ptr, size_t bytes);
  // Unknown pointers (and null) are ignored.
  void on_release(const void* ptr);
  int64_t current_bytes() const { return current_; }
  int64_t peak_bytes() const { return peak_; }

 private:
  std::unordered_map<const void*, size_t> sizes_;
  int64_t current_ = 0, peak_ = 0;
};

// The distinct attention calls a backend has run, in first-seen order.
class AttentionPathLog {
 public:
  void record(const AttentionShape& shape, AttentionFeatures features, bool backward,
              const std::string& path, const std::string& reason);
  const std::vector<AttentionPathUse>& uses() const { return uses_; }

 private:
  std::vector<AttentionPathUse> uses_;
};

// "B=8 T=2048 H=32 Hkv=8 D=64 sink: forward flash, backward flash (fused kernels)"
std::string describe(const AttentionPathUse& use);
// "peak device memory 12.34 GiB (device used 13.01 GiB of 79.19 GiB)" on a device,
// "peak backend memory 2.6 MiB (host)" on the CPU.
std::string describe(const MemoryStats& memory);

}  // namespace kdtrain
