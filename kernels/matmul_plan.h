// The key of a cached cuBLASLt matmul plan: everything the descriptors, the
// layouts and the heuristic's answer depend on. Two calls with equal keys can run
// the same plan; any difference (a shape, a leading dimension, the output type,
// an operand's alignment, the epilogue) needs its own. Plain C++, so the host
// tests (tests/backend/test_matmul_plan.cpp) check the key logic without a GPU.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>

namespace kdtrain::cuda {

enum class MatmulEpilogue : int { none = 0, bias = 1 };

struct MatmulKey {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int c_type = 0;          // cudaDataType_t of C and D
  bool accumulate = false; // beta != 0: C is read
  uint32_t align_a = 0, align_b = 0, align_c = 0;  // largest power of two <= 256 dividing each address
  MatmulEpilogue epilogue = MatmulEpilogue::none;

  bool operator==(const MatmulKey& o) const {
    return trans_a == o.trans_a && trans_b == o.trans_b && m == o.m && n == o.n && k == o.k &&
           lda == o.lda && ldb == o.ldb && ldc == o.ldc && c_type == o.c_type &&
           accumulate == o.accumulate && align_a == o.align_a && align_b == o.align_b &&
           align_c == o.align_c && epilogue == o.epilogue;
  }
};

// Largest power of two <= 256 dividing the address: cuBLASLt's heuristic assumes
// 256-byte aligned buffers unless told otherwise, and views into activations (a
// chunk of rows, a slice of heads) are often less aligned.
inline uint32_t address_alignment(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && a % al != 0) al /= 2;
  return al;
}

struct MatmulKeyHash {
  size_t operator()(const MatmulKey& key) const {
    uint64_t h = 1469598103934665603ull;
    auto mix = [&h](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
    mix(static_cast<uint64_t>(key.trans_a) | static_cast<uint64_t>(key.trans_b) << 1 |
        static_cast<uint64_t>(key.accumulate) << 2 | static_cast<uint64_t>(key.epilogue) << 3);
    for (int64_t v : {key.m, key.n, key.k, key.lda, key.ldb, key.ldc}) mix(static_cast<uint64_t>(v));
    mix(static_cast<uint64_t>(key.c_type));
    mix(static_cast<uint64_t>(key.align_a) | static_cast<uint64_t>(key.align_b) << 16 |
        static_cast<uint64_t>(key.align_c) << 32);
    return static_cast<size_t>(h);
  }
};

}  // namespace kdtrain::cuda
