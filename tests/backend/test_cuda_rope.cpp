// CUDA RoPE forward/backward (in place, bf16) against the CPU reference.
// fp32 rotation, one bf16 rounding per element: check_bf16_rounded (test_cuda_util.h,
// NMSE < (1.05u)^2, max |err| <= 1.05u max |ref|, u = 2^-8).
// Heads >= n_rot must come back bit-identical; guards around the buffer.
#include <cmath>

#include "backend/cpu/cpu_ops.h"
#include "support/test_cuda_util.h"

using namespace kdtrain;
using namespace kdtrain::cudatest;

TEST_CASE("cuda rope forward and backward", "[cuda][rope]") {
  KD_REQUIRE_CUDA_OR_SKIP();
  auto be = cuda_backend();
  const int64_t B = 2;
  for (int64_t T : {1, 33, 130}) {
    for (int64_t D : {6, 64, 128}) {
      const int64_t heads = 10, n_rot = 8;  // q+k heads rotate, v heads do not
      INFO("T=" << T << " D=" << D);
      const int64_t half = D / 2, n = B * T * heads * D;
      std::vector<float> cos(T * half), sin(T * half);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t i = 0; i < half; ++i) {
          const double ang = t * std::pow(10000.0, -2.0 * i / D);
          cos[t * half + i] = static_cast<float>(std::cos(ang));
          sin[t * half + i] = static_cast<float>(std::sin(ang));
        }
      const std::vector<float> x = random_values(n, 30 + T * D, 0.f, 1.f);
      std::vector<float> ref_f = x, ref_b = x;
      cpu::rope_forward(ref_f.data(), cos.data(), sin.data(), B, T, heads, n_rot, D);
      cpu::rope_backward(ref_b.data(), cos.data(), sin.data(), B, T, heads, n_rot, D);

      DevBuf dcos(*be, T * half, DType::f32), dsin(*be, T * half, DType::f32),
          dx(*be, n, DType::bf16);
      dcos.upload(cos);
      dsin.upload(sin);
      for (int dir = 0; dir < 2; ++dir) {
        dx.upload(x);
        if (dir == 0) be->rope_forward(dx.get(), dcos.f32(), dsin.f32(), B, T, heads, n_rot, D);
        else be->rope_backward(dx.get(), dcos.f32(), dsin.f32(), B, T, heads, n_rot, D);
        const std::vector<float> got = dx.download();
        check_bf16_rounded(dir == 0 ? "rope forward" : "rope backward", got, dir == 0 ? ref_f : ref_b);
        bool untouched = true;
        for (int64_t bt = 0; bt < B * T; ++bt)
          for (int64_t h = n_rot; h < heads; ++h)
            for (int64_t d = 0; d < D; ++d) {
              const int64_t k = (bt * heads + h) * D + d;
              untouched = untouched && got[k] == x[k];
            }
        CHECK(untouched);
        CHECK(dx.guard_intact());
      }
    }
  }
}
