// CUDA attention through CudaBackend (whichever path backend/cuda/attention_path.h picks: the
// fused kernels for D = 64 and 128, the row kernels for D = 6 and 96) against the
// CPU reference, forward and backward, every variant, GQA (H=6, Hkv=2) and MHA
// (H=Hkv=4), T in {1, 7, 33, 130}, D in {6, 64, 128}; the row kernels' long-sequence
// shared-memory opt-in at T = 6200. Bounds, guards, NaN pre-fill and determinism:
// tests/attention/cuda_attention_check.h. The models' real shapes: test_cuda_attention_shapes.cpp.
#include "attention/cuda_attention_check.h"
#include "support/model_fixtures.h"

using namespace kdtrain;
using namespace kdtrain::cudatest;
using kdtrain::testing::kAllVariants;

namespace {

std::string expected_path(int64_t D) {
  if (selfcheck_on_cpu() && !cuda_available()) return "cpu-reference/cpu-reference";  // both modes
  return D == 64 || D == 128 ? "flash/flash" : "row/row";
}

}  // namespace

TEST_CASE("cuda attention matches the CPU reference for every variant", "[cuda][attention]") {
  KD_REQUIRE_CUDA_OR_SKIP();
  auto be = cuda_backend();
  struct Heads { int64_t H, Hkv; };
  for (AttentionVariant v : kAllVariants) {
    for (Heads hh : {Heads{6, 2}, Heads{4, 4}}) {
      for (int64_t T : {1, 7, 33, 130}) {
        for (int64_t D : {6, 64, 128}) {
          INFO("variant=" << to_string(v) << " H=" << hh.H << " Hkv=" << hh.Hkv << " T=" << T
                          << " D=" << D);
          const AttentionCase c{2, T, hh.H, hh.Hkv, D, v};
          const uint32_t seed = static_cast<uint32_t>(T * 1000 + D * 10 + hh.H + static_cast<int>(v));
          CHECK(run_attention_case(*be, c, seed) == expected_path(D));
        }
      }
    }
  }
}

TEST_CASE("cuda attention at a longer sequence (row kernels' shared-memory opt-in)",
          "[cuda][attention]") {
  KD_REQUIRE_CUDA_OR_SKIP();
  auto be = cuda_backend();
  // T = 6200 needs > 48 KB of shared memory in the row backward passes; D = 96 keeps
  // the call on the row path.
  for (AttentionVariant v : {AttentionVariant::sink, AttentionVariant::affine}) {
    INFO("variant=" << to_string(v));
    CHECK(run_attention_case(*be, AttentionCase{1, 6200, 2, 1, 96, v}, 77) == expected_path(96));
  }
}
