// CUDA matmul (cuBLASLt, bf16 in, fp32 accumulate) against the CPU reference.
// Bounds (u = 2^-8, check_bf16_rounded in test_cuda_util.h): out and dinp (bf16) are
// accumulated in fp32 and rounded once (the bias, when given, is added by a second
// kernel: a second rounding), with 25% slack for tensor-core fp32 accumulation over
// K <= 1536 (its round-off grows with sqrt(K) and with the cancellation in random
// dot products): NMSE < (1.25 k u)^2, max |err| <= 1.25 k u max |ref|, k roundings;
// dweight and dbias (fp32, accumulated onto non-zero values): NMSE < 1e-8,
// max |err| <= 1e-4 * max |ref|. Shapes include odd IC/OC (unaligned leading
// dimensions, the cublasGemmEx fallback) and N = 1; both dinp modes; null outputs;
// guards after every output and bit-identical reruns.
#include "backend/cpu/cpu_ops.h"
#include "support/test_cuda_util.h"

using namespace kdtrain;
using namespace kdtrain::cudatest;

TEST_CASE("cuda matmul forward and backward", "[cuda][matmul]") {
  KD_REQUIRE_CUDA_OR_SKIP();
  auto be = cuda_backend();
  struct Shape { int64_t IC, OC; };
  for (int64_t N : {1, 33, 1025}) {
    for (Shape s : {Shape{36, 61}, Shape{64, 192}, Shape{257, 33}, Shape{1024, 1536}}) {
      for (bool bias : {false, true}) {
        const int64_t IC = s.IC, OC = s.OC;
        INFO("N=" << N << " IC=" << IC << " OC=" << OC << " bias=" << bias);
        const uint32_t seed = static_cast<uint32_t>(N * 31 + IC * 7 + OC);
        const std::vector<float> inp = random_values(N * IC, seed, 0.f, 1.f);
        const std::vector<float> w = random_values(OC * IC, seed + 1, 0.f, 0.05f);
        const std::vector<float> b = random_values(OC, seed + 2, 0.f, 0.5f);
        const std::vector<float> dout = random_values(N * OC, seed + 3, 0.f, 1.f);
        const std::vector<float> dinp0 = random_values(N * IC, seed + 4, 0.f, 0.1f);
        const std::vector<float> dw0 = random_values(OC * IC, seed + 5, 0.f, 1.f, false);
        const std::vector<float> db0 = random_values(OC, seed + 6, 0.f, 1.f, false);

        std::vector<float> ref_out(N * OC);
        cpu::matmul_forward(ref_out.data(), inp.data(), w.data(), bias ? b.data() : nullptr, N, IC, OC);

        DevBuf d_inp(*be, N * IC, DType::bf16), d_w(*be, OC * IC, DType::bf16), d_b(*be, OC, DType::bf16),
            d_out(*be, N * OC, DType::bf16), d_dout(*be, N * OC, DType::bf16),
            d_dinp(*be, N * IC, DType::bf16), d_dw(*be, OC * IC, DType::f32), d_db(*be, OC, DType::f32);
        d_inp.upload(inp);
        d_w.upload(w);
        d_b.upload(b);
        d_dout.upload(dout);
        be->matmul_forward(d_out.get(), d_inp.get(), d_w.get(), bias ? d_b.get() : nullptr, N, IC, OC);
        check_bf16_rounded("out", d_out.download(), ref_out, bias ? 2 : 1, 1.25);
        CHECK(d_out.guard_intact());

        for (bool acc : {false, true}) {
          INFO("accumulate_dinp=" << acc);
          std::vector<float> ref_dinp = dinp0, ref_dw = dw0, ref_db = db0;
          cpu::matmul_backward(ref_dinp.data(), ref_dw.data(), bias ? ref_db.data() : nullptr,
                               dout.data(), inp.data(), w.data(), N, IC, OC, acc);
          std::vector<unsigned char> first_dinp, first_dw, first_db;
          for (int run = 0; run < 2; ++run) {
            d_dinp.upload(dinp0);
            d_dw.upload(dw0);
            d_db.upload(db0);
            be->matmul_backward(d_dinp.get(), d_dw.f32(), bias ? d_db.f32() : nullptr, d_dout.get(),
                                d_inp.get(), d_w.get(), N, IC, OC, acc);
            if (run == 0) {
              first_dinp = d_dinp.bytes();
              first_dw = d_dw.bytes();
              first_db = d_db.bytes();
            }
          }
          CHECK(d_dinp.bytes() == first_dinp);
          CHECK(d_dw.bytes() == first_dw);
          CHECK(d_db.bytes() == first_db);
          check_bf16_rounded("dinp", d_dinp.download(), ref_dinp, 1, 1.25);
          check_close("dweight", d_dw.download(), ref_dw, 1e-8, 1e-4);
          check_close("dbias", d_db.download(), ref_db, 1e-8, 1e-4);
          CHECK(d_dinp.guard_intact());
          CHECK(d_dw.guard_intact());
          CHECK(d_db.guard_intact());
        }

        // Null outputs are skipped: dweight only leaves dinp untouched.
        d_dinp.upload(dinp0);
        be->matmul_backward(nullptr, d_dw.f32(), nullptr, d_dout.get(), d_inp.get(), d_w.get(), N,
                            IC, OC, false);
        CHECK(d_dinp.download() == dinp0);
      }
    }
  }
}

TEST_CASE("cuda matmul on unaligned views (row offsets into an arena)", "[cuda][matmul]") {
  KD_REQUIRE_CUDA_OR_SKIP();
  auto be = cuda_backend();
  // The model passes weights at arbitrary element offsets of the bf16 arena and
  // activations at row offsets: pointers aligned to 2 bytes only.
  const int64_t N = 17, IC = 36, OC = 53, off = 3;
  const std::vector<float> inp = random_values(N * IC, 90, 0.f, 1.f);
  const std::vector<float> w = random_values(OC * IC, 91, 0.f, 0.1f);
  std::vector<float> ref(N * OC);
  cpu::matmul_forward(ref.data(), inp.data(), w.data(), static_cast<const float*>(nullptr), N, IC, OC);
  std::vector<float> w_arena(off + OC * IC, 0.f), in_arena(off + N * IC, 0.f);
  std::copy(w.begin(), w.end(), w_arena.begin() + off);
  std::copy(inp.begin(), inp.end(), in_arena.begin() + off);
  DevBuf d_w(*be, w_arena.size(), DType::bf16), d_in(*be, in_arena.size(), DType::bf16),
      d_out(*be, off + N * OC, DType::bf16);
  d_w.upload(w_arena);
  d_in.upload(in_arena);
  auto at = [&](const DevBuf& b) { return static_cast<char*>(b.get()) + off * b.elem_size(); };
  be->matmul_forward(at(d_out), at(d_in), at(d_w), nullptr, N, IC, OC);
  std::vector<float> got = d_out.download();
  // The elements before the view are not the op's: still the unwritten NaN.
  CHECK(std::all_of(got.begin(), got.begin() + off, [](float v) { return std::isnan(v); }));
  got.erase(got.begin(), got.begin() + off);
  check_bf16_rounded("out (unaligned)", got, ref, 1, 1.25);
  CHECK(d_out.guard_intact());
}
