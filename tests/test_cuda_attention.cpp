// CUDA attention (unfused, all five variants) against the CPU reference, forward
// and backward, GQA (H=6, Hkv=2) and MHA (H=Hkv=4), T in {1, 7, 33, 130},
// D in {6, 64, 128} (6: an odd small head dim the model fixtures use).
// Inputs are bf16-exact; the device keeps scores, statistics and accumulators in
// fp32 and rounds each bf16 output once. Bounds:
//   out, dqkv, dalpha (bf16):  NMSE < 5e-4, max |err| <= 2e-2 * max |ref|
//   lse (fp32):                NMSE < 1e-10, max |err| <= 1e-4 * max(|ref|, 1)
//   dsinks (fp32, +=):         NMSE < 1e-6,  max |err| <= 1e-3 * max |ref|
// plus NaN/inf checks, guards after every output, and a bit-identical backward rerun.
#include <cmath>

#include "backend/cpu/cpu_ops.h"
#include "test_cuda_util.h"

using namespace kdtrain;
using namespace kdtrain::cudatest;

namespace {

void run_case(Backend& be, AttentionVariant variant, int64_t B, int64_t T, int64_t H, int64_t Hkv,
              int64_t D) {
  const bool sink = has_sink(variant), affine = has_affine(variant);
  const int64_t W = (H + 2 * Hkv) * D;
  const uint32_t seed = static_cast<uint32_t>(T * 1000 + D * 10 + H + static_cast<int>(variant));
  const std::vector<float> qkv = random_values(B * T * W, seed, 0.f, 1.f);
  const std::vector<float> dout = random_values(B * T * H * D, seed + 1, 0.f, 1.f);
  const std::vector<float> sinks = random_values(H, seed + 2, 0.f, 1.f, false);
  std::vector<float> alpha = random_values(B * T * H, seed + 3, 0.f, 3.f);
  for (auto& a : alpha) a = round_bf16(1.f / (1.f + std::exp(-a)));
  std::vector<float> alpha_ma(H);
  for (int64_t h = 0; h < H; ++h) alpha_ma[h] = 0.3f + 0.4f * static_cast<float>(h) / H;
  const std::vector<float> dsinks0 = random_values(H, seed + 4, 0.f, 0.1f, false);
  const float scale = 1.f / std::sqrt(static_cast<float>(D));

  const cpu::AttnDims dims{B, T, H, Hkv, D};
  std::vector<float> ref_out(B * T * H * D), ref_lse(B * H * T), ref_dqkv(B * T * W),
      ref_dalpha(B * T * H), ref_dsinks = dsinks0;
  cpu::attention_forward(ref_out.data(), ref_lse.data(), qkv.data(), sinks.data(), alpha.data(),
                         alpha_ma.data(), dims, scale, variant);
  cpu::attention_backward(ref_dqkv.data(), ref_dsinks.data(), ref_dalpha.data(), dout.data(),
                          qkv.data(), ref_lse.data(), sinks.data(), alpha.data(), alpha_ma.data(),
                          dims, scale, variant);

  DevBuf d_qkv(be, B * T * W, DType::bf16), d_sinks(be, H, DType::f32),
      d_alpha(be, B * T * H, DType::bf16), d_ma(be, H, DType::f32),
      d_out(be, B * T * H * D, DType::bf16), d_lse(be, B * H * T, DType::f32),
      d_dout(be, B * T * H * D, DType::bf16), d_dqkv(be, B * T * W, DType::bf16),
      d_dsinks(be, H, DType::f32), d_dalpha(be, B * T * H, DType::bf16);
  d_qkv.upload(qkv);
  d_sinks.upload(sinks);
  d_alpha.upload(alpha);
  d_ma.upload(alpha_ma);
  d_dout.upload(dout);

  AttentionForwardArgs f;
  f.shape = AttentionShape{B, T, H, Hkv, D};
  f.variant = variant;
  f.scale = scale;
  f.qkv = d_qkv.get();
  f.sinks = sink ? d_sinks.f32() : nullptr;
  f.alpha = affine ? d_alpha.get() : nullptr;
  f.alpha_ma = affine ? d_ma.f32() : nullptr;
  f.out = d_out.get();
  f.lse = d_lse.f32();
  be.attention_forward(f);
  check_close("out", d_out.download(), ref_out, 5e-4, 2e-2);
  check_close("lse", d_lse.download(), ref_lse, 1e-10, 1e-4, 1.0);
  CHECK(d_out.guard_intact());
  CHECK(d_lse.guard_intact());

  AttentionBackwardArgs bw;
  bw.shape = f.shape;
  bw.variant = variant;
  bw.scale = scale;
  bw.qkv = f.qkv;
  bw.sinks = f.sinks;
  bw.alpha = f.alpha;
  bw.alpha_ma = f.alpha_ma;
  bw.out = d_out.get();
  bw.lse = d_lse.f32();
  bw.dout = d_dout.get();
  bw.dqkv = d_dqkv.get();
  bw.dsinks = sink ? d_dsinks.f32() : nullptr;
  bw.dalpha = affine ? d_dalpha.get() : nullptr;
  std::vector<unsigned char> first_dqkv, first_dsinks, first_dalpha;
  for (int run = 0; run < 2; ++run) {
    d_dsinks.upload(dsinks0);
    be.attention_backward(bw);
    if (run == 0) {
      first_dqkv = d_dqkv.bytes();
      first_dsinks = d_dsinks.bytes();
      first_dalpha = d_dalpha.bytes();
    }
  }
  CHECK(d_dqkv.bytes() == first_dqkv);
  CHECK(d_dsinks.bytes() == first_dsinks);
  CHECK(d_dalpha.bytes() == first_dalpha);
  check_close("dqkv", d_dqkv.download(), ref_dqkv, 5e-4, 2e-2);
  CHECK(d_dqkv.guard_intact());
  if (sink) {
    check_close("dsinks", d_dsinks.download(), ref_dsinks, 1e-6, 1e-3);
    CHECK(d_dsinks.guard_intact());
  }
  if (affine) {
    check_close("dalpha", d_dalpha.download(), ref_dalpha, 5e-4, 2e-2);
    CHECK(d_dalpha.guard_intact());
  }
}

}  // namespace

TEST_CASE("cuda attention matches the CPU reference for every variant", "[cuda][attention]") {
  KD_REQUIRE_CUDA_OR_SKIP();
  auto be = cuda_backend();
  struct Heads { int64_t H, Hkv; };
  for (AttentionVariant v : {AttentionVariant::baseline, AttentionVariant::sink,
                             AttentionVariant::affine, AttentionVariant::gated,
                             AttentionVariant::affine_gated}) {
    for (Heads hh : {Heads{6, 2}, Heads{4, 4}}) {
      for (int64_t T : {1, 7, 33, 130}) {
        for (int64_t D : {6, 64, 128}) {
          INFO("variant=" << static_cast<int>(v) << " H=" << hh.H << " Hkv=" << hh.Hkv
                          << " T=" << T << " D=" << D);
          run_case(*be, v, 2, T, hh.H, hh.Hkv, D);
        }
      }
    }
  }
}

TEST_CASE("cuda attention at a longer sequence (shared-memory row buffers)", "[cuda][attention]") {
  KD_REQUIRE_CUDA_OR_SKIP();
  auto be = cuda_backend();
  // T = 6200 needs > 48 KB of shared memory in the backward passes (the opt-in path).
  for (AttentionVariant v : {AttentionVariant::sink, AttentionVariant::affine}) {
    INFO("variant=" << static_cast<int>(v));
    run_case(*be, v, 1, 6200, 2, 1, 64);
  }
}
