// CUDA embedding forward/backward against the CPU reference.
//   forward: a copy, must be exact.
//   backward (fp32 dwte, +=): NMSE < 1e-10, max |err| <= 1e-5 * max |ref|; repeated
//   tokens stress the bucketed, atomics-free reduction; two runs bit-identical.
//   Out-of-vocabulary ids are refused with an error naming the position.
#include "backend/cpu/cpu_ops.h"
#include "support/test_cuda_util.h"

using namespace kdtrain;
using namespace kdtrain::cudatest;

TEST_CASE("cuda embedding forward and backward", "[cuda][embedding]") {
  KD_REQUIRE_CUDA_OR_SKIP();
  auto be = cuda_backend();
  for (int64_t N : {1, 33, 1025}) {
    for (int64_t C : {1, 36, 257}) {
      for (int64_t V : {1, 61, 5000}) {
        INFO("N=" << N << " C=" << C << " V=" << V);
        std::mt19937 rng(static_cast<uint32_t>(N * 7 + C * 3 + V));
        // Half the positions draw from 3 ids so buckets get long.
        std::vector<int32_t> tokens(N);
        for (auto& t : tokens)
          t = static_cast<int32_t>(rng() % 2 ? rng() % std::min<int64_t>(V, 3) : rng() % V);
        const std::vector<float> wte = random_values(V * C, 20 + V * C, 0.f, 1.f);
        const std::vector<float> dout = random_values(N * C, 21 + N * C, 0.f, 1.f);
        const std::vector<float> dwte0 = random_values(V * C, 22 + V * C, 0.f, 1.f, false);

        std::vector<float> ref_out(N * C), ref_dwte = dwte0;
        cpu::embedding_forward(ref_out.data(), tokens.data(), wte.data(), N, C);
        cpu::embedding_backward(ref_dwte.data(), dout.data(), tokens.data(), N, C, V);

        DevBuf dtok(*be, N, DType::f32), dw(*be, V * C, DType::bf16), out(*be, N * C, DType::bf16),
            dg(*be, N * C, DType::bf16), dwte(*be, V * C, DType::f32);
        dtok.upload_i32(tokens);
        dw.upload(wte);
        dg.upload(dout);
        be->embedding_forward(out.get(), dtok.i32(), dw.get(), N, C);
        CHECK(out.download() == ref_out);
        CHECK(out.guard_intact());

        CHECK(reruns_bit_identical(dwte, dwte0, [&] {
          be->embedding_backward(dwte.f32(), dg.get(), tokens.data(), N, C, V);  // host ids
        }));
        check_output("dwte", dwte, ref_dwte, 1e-10, 1e-5);
      }
    }
  }
}

TEST_CASE("cuda embedding backward refuses out-of-vocabulary tokens", "[cuda][embedding]") {
  KD_REQUIRE_CUDA_OR_SKIP();
  auto be = cuda_backend();
  const int64_t N = 4, C = 8, V = 10;
  DevBuf dg(*be, N * C, DType::bf16), dwte(*be, V * C, DType::f32);
  const std::vector<int32_t> tokens = {1, 2, 10, 3};  // host ids, as the interface takes them
  CHECK_THROWS_WITH(be->embedding_backward(dwte.f32(), dg.get(), tokens.data(), N, C, V),
                    Catch::Contains("position 2"));
}

#ifdef KDTRAIN_HAVE_CUDA
#include "kernels/embedding.cuh"

// The host half of the deterministic backward runs without a device.
TEST_CASE("embedding token buckets group positions by id in order", "[cuda][embedding]") {
  const std::vector<int32_t> tokens = {4, 1, 4, 0, 4, 1};
  const cuda::TokenBuckets b = cuda::bucket_tokens(tokens.data(), 6, 5);
  CHECK(b.ids == std::vector<int32_t>{0, 1, 4});
  CHECK(b.offsets == std::vector<int32_t>{0, 1, 3, 6});
  CHECK(b.positions == std::vector<int32_t>{3, 1, 5, 0, 2, 4});
  CHECK_THROWS_WITH(cuda::bucket_tokens(tokens.data(), 6, 4), Catch::Contains("position 0"));
  const int32_t negative[] = {0, -1};
  CHECK_THROWS_WITH(cuda::bucket_tokens(negative, 2, 4), Catch::Contains("position 1"));
}
#endif
