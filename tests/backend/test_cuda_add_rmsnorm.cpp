// The fused residual add + RMSNorm forward (Backend::add_rmsnorm_forward) on CUDA:
//   1. bit for bit what add() then rmsnorm_forward() compute on the same backend
//      (the kernel rounds the sum to bf16 once and normalises the rounded sum, as
//      the two unfused ops do), also with sum_out aliasing a and on 2-byte aligned
//      views (the scalar fallback);
//   2. against the CPU fp32 reference on the same bf16 inputs (bounds from bf16's
//      unit roundoff u = 2^-8, check_bf16_rounded): the sum is one rounding of an
//      fp32 add; out sees the sum's rounding, its effect on rstd and its own
//      rounding (3); rstd is fp32 of the rounded sum, within u of the exact one.
// Guards after every output, NaN-free results.
#include "backend/cpu/cpu_ops.h"
#include "support/test_cuda_util.h"

using namespace kdtrain;
using namespace kdtrain::cudatest;

TEST_CASE("cuda add_rmsnorm_forward: fused equals unfused, matches the CPU reference",
          "[cuda][rmsnorm]") {
  KD_REQUIRE_CUDA_OR_SKIP();
  auto be = cuda_backend();
  const float eps = 1e-5f;
  for (int64_t N : {1, 33, 1025}) {
    for (int64_t C : {33, 64, 2048, 2050}) {
      for (int64_t offset : {0, 1}) {  // 1: 2-byte aligned views, scalar path
        INFO("N=" << N << " C=" << C << " offset=" << offset);
        const size_t n = static_cast<size_t>(N * C);
        const std::vector<float> a = random_values(n, 11 + N + C, 0.f, 1.f);
        const std::vector<float> b = random_values(n, 12 + N + C, 0.f, 0.5f);
        const std::vector<float> w = random_values(C, 13 + C, 1.f, 0.2f);
        DevBuf da(*be, n + offset, DType::bf16), db(*be, n + offset, DType::bf16);
        DevBuf dw(*be, C, DType::bf16);
        std::vector<float> pad_a(a), pad_b(b);
        pad_a.insert(pad_a.begin(), offset, 0.f);
        pad_b.insert(pad_b.begin(), offset, 0.f);
        da.upload(pad_a);
        db.upload(pad_b);
        dw.upload(w);
        const size_t es = da.elem_size();
        const void* a_view = static_cast<const char*>(da.get()) + offset * es;
        const void* b_view = static_cast<const char*>(db.get()) + offset * es;

        DevBuf sum(*be, n, DType::bf16), out(*be, n, DType::bf16), rstd(*be, N, DType::f32);
        be->add_rmsnorm_forward(sum.get(), out.get(), rstd.f32(), a_view, b_view, dw.get(), N, C,
                                eps);
        DevBuf usum(*be, n, DType::bf16), uout(*be, n, DType::bf16), urstd(*be, N, DType::f32);
        be->add(usum.get(), a_view, b_view, static_cast<int64_t>(n));
        be->rmsnorm_forward(uout.get(), urstd.f32(), usum.get(), dw.get(), N, C, eps);
        CHECK(sum.bytes() == usum.bytes());
        CHECK(out.bytes() == uout.bytes());
        CHECK(rstd.bytes() == urstd.bytes());

        std::vector<float> ref_sum(n), ref_out(n), ref_rstd(N);
        cpu::add_rmsnorm_forward(ref_sum.data(), ref_out.data(), ref_rstd.data(), a.data(),
                                 b.data(), w.data(), N, C, eps);
        check_bf16_rounded("sum", sum.download(), ref_sum, 1);
        // out: the sum's rounding moves x (u), hence rstd (u), and out rounds once more.
        check_bf16_rounded("out", out.download(), ref_out, 3);
        // rstd is fp32 of the rounded sum: within u of the unrounded sum's.
        check_close("rstd", rstd.download(), ref_rstd, kBf16U * kBf16U, kBf16U);
        CHECK(sum.guard_intact());
        CHECK(out.guard_intact());
        CHECK(rstd.guard_intact());

        // In place: sum_out aliasing a (how the model's inference path runs it).
        void* a_mut = static_cast<char*>(da.get()) + offset * es;
        be->add_rmsnorm_forward(a_mut, out.get(), rstd.f32(), a_mut, b_view, dw.get(), N, C, eps);
        std::vector<float> in_place = da.download();
        in_place.erase(in_place.begin(), in_place.begin() + offset);
        const std::vector<unsigned char> fused_out = out.bytes();
        CHECK(fused_out == uout.bytes());
        std::vector<float> unfused_sum = usum.download();
        CHECK(in_place == unfused_sum);
        CHECK(da.guard_intact());
      }
    }
  }
}
