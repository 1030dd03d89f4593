// The multi-tensor AdamW (AdamWArgs::segments) and the sum of squares on CUDA:
//   - the segments form, one launch, gives the same bits as one call per segment
//     (the same per-element arithmetic) over 3 steps, including segments that start
//     and end off the 16-byte packs, a gap between segments and a misaligned base
//     (the scalar path); elements in the gaps stay untouched;
//   - sum_squares gives the same bits on an aligned and on a 4-byte-offset copy of
//     the same values (its additions do not depend on the load width) and matches
//     the float64 reference to 1e-12 relative (double accumulation).
// Guards after every output.
#include "support/backend_args.h"
#include "backend/cpu/cpu_ops.h"
#include "support/test_cuda_util.h"

using namespace kdtrain;
using namespace kdtrain::cudatest;
using namespace kdtrain::testing;

TEST_CASE("cuda adamw segments equal per-segment calls", "[cuda][optim]") {
  KD_REQUIRE_CUDA_OR_SKIP();
  auto be = cuda_backend();
  for (int64_t offset : {0, 1}) {  // 1: every array starts 4 bytes off its pack
    INFO("offset=" << offset);
    const int64_t n = 70001;
    const std::vector<ParamSegment> segments = {
        {0, 13, 0.1f}, {13, 4096, 0.f}, {4100, 4101, 0.1f}, {5003, 69997, 0.1f}};
    const std::vector<float> w0 = random_values(n, 61, 0.f, 0.05f, false);
    const std::vector<float> g = random_values(n, 62, 0.f, 1e-3f, false);
    auto padded = [&](const std::vector<float>& v) {
      std::vector<float> p(v);
      p.insert(p.begin(), offset, 0.f);
      return p;
    };
    DevBuf w1(*be, n + offset, DType::f32), m1(*be, n + offset, DType::f32),
        v1(*be, n + offset, DType::f32), c1(*be, n + offset, DType::bf16),
        w2(*be, n + offset, DType::f32), m2(*be, n + offset, DType::f32),
        v2(*be, n + offset, DType::f32), c2(*be, n + offset, DType::bf16),
        dg(*be, n + offset, DType::f32);
    const std::vector<float> zeros(n + offset, 0.f);
    for (DevBuf* b : {&w1, &w2}) b->upload(padded(w0));
    for (DevBuf* b : {&m1, &v1, &m2, &v2, &c1, &c2}) b->upload(zeros);
    dg.upload(padded(g));
    const size_t es = c1.elem_size();
    for (int64_t step = 1; step <= 3; ++step) {
      AdamWArgs a = adamw_args(w1.f32() + offset, static_cast<char*>(c1.get()) + offset * es,
                               dg.f32() + offset, m1.f32() + offset, v1.f32() + offset, n);
      a.lr = 1e-2f;
      a.grad_scale = 0.7f;
      a.step = step;
      adamw_step_both_ways(*be, a, segments,
                           adamw_args(w2.f32() + offset, static_cast<char*>(c2.get()) + offset * es,
                                      dg.f32() + offset, m2.f32() + offset, v2.f32() + offset, n),
                           es);
    }
    CHECK(w1.bytes() == w2.bytes());
    CHECK(m1.bytes() == m2.bytes());
    CHECK(v1.bytes() == v2.bytes());
    CHECK(c1.bytes() == c2.bytes());
    const std::vector<float> w = w1.download();
    for (int64_t k : {4096, 4099, 4101, 5002, 69997, 70000}) CHECK(w[offset + k] == w0[k]);
    for (DevBuf* b : {&w1, &m1, &v1, &c1}) CHECK(b->guard_intact());
  }
}

TEST_CASE("cuda sum of squares: same bits aligned or not", "[cuda][optim]") {
  KD_REQUIRE_CUDA_OR_SKIP();
  auto be = cuda_backend();
  for (int64_t n : {1, 5, 65537, 1000003}) {
    INFO("n=" << n);
    const std::vector<float> x = random_values(n, 70 + n, 0.f, 1.f, false);
    std::vector<float> shifted(x);
    shifted.insert(shifted.begin(), 1, 0.f);
    DevBuf a(*be, n, DType::f32), b(*be, n + 1, DType::f32);
    a.upload(x);
    b.upload(shifted);
    const double aligned = be->sum_squares(a.f32(), n);
    const double offset = be->sum_squares(b.f32() + 1, n);
    CHECK(aligned == offset);
    double ref = 0.0;
    for (float v : x) ref += static_cast<double>(v) * v;
    CHECK(std::abs(aligned - ref) <= 1e-12 * ref);
  }
}
