// Rotary position embedding, Hugging Face LLaMA convention (rotate_half).
//
// Numerics: for head vector x of dim D and i < D/2, the pair (x[i], x[i + D/2])
// at position t is rotated by the angle with cos[t,i], sin[t,i]:
//   x1' = x1 c - x2 s,   x2' = x2 c + x1 s.
// Backward applies the transpose (the inverse rotation) to the gradient in place.
// Heads [0, n_rot) are rotated; the rest are left unchanged. Tokens are independent.
#include "backend/cpu/cpu_ops.h"

namespace kdtrain::cpu {

namespace {

template <typename T>
void rotate(T* x, const T* cos, const T* sin, int64_t B, int64_t Tlen, int64_t n_heads,
            int64_t n_rot, int64_t D, T direction) {
  const int64_t half = D / 2;
#pragma omp parallel for schedule(static)
  for (int64_t bt = 0; bt < B * Tlen; ++bt) {
    const int64_t t = bt % Tlen;
    const T* c = cos + t * half;
    const T* s = sin + t * half;
    for (int64_t h = 0; h < n_rot; ++h) {
      T* v = x + (bt * n_heads + h) * D;
      for (int64_t i = 0; i < half; ++i) {
        const T x1 = v[i];
        const T x2 = v[i + half];
        const T si = direction * s[i];
        v[i] = x1 * c[i] - x2 * si;
        v[i + half] = x2 * c[i] + x1 * si;
      }
    }
  }
}

}  // namespace

template <typename T>
void rope_forward(T* x, const T* cos, const T* sin, int64_t B, int64_t Tlen, int64_t n_heads,
                  int64_t n_rot, int64_t D) {
  rotate(x, cos, sin, B, Tlen, n_heads, n_rot, D, T(1));
}

template <typename T>
void rope_backward(T* dx, const T* cos, const T* sin, int64_t B, int64_t Tlen, int64_t n_heads,
                   int64_t n_rot, int64_t D) {
  rotate(dx, cos, sin, B, Tlen, n_heads, n_rot, D, T(-1));
}

template void rope_forward<float>(float*, const float*, const float*, int64_t, int64_t, int64_t,
                                  int64_t, int64_t);
template void rope_forward<double>(double*, const double*, const double*, int64_t, int64_t,
                                   int64_t, int64_t, int64_t);
template void rope_backward<float>(float*, const float*, const float*, int64_t, int64_t, int64_t,
                                   int64_t, int64_t);
template void rope_backward<double>(double*, const double*, const double*, int64_t, int64_t,
                                    int64_t, int64_t, int64_t);

}  // namespace kdtrain::cpu
