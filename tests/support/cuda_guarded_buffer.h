// Device memory framed by guard elements, for the CUDA tests that launch kernels
// directly rather than through a Backend (test_cuda_rmsnorm.cpp,
// test_flash_attention_cuda.cpp): n elements between two runs of kGuards guard
// elements, so a kernel that writes past either end is caught.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <vector>

#include "kernels/cuda_check.cuh"

namespace kdtrain::cudatest {

template <typename E, size_t kGuards = 32>
struct GuardedBuffer {
  size_t n;
  E* base = nullptr;
  E* ptr = nullptr;  // element 0, kGuards elements into the allocation (16-byte aligned for E >= 2 bytes)
  explicit GuardedBuffer(size_t count) : n(count) {
    CUDA_CHECK(cudaMalloc(&base, (n + 2 * kGuards) * sizeof(E)));
    ptr = base + kGuards;
  }
  ~GuardedBuffer() { cudaFree(base); }
  GuardedBuffer(const GuardedBuffer&) = delete;
  GuardedBuffer& operator=(const GuardedBuffer&) = delete;
  // Uploads the n values of `v` with `guard` in both guard runs.
  void put(const std::vector<E>& v, E guard) {
    std::vector<E> h(kGuards, guard);
    h.insert(h.end(), v.begin(), v.end());
    h.resize(n + 2 * kGuards, guard);
    CUDA_CHECK(cudaMemcpy(base, h.data(), h.size() * sizeof(E), cudaMemcpyHostToDevice));
  }
  // The n values, then the guard after them, then the guard before them.
  std::vector<E> get() const {
    std::vector<E> h(n + 2 * kGuards);
    CUDA_CHECK(cudaMemcpy(h.data(), base, h.size() * sizeof(E), cudaMemcpyDeviceToHost));
    std::rotate(h.begin(), h.begin() + kGuards, h.end());
    return h;
  }
};

// True when every element of `h` (from get()) past the first n is `guard`, bit for bit.
template <typename E>
bool guards_intact(const std::vector<E>& h, size_t n, E guard) {
  for (size_t k = n; k < h.size(); ++k)
    if (std::memcmp(&h[k], &guard, sizeof(E)) != 0) return false;
  return true;
}

}  // namespace kdtrain::cudatest
