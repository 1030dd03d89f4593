// Token embedding lookup and its gradient.
//
// Numerics: forward is a copy. Backward scatters dout rows into dwte without
// atomics: each thread owns a block of columns and walks the tokens in order, so
// every dwte element receives its additions in token order for any thread count.
#include <algorithm>
#include <cstring>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/cpu_parallel.h"
#include "core/error.h"

namespace kdtrain::cpu {

template <typename T>
void embedding_forward(T* out, const int32_t* tokens, const T* wte, int64_t N, int64_t C) {
  for (int64_t n = 0; n < N; ++n) {
    KD_CHECK(tokens[n] >= 0, "embedding_forward: negative token ", tokens[n], " at position ", n);
  }
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    std::memcpy(out + n * C, wte + static_cast<int64_t>(tokens[n]) * C,
                static_cast<size_t>(C) * sizeof(T));
  }
}

template <typename T>
void embedding_backward(T* dwte, const T* dout, const int32_t* tokens, int64_t N, int64_t C,
                        int64_t V) {
  for (int64_t n = 0; n < N; ++n) {
    KD_CHECK(tokens[n] >= 0 && tokens[n] < V, "embedding_backward: token ", tokens[n],
             " at position ", n, " is outside the vocabulary of ", V);
  }
  for_column_blocks(C, [&](int64_t c0, int64_t c1) {
    for (int64_t n = 0; n < N; ++n) {
      T* dst = dwte + static_cast<int64_t>(tokens[n]) * C;
      const T* src = dout + n * C;
      for (int64_t c = c0; c < c1; ++c) dst[c] += src[c];
    }
  });
}

template void embedding_forward<float>(float*, const int32_t*, const float*, int64_t, int64_t);
template void embedding_forward<double>(double*, const int32_t*, const double*, int64_t, int64_t);
template void embedding_backward<float>(float*, const float*, const int32_t*, int64_t, int64_t,
                                        int64_t);
template void embedding_backward<double>(double*, const double*, const int32_t*, int64_t, int64_t,
                                         int64_t);

}  // namespace kdtrain::cpu
