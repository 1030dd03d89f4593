// CUDA optimizer support against the CPU reference (double internally):
//   sum_squares: relative error < 1e-12 (double accumulation), bit-identical reruns.
//   AdamW, 3 steps: master within 4 fp32 ulps of the reference (max |err| <=
//   5e-7 * max |w|), m and v NMSE < 1e-10, the bf16 compute copy equal to the
//   round-to-nearest-even of the device master; guards after every output.
//   Stochastic rounding (CudaBackend only): each bf16 value is one of the two
//   neighbours of the master value, the rounding is unbiased on average, and two
//   runs agree bit for bit.
#include "support/backend_args.h"
#include "backend/cpu/cpu_ops.h"
#include "support/test_cuda_util.h"

#ifdef KDTRAIN_HAVE_CUDA
#include "backend/cuda/cuda_backend.cuh"
#endif

using namespace kdtrain;
using namespace kdtrain::cudatest;

TEST_CASE("cuda sum of squares is deterministic and matches", "[cuda][optim]") {
  KD_REQUIRE_CUDA_OR_SKIP();
  auto be = cuda_backend();
  for (int64_t n : {1, 33, 1025, (1 << 17) + 3, 3000001}) {
    INFO("n=" << n);
    const std::vector<float> x = random_values(n, 40 + n, 0.f, 1e-2f, false);
    const double ref = cpu::sum_squares(x.data(), n);
    DevBuf d(*be, n, DType::f32);
    d.upload(x);
    const double a = be->sum_squares(d.f32(), n), b = be->sum_squares(d.f32(), n);
    CHECK(a == b);
    CHECK(std::abs(a - ref) <= 1e-12 * ref);
  }
}

namespace {
struct AdamState {
  std::vector<float> w, m, v;
};
}  // namespace

TEST_CASE("cuda adamw matches the reference over 3 steps", "[cuda][optim]") {
  KD_REQUIRE_CUDA_OR_SKIP();
  auto be = cuda_backend();
  for (int64_t n : {1, 33, 1025, 100003}) {
    INFO("n=" << n);
    AdamState ref{random_values(n, 50 + n, 0.f, 0.5f, false), std::vector<float>(n, 0.f),
                  std::vector<float>(n, 0.f)};
    DevBuf w(*be, n, DType::f32), cw(*be, n, DType::bf16), g(*be, n, DType::f32),
        m(*be, n, DType::f32), v(*be, n, DType::f32);
    w.upload(ref.w);
    m.upload(ref.m);
    v.upload(ref.v);
    for (int64_t step = 1; step <= 3; ++step) {
      const std::vector<float> grad = random_values(n, 60 + n + step, 0.f, 1.f, false);
      g.upload(grad);
      cpu::adamw_update(ref.w.data(), static_cast<float*>(nullptr), grad.data(), ref.m.data(),
                        ref.v.data(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, step);
      AdamWArgs a = testing::adamw_args(w.f32(), cw.get(), g.f32(), m.f32(), v.f32(), n);
      a.lr = 1e-3f;
      a.weight_decay = 0.1f;
      a.grad_scale = 0.5f;
      a.step = step;
      be->adamw_update(a);
    }
    const std::vector<float> got_w = w.download(), got_c = cw.download();
    check_close("master", got_w, ref.w, 1e-12, 5e-7);
    check_close("m", m.download(), ref.m, 1e-10, 1e-5);
    check_close("v", v.download(), ref.v, 1e-10, 1e-5);
    bool rne = true;
    const bool bf16 = be->act_dtype() == DType::bf16;
    for (int64_t i = 0; i < n; ++i) rne = rne && got_c[i] == (bf16 ? round_bf16(got_w[i]) : got_w[i]);
    CHECK(rne);
    for (const DevBuf* b : {&w, &cw, &m, &v}) CHECK(b->guard_intact());
  }
}

#ifdef KDTRAIN_HAVE_CUDA
TEST_CASE("cuda adamw stochastic rounding is unbiased and reproducible", "[cuda][optim]") {
  if (!cuda_available()) {  // needs the CudaBackend itself, also in the CPU self-check
    WARN("SKIPPED: no CUDA device");
    return;
  }
  std::vector<unsigned char> runs[2];
  const int64_t n = 200000;
  for (int run = 0; run < 2; ++run) {
    CudaBackend be;
    be.set_stochastic_rounding(true, 1234);
    // Master values 1/4 of a bf16 ulp (2^-7 in [1, 2)) above a bf16 value b.
    const float ulp = 1.f / 128.f;
    std::vector<float> w0(n), base(n);
    for (int64_t i = 0; i < n; ++i) {
      base[i] = 1.f + static_cast<float>(i % 100) * ulp;
      w0[i] = base[i] + 0.25f * ulp;
    }
    DevBuf w(be, n, DType::f32), cw(be, n, DType::bf16), g(be, n, DType::f32),
        m(be, n, DType::f32), v(be, n, DType::f32);
    w.upload(w0);
    const std::vector<float> zeros(n, 0.f);
    g.upload(zeros);
    m.upload(zeros);
    v.upload(zeros);
    // zero gradient, no decay: the master stays put, only the rounding acts
    AdamWArgs a = testing::adamw_args(w.f32(), cw.get(), g.f32(), m.f32(), v.f32(), n);
    a.lr = 1e-3f;
    a.step = 1;
    be.adamw_update(a);
    const std::vector<float> c = cw.download();
    CHECK(w.download() == w0);
    int64_t up = 0;
    bool neighbours = true;
    for (int64_t i = 0; i < n; ++i) {
      neighbours = neighbours && (c[i] == base[i] || c[i] == base[i] + ulp);
      up += c[i] == base[i] + ulp;
    }
    CHECK(neighbours);
    // Rounded up with probability 1/4: 50000 expected, standard deviation ~194.
    CHECK(std::abs(static_cast<double>(up) / n - 0.25) < 0.01);
    CHECK(cw.guard_intact());
    runs[run] = cw.bytes();
  }
  CHECK(runs[0] == runs[1]);
}
#endif
