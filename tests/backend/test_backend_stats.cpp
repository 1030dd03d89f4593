// The reports' bookkeeping (src/backend/backend_stats.h) and the CUDA attention
// path rule (src/backend/cuda/attention_path.h), which are plain C++ and run on the CPU:
// which implementation each shape gets, the per-shape log of paths that ran, and
// the memory high-water mark, checked through the CPU backend as well.
#include <catch2/catch.hpp>

#include "backend/cuda/attention_path.h"
#include "backend/backend.h"
#include "backend/backend_stats.h"

using namespace kdtrain;

TEST_CASE("the fused attention path takes head dims 64 and 128, aligned, within grid limits",
          "[attention][path]") {
  using cuda::AttentionPath;
  using cuda::choose_attention_path;
  // The real shapes: llama3.2-1b (H=32, Hkv=8, D=64) and a D=128 model.
  CHECK(choose_attention_path({8, 2048, 32, 8, 64}, true).path == AttentionPath::flash);
  CHECK(choose_attention_path({1, 1, 24, 8, 128}, true).path == AttentionPath::flash);
  CHECK(choose_attention_path({2, 7, 4, 4, 64}, true).reason == std::string("fused kernels"));
  // Everything else falls back to the row kernels, saying why.
  for (int64_t D : {6, 32, 80, 96, 256}) {
    const auto c = choose_attention_path({2, 7, 4, 2, D}, true);
    CHECK(c.path == AttentionPath::row);
    CHECK(std::string(c.reason) == "head dim not 64 or 128");
  }
  CHECK(choose_attention_path({2, 7, 4, 2, 64}, false).path == AttentionPath::row);
  CHECK(choose_attention_path({1, 7, 65536, 2, 64}, true).path == AttentionPath::none);
  // The row kernels' own limits: B*H at most 65535, T up to ~29K (shared memory).
  const auto big = choose_attention_path({65536, 7, 4, 2, 64}, true);
  CHECK(big.path == AttentionPath::none);
  CHECK(std::string(big.reason).find("65535") != std::string::npos);
  CHECK(choose_attention_path({1, 28000, 4, 2, 80}, true).path == AttentionPath::row);
  const auto long_row = choose_attention_path({1, 30000, 4, 2, 80}, true);
  CHECK(long_row.path == AttentionPath::none);
  CHECK(std::string(long_row.reason).find("too long") != std::string::npos);
  CHECK(choose_attention_path({1, 30000, 4, 2, 64}, true).path == AttentionPath::flash);  // no limit there
  CHECK(choose_attention_path({65535, 7, 65535, 5, 64}, true).path == AttentionPath::flash);
  alignas(16) unsigned char buf[32];
  CHECK(flash::aligned_16(buf));
  CHECK_FALSE(flash::aligned_16(buf + 2));
  CHECK(flash::aligned_16(nullptr));  // an absent buffer constrains nothing
}

TEST_CASE("the attention path log keeps one entry per distinct call", "[attention][path]") {
  AttentionPathLog log;
  const AttentionShape a{8, 2048, 32, 8, 64}, b{8, 2048, 32, 8, 6};
  log.record(a, features_of(AttentionVariant::sink), false, "flash", "fused kernels");
  log.record(a, features_of(AttentionVariant::sink), true, "flash", "fused kernels");
  log.record(b, features_of(AttentionVariant::sink), false, "row", "head dim not 64 or 128");
  log.record(a, features_of(AttentionVariant::affine), false, "flash", "fused kernels");
  log.record(a, features_of(AttentionVariant::sink), false, "flash", "fused kernels");  // seen before
  REQUIRE(log.uses().size() == 3);
  CHECK(describe(log.uses()[0]) ==
        "B=8 T=2048 H=32 Hkv=8 D=64 sink: forward flash, backward flash (fused kernels)");
  CHECK(describe(log.uses()[1]) ==
        "B=8 T=2048 H=32 Hkv=8 D=6 sink: forward row, backward not run (head dim not 64 or 128)");
  CHECK(log.uses()[2].features == features_of(AttentionVariant::affine));
}

TEST_CASE("features labels: each variant's features spelled and read back", "[attention][path]") {
  CHECK(features_label(AttentionFeatures{}) == "softmax");
  CHECK(features_label(features_of(AttentionVariant::affine_gated)) == "affine+gate");
  for (AttentionVariant v : all_attention_variants()) {
    INFO(v);
    CHECK(features_from_label(features_label(features_of(v))) == features_of(v));
  }
}

TEST_CASE("the memory tracker keeps live bytes and their high-water mark", "[memory]") {
  MemoryTracker m;
  int x = 0, y = 0, z = 0;
  m.on_alloc(&x, 100);
  m.on_alloc(&y, 50);
  CHECK(m.current_bytes() == 150);
  m.on_release(&x);
  m.on_alloc(&z, 20);
  CHECK(m.current_bytes() == 70);
  CHECK(m.peak_bytes() == 150);
  m.on_release(&x);      // already released: ignored
  m.on_release(nullptr);
  m.on_alloc(nullptr, 1000);
  CHECK(m.current_bytes() == 70);
  m.on_alloc(&y, 500);   // an address reused without a release we saw: counted once
  CHECK(m.current_bytes() == 520);
  CHECK(m.peak_bytes() == 520);
}

TEST_CASE("the CPU backend reports its memory and attention path", "[memory][attention][path]") {
  auto be = make_backend("cpu", 1);
  const MemoryStats before = be->memory_stats();
  CHECK(before.device_used_peak_bytes == -1);  // no device
  const int64_t B = 1, T = 3, H = 2, Hkv = 1, D = 4;
  float* qkv = static_cast<float*>(be->alloc(B * T * (H + 2 * Hkv) * D * 4));
  float* out = static_cast<float*>(be->alloc(B * T * H * D * 4));
  float* lse = static_cast<float*>(be->alloc(B * H * T * 4));
  const MemoryStats during = be->memory_stats();
  // Allocations are rounded up to 256 bytes: three of them.
  CHECK(during.current_bytes == before.current_bytes + 3 * 256);
  AttentionForwardArgs f;
  f.shape = {B, T, H, Hkv, D};
  f.scale = 0.5f;
  f.qkv = qkv;
  f.out = out;
  f.lse = lse;
  be->attention_forward(f);
  REQUIRE(be->attention_paths().size() == 1);
  CHECK(describe(be->attention_paths()[0]) ==
        "B=1 T=3 H=2 Hkv=1 D=4 softmax: forward cpu-reference, backward not run");
  be->release(qkv);
  be->release(out);
  be->release(lse);
  const MemoryStats after = be->memory_stats();
  CHECK(after.current_bytes == before.current_bytes);
  CHECK(after.peak_bytes == during.current_bytes);
}
