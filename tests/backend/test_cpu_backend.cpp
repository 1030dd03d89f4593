// CpuBackend through the Backend interface: factory, memory, conversions, and one
// end-to-end op (attention) matching the templated reference.
#include <catch2/catch.hpp>
#include <cstdint>
#include <cmath>
#include <cstring>

#include "backend/backend.h"
#include "core/error.h"
#include "backend/cpu/cpu_ops.h"
#include "support/backend_args.h"
#include "support/cpu_test_util.h"

using namespace kdtrain;
using namespace kdtrain::testutil;

TEST_CASE("cpu backend: factory, aligned zeroed memory, copies", "[cpu][backend]") {
  auto be = make_backend("cpu", 2);
  CHECK(be->name() == "cpu");
  CHECK(be->act_dtype() == DType::f32);
  const size_t bytes = 1000;
  auto* p = static_cast<unsigned char*>(be->alloc(bytes));
  CHECK(reinterpret_cast<uintptr_t>(p) % 256 == 0);
  for (size_t k = 0; k < bytes; ++k) REQUIRE(p[k] == 0);
  std::vector<float> host{1.f, 2.f, 3.f}, back(3, 0.f);
  be->to_device(p, host.data(), 12);
  be->copy(p + 12, p, 12);
  be->to_host(back.data(), p + 12, 12);
  CHECK(back == host);
  be->zero(p, bytes);
  for (size_t k = 0; k < bytes; ++k) REQUIRE(p[k] == 0);
  std::vector<float> conv(3, 0.f);
  be->convert_from_f32(p, host.data(), 3);
  be->convert_to_f32(conv.data(), p, 3);
  CHECK(conv == host);
  be->release(p);
}

TEST_CASE("cpu backend: attention through the interface matches the reference",
          "[cpu][backend][attention]") {
  auto be = make_backend("cpu", 0);
  const AffineBiasDivisor divisor = GENERATE(AffineBiasDivisor::sequence, AffineBiasDivisor::visible);
  INFO("divisor " << divisor);
  const AttentionFeatures features = features_of(AttentionVariant::affine, divisor);
  const int64_t B = 1, T = 5, H = 6, Hkv = 2, D = 6;
  const auto qkv = to_float(random_vec(B * T * (H + 2 * Hkv) * D, 101));
  const auto alpha = to_float(random_vec(B * T * H, 102, 0.2, 1.0));
  const auto ma = to_float(random_vec(H, 103, 0.3, 0.9));
  const auto dout = to_float(random_vec(B * T * H * D, 104));
  std::vector<float> out(B * T * H * D), lse(B * H * T), dqkv(qkv.size()), dalpha(alpha.size());
  AttentionForwardArgs f;
  f.shape = {B, T, H, Hkv, D};
  f.features = features_of(AttentionVariant::affine, divisor);
  f.scale = 0.4f;
  f.qkv = qkv.data();
  f.alpha = alpha.data();
  f.alpha_ma = ma.data();
  f.out = out.data();
  f.lse = lse.data();
  be->attention_forward(f);
  AttentionBackwardArgs bw = attention_backward_args(f);
  bw.dout = dout.data();
  bw.dqkv = dqkv.data();
  bw.dalpha = dalpha.data();
  be->attention_backward(bw);

  std::vector<float> rout(out.size()), rlse(lse.size()), rdq(dqkv.size()), rda(dalpha.size());
  cpu::attention_forward<float>(rout.data(), rlse.data(), qkv.data(), nullptr, alpha.data(),
                                ma.data(), {B, T, H, Hkv, D}, 0.4f, features);
  cpu::attention_backward<float>(rdq.data(), nullptr, rda.data(), dout.data(), qkv.data(),
                                 rlse.data(), nullptr, alpha.data(), ma.data(), {B, T, H, Hkv, D},
                                 0.4f, features);
  CHECK(out == rout);
  CHECK(lse == rlse);
  CHECK(dqkv == rdq);
  CHECK(dalpha == rda);

  AttentionForwardArgs bad = f;
  bad.alpha = nullptr;
  CHECK_THROWS_AS(be->attention_forward(bad), Error);
  bad = f;
  bad.shape.Hkv = 4;  // does not divide H
  CHECK_THROWS_AS(be->attention_forward(bad), Error);
}

TEST_CASE("cpu backend: loss_chunk and adamw through the interface", "[cpu][backend]") {
  auto be = make_backend("cpu", 0);
  const int64_t n = 3, V = 5;
  auto logits = to_float(random_vec(n * V, 105));
  const auto teacher = to_float(random_vec(n * V, 106));
  const std::vector<int32_t> targets{1, 4, 0};
  std::vector<float> ce(n), kd(n);
  LossChunkArgs a =
      testing::loss_chunk_args(n, V, logits.data(), teacher.data(), targets.data(), ce.data(), kd.data());
  a.kd_weight = 0.5f;
  a.temperature = 2.f;
  be->loss_chunk(a);
  for (int64_t r = 0; r < n; ++r) {
    CHECK(ce[r] > 0.f);
    CHECK(kd[r] >= 0.f);
    double rowsum = 0.0;  // each row of the gradient sums to 0
    for (int64_t k = 0; k < V; ++k) rowsum += logits[r * V + k];
    CHECK(std::fabs(rowsum) < 1e-6);
  }
  std::vector<float> w{1.f}, g{2.f}, m{0.f}, v{0.f};
  AdamWArgs o = testing::adamw_args(w.data(), w.data(), g.data(), m.data(), v.data(), 1);
  o.lr = 0.1f;
  be->adamw_update(o);
  CHECK(w[0] == Approx(0.9f).epsilon(1e-6));
  CHECK(be->sum_squares(g.data(), 1) == 4.0);
  std::vector<int32_t> bad_targets{1, 5, 0};
  a.targets = bad_targets.data();
  CHECK_THROWS_AS(be->loss_chunk(a), Error);
}
