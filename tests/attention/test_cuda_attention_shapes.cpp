// CUDA attention through CudaBackend at the shapes the models train at:
// H=32, Hkv=8, D=64 (llama3.2-1b) and H=24, Hkv=8, D=128 (llama3.2-3b), T in
// {1, 7, 1000, 2048, 4096}, every variant, on the fused path. Outputs start as NaN
// and every element must be written; guards before and after every buffer; a
// second backward bit-identical; values against the CPU reference within the
// bounds of tests/attention/cuda_attention_check.h (derived from bf16's unit roundoff).
//
// The reference is the CPU backend's attention on the sub-problem of one kv group
// (its query heads and its k/v head: attention never mixes groups); for T >= 1000
// the first and last groups are compared (their outputs come from the same call
// as the others, which are checked to be written and finite), which keeps the
// whole case list to about a minute of CPU time on the GPU machine.
//
// Tags: [realistic] the full list (scripts/gpu/gpu_check.sh runs it on its own);
// [sanitize] a short list at the same head counts for compute-sanitizer's racecheck and
// synccheck: T = 130 only (two tiles, the second partial, and the diagonal), one case
// per attention kernel set and head dim (one_variant_per_kernel_set), because under
// racecheck a case took seconds on an H200 and longer lists could not finish in the GPU
// window (2026-11-28). T = 7 (one partial tile) runs in every other list.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "attention/cuda_attention_check.h"
#include "support/model_fixtures.h"

using namespace kdtrain;
using namespace kdtrain::cudatest;
using kdtrain::testing::kAllVariants;

namespace {

struct Heads {
  int64_t H, Hkv, D;
};
constexpr Heads kRealHeads[] = {{32, 8, 64}, {24, 8, 128}};

void run_real_shape(Backend& be, const Heads& hd, int64_t T, AttentionVariant v) {
  const int64_t B = T >= 2048 ? 1 : 2;
  const bool long_seq = T >= 1000;
  INFO("variant=" << to_string(v) << " B=" << B << " T=" << T << " H=" << hd.H << " Hkv=" << hd.Hkv
                  << " D=" << hd.D);
  AttentionCase c{B, T, hd.H, hd.Hkv, hd.D, v};
  c.rerun_backward = T <= 2048;
  const std::vector<int64_t> groups = long_seq ? std::vector<int64_t>{0, hd.Hkv - 1} : std::vector<int64_t>{};
  const auto start = std::chrono::steady_clock::now();
  const std::string path = run_attention_case(be, c, static_cast<uint32_t>(T * 7 + hd.D + static_cast<int>(v)), groups);
  if (cuda_available()) CHECK(path == "flash/flash");
  // Each shape's seconds, into the GPU window's log: the list outran the window's test
  // budget there (116 s on an H200, 2026-11-28), and the next window says which shapes.
  std::fprintf(stderr, "real shape %s T=%lld D=%lld: %.2f s\n", to_string(v), static_cast<long long>(T),
               static_cast<long long>(hd.D),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

}  // namespace

TEST_CASE("cuda attention at the models' real shapes", "[cuda][attention][realistic]") {
  KD_REQUIRE_CUDA_OR_SKIP();
  auto be = cuda_backend();
  for (const Heads& hd : kRealHeads)
    for (int64_t T : {1, 7, 1000, 2048, 4096})
      for (AttentionVariant v : kAllVariants) run_real_shape(*be, hd, T, v);
}

// One variant per attention kernel set: the kernels are instantiated per (sink, affine),
// and the gate is an op of its own, so of two variants with the same pair the gated one
// covers both (sink, gated and affine-gated today). Under racecheck a case took 4 to 5 s
// on the H200 (2026-11-28) and all ten could not finish in the window.
bool same_kernel_set(AttentionVariant a, AttentionVariant b) {
  return features_of(a).sink == features_of(b).sink && features_of(a).affine == features_of(b).affine;
}

std::vector<AttentionVariant> one_variant_per_kernel_set() {
  std::vector<AttentionVariant> kept;
  for (AttentionVariant v : kAllVariants) {
    auto same = std::find_if(kept.begin(), kept.end(), [&](AttentionVariant k) { return same_kernel_set(k, v); });
    if (same == kept.end()) kept.push_back(v);
    else if (features_of(v).gate) *same = v;
  }
  return kept;
}

TEST_CASE("cuda attention at the real head counts, short (for the sanitizers)",
          "[cuda][attention][sanitize]") {
  KD_REQUIRE_CUDA_OR_SKIP();
  auto be = cuda_backend();
  for (const Heads& hd : kRealHeads)
    for (AttentionVariant v : one_variant_per_kernel_set()) run_real_shape(*be, hd, 130, v);
}

TEST_CASE("the sanitizers' variants cover every attention kernel set and the gate", "[attention]") {
  const std::vector<AttentionVariant> kept = one_variant_per_kernel_set();
  for (AttentionVariant v : kAllVariants) {
    INFO(to_string(v));
    CHECK(std::any_of(kept.begin(), kept.end(), [&](AttentionVariant k) { return same_kernel_set(k, v); }));
  }
  CHECK(std::any_of(kept.begin(), kept.end(), [](AttentionVariant k) { return features_of(k).gate; }));
  CHECK(kept.size() < kAllVariants.size());
}
