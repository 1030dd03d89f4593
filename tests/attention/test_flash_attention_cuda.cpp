// CUDA fused attention (kernels/flash_attention_*.cu) against the fp32 CPU reference
// (cpu_attention.cpp), every variant, head dims 64 and 128, MHA and GQA,
// T in {1, 7, 128, 1000, 2048}; and the Hopper wgmma forward and backward (D 128 and 64)
// where the device runs them.
//
// Tolerance rule (FlashAttention's): per output,
//   max |kernel - truth| <= 2 * max |lowp - truth| + atol,   atol = 2^-8 * max |truth|
// where truth = the fp32 reference on the unrounded fp32 inputs, and lowp = the same
// fp32 reference run on the bf16-rounded inputs with its bf16 outputs (out, dqkv,
// dalpha) rounded to bf16: the error any bf16 implementation is expected to have.
// The kernel runs on the bf16-rounded inputs. The floor atol (one bf16 step at the
// largest magnitude) covers outputs where lowp happens to be nearly exact; for dalpha it
// is one bf16 step of its cancelling terms (attention_terms.h), since at row 0 the truth
// is 0 (a bound of 0 failed on the first GPU run, at 1e-6..6e-6 of fp32 round-off).
// Also: no NaN/inf, outputs NaN until written, guard elements before and after every
// buffer unchanged, and forward and backward bit-identical over two runs.
//
// Without a CUDA build or a device the test case prints a visible skip.
#include <catch2/catch.hpp>

#ifndef KDTRAIN_HAVE_CUDA

TEST_CASE("cuda flash attention matches the fp32 reference", "[cuda][flash][attention]") {
  WARN("SKIPPED: no CUDA device (built without CUDA)");
}

#else

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/host_dtype.h"
#include "kernels/cuda_check.cuh"
#include "support/cuda_guarded_buffer.h"
#include "backend/cuda/cuda_probe.h"
#include "backend/cuda/attention_entry.cuh"
#include "kernels/attention/flash.cuh"
#include "oracles/attention_terms.h"

using namespace kdtrain;
using namespace kdtrain::cudatest;

namespace {

constexpr uint16_t kGuardHalf = 0x7fb3;   // bf16 NaN payload no kernel writes
constexpr uint32_t kGuardWord = 0x7fb3c3c3u;  // fp32 NaN payload no kernel writes

// host_dtype.h's rounding is CUDA's __float2bfloat16, bit for bit.
float bf16_value(uint16_t bits) { return bf16_bits_to_float(bits); }
float round_bf16(float f) { return bf16_value(bf16_bits(f)); }

float guard_float() {
  float f;
  std::memcpy(&f, &kGuardWord, sizeof f);
  return f;
}

std::vector<float> widen(const std::vector<uint16_t>& h, size_t n) {
  std::vector<float> v(n);
  for (size_t k = 0; k < n; ++k) v[k] = bf16_value(h[k]);
  return v;
}

// The FlashAttention rule for one output. `terms` (0 = none): the size of terms that
// cancel in the output, which sets the floor where the output itself is near 0.
void check_rule(const std::string& what, const std::vector<float>& got, const std::vector<float>& lowp,
                const std::vector<float>& truth, double terms = 0) {
  double err = 0, err_lowp = 0, scale = 0;
  bool finite = true;
  for (size_t k = 0; k < truth.size(); ++k) {
    finite = finite && std::isfinite(got[k]);
    err = std::max(err, std::fabs(static_cast<double>(got[k]) - truth[k]));
    err_lowp = std::max(err_lowp, std::fabs(static_cast<double>(lowp[k]) - truth[k]));
    scale = std::max(scale, std::fabs(static_cast<double>(truth[k])));
  }
  const double atol = std::ldexp(std::max(scale, terms), -8);
  INFO(what << ": kernel err " << err << ", bf16 reference err " << err_lowp << ", max |truth| "
            << scale << ", bound " << 2 * err_lowp + atol);
  CHECK(finite);
  CHECK(err <= 2 * err_lowp + atol);
}

struct Host {
  std::vector<float> qkv, sinks, alpha, alpha_ma, dout;
};

struct Outputs {
  std::vector<float> out, lse, dqkv, dsinks, dalpha;
};

Outputs reference(const Host& in, AttentionShape dims, AttentionFeatures v, bool round_outputs) {
  Outputs r;
  r.out.assign(static_cast<size_t>(dims.B * dims.T * dims.H * dims.D), 0.f);
  r.lse.assign(static_cast<size_t>(dims.B * dims.H * dims.T), 0.f);
  r.dqkv.assign(in.qkv.size(), 0.f);
  r.dsinks.assign(in.sinks.size(), 0.f);
  r.dalpha.assign(in.alpha.size(), 0.f);
  const float scale = 1.f / std::sqrt(static_cast<float>(dims.D));
  cpu::attention_forward<float>(r.out.data(), r.lse.data(), in.qkv.data(), in.sinks.data(),
                                in.alpha.data(), in.alpha_ma.data(), dims, scale, v);
  cpu::attention_backward<float>(r.dqkv.data(), r.dsinks.data(), r.dalpha.data(), in.dout.data(),
                                 in.qkv.data(), r.lse.data(), in.sinks.data(), in.alpha.data(),
                                 in.alpha_ma.data(), dims, scale, v);
  if (round_outputs)
    for (auto* vec : {&r.out, &r.dqkv, &r.dalpha})
      for (float& x : *vec) x = round_bf16(x);
  return r;
}

// forward: the forward's kernel (flash_forward_kernels.h); wgmma_backward: the backward
// runs its main kernel's sm_90a build (flash_backward_wgmma.cuh), not the mma.sync one.
using cuda::FlashForwardKernel;
void run_case(int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t D, AttentionVariant variant,
              FlashForwardKernel forward = FlashForwardKernel::mma_sync,
              AffineBiasDivisor divisor = AffineBiasDivisor::sequence, bool wgmma_backward = false) {
  INFO("variant " << static_cast<int>(variant) << " divisor " << divisor << " B=" << B << " T=" << T << " H=" << H
                  << " Hkv=" << Hkv << " D=" << D << " forward " << cuda::to_string(forward) << " wgmma bwd "
                  << wgmma_backward);
  const AttentionShape dims{B, T, H, Hkv, D};
  std::mt19937 rng(static_cast<uint32_t>(T * 131 + D * 7 + Hkv * 3 + static_cast<int>(variant)));
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_real_distribution<float> unit(0.f, 1.f);
  Host exact;
  exact.qkv.resize(static_cast<size_t>(B * T * (H + 2 * Hkv) * D));
  for (float& x : exact.qkv) x = normal(rng);
  exact.sinks.resize(static_cast<size_t>(H));
  for (float& x : exact.sinks) x = normal(rng);
  exact.alpha.resize(static_cast<size_t>(B * T * H));
  for (size_t k = 0; k < exact.alpha.size(); ++k) exact.alpha[k] = k % 5 == 0 ? 0.f : unit(rng);
  exact.alpha_ma.resize(static_cast<size_t>(H));
  for (float& x : exact.alpha_ma) x = 0.3f + 0.6f * unit(rng);
  exact.dout.resize(static_cast<size_t>(B * T * H * D));
  for (float& x : exact.dout) x = normal(rng);

  Host rounded = exact;
  for (auto* vec : {&rounded.qkv, &rounded.alpha, &rounded.dout})
    for (float& x : *vec) x = round_bf16(x);
  const Outputs truth = reference(exact, dims, features_of(variant, divisor), false);
  const Outputs lowp = reference(rounded, dims, features_of(variant, divisor), true);

  auto to_bits = [](const std::vector<float>& v) {
    std::vector<uint16_t> h(v.size());
    for (size_t k = 0; k < v.size(); ++k) h[k] = bf16_bits(v[k]);
    return h;
  };
  const size_t n_out = truth.out.size(), n_lse = truth.lse.size(), n_qkv = truth.dqkv.size();
  const size_t n_alpha = truth.dalpha.size();
  GuardedBuffer<uint16_t> qkv(n_qkv), alpha(n_alpha), dout(n_out), out(n_out), dqkv(n_qkv), dalpha(n_alpha);
  GuardedBuffer<float> sinks(static_cast<size_t>(H)), alpha_ma(static_cast<size_t>(H)), lse(n_lse),
      dsinks(static_cast<size_t>(H));
  qkv.put(to_bits(rounded.qkv), 0);
  alpha.put(to_bits(rounded.alpha), 0);
  dout.put(to_bits(rounded.dout), 0);
  sinks.put(rounded.sinks, 0.f);
  alpha_ma.put(rounded.alpha_ma, 0.f);

  AttentionForwardArgs fa;
  fa.shape = {B, T, H, Hkv, D};
  fa.features = features_of(variant, divisor);
  fa.scale = 1.f / std::sqrt(static_cast<float>(D));
  fa.qkv = qkv.ptr;
  fa.sinks = sinks.ptr;
  fa.alpha = alpha.ptr;
  fa.alpha_ma = alpha_ma.ptr;
  fa.out = out.ptr;
  fa.lse = lse.ptr;
  AttentionBackwardArgs ba = attention_backward_args(fa);
  ba.dout = dout.ptr;
  ba.dqkv = dqkv.ptr;
  ba.dsinks = dsinks.ptr;
  ba.dalpha = dalpha.ptr;

  // The launchers take the CUDA side's one params struct, built as CudaBackend builds it.
  const flash::AttentionParams fp = cuda::attention_params(fa), bp = cuda::attention_params(ba);
  const size_t fws_bytes = cuda::flash_attention_forward_workspace_bytes(fp);
  const size_t ws_bytes = cuda::flash_attention_backward_workspace_bytes(bp);
  GuardedBuffer<unsigned char> fws(std::max<size_t>(fws_bytes, 1)), ws(ws_bytes);
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  std::vector<uint16_t> out_h[2], dqkv_h[2], dalpha_h[2];
  std::vector<float> lse_h[2], dsinks_h[2];
  for (int run = 0; run < 2; ++run) {
    out.put(std::vector<uint16_t>(n_out, kGuardHalf), kGuardHalf);  // unwritten -> NaN
    lse.put(std::vector<float>(n_lse, guard_float()), guard_float());
    dqkv.put(std::vector<uint16_t>(n_qkv, kGuardHalf), kGuardHalf);
    dalpha.put(std::vector<uint16_t>(n_alpha, features_of(variant).affine ? kGuardHalf : uint16_t{0}), kGuardHalf);
    dsinks.put(std::vector<float>(static_cast<size_t>(H), 0.f), guard_float());
    cuda::flash_attention_forward(fp, fws.ptr, fws_bytes, stream, forward);
    cuda::flash_attention_backward(bp, ws.ptr, ws_bytes, stream, wgmma_backward);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    out_h[run] = out.get();
    lse_h[run] = lse.get();
    dqkv_h[run] = dqkv.get();
    dalpha_h[run] = dalpha.get();
    dsinks_h[run] = dsinks.get();
  }
  CUDA_CHECK(cudaStreamDestroy(stream));

  CHECK(guards_intact(out_h[0], n_out, kGuardHalf));
  CHECK(guards_intact(lse_h[0], n_lse, guard_float()));
  CHECK(guards_intact(dqkv_h[0], n_qkv, kGuardHalf));
  CHECK(guards_intact(dalpha_h[0], n_alpha, kGuardHalf));
  CHECK(guards_intact(dsinks_h[0], static_cast<size_t>(H), guard_float()));
  CHECK(out_h[0] == out_h[1]);
  CHECK(dqkv_h[0] == dqkv_h[1]);
  CHECK(dalpha_h[0] == dalpha_h[1]);
  CHECK(std::memcmp(lse_h[0].data(), lse_h[1].data(), n_lse * sizeof(float)) == 0);
  CHECK(std::memcmp(dsinks_h[0].data(), dsinks_h[1].data(), H * sizeof(float)) == 0);

  check_rule("out", widen(out_h[0], n_out), lowp.out, truth.out);
  lse_h[0].resize(n_lse);
  check_rule("lse", lse_h[0], lowp.lse, truth.lse);
  check_rule("dqkv", widen(dqkv_h[0], n_qkv), lowp.dqkv, truth.dqkv);
  if (features_of(variant).sink) {
    dsinks_h[0].resize(static_cast<size_t>(H));
    check_rule("dsinks", dsinks_h[0], lowp.dsinks, truth.dsinks);
  }
  if (features_of(variant).affine)
    check_rule("dalpha", widen(dalpha_h[0], n_alpha), lowp.dalpha, truth.dalpha,
               testing::dalpha_cancelling_terms(exact.qkv.data(), exact.dout.data(), dims, divisor));
}

}  // namespace

TEST_CASE("cuda flash attention matches the fp32 reference", "[cuda][flash][attention]") {
  if (!cuda::device_present()) {
    WARN("SKIPPED: no CUDA device");
    return;
  }
  for (AttentionVariant v : all_attention_variants())
    for (int64_t T : {1, 7, 128, 1000, 2048})
      for (int64_t D : {64, 128})
        for (int64_t Hkv : {4, 1}) {  // MHA, GQA (group 4)
          const int64_t B = T >= 1000 ? 1 : 2;
          run_case(B, T, 4, Hkv, D, v);
        }
  // The other affine bias divisor (the cases above use the default, `sequence`).
  for (int64_t T : {7, 1000})
    for (int64_t D : {64, 128}) run_case(T >= 1000 ? 1 : 2, T, 4, 1, D, AttentionVariant::affine, FlashForwardKernel::mma_sync,
                                      AffineBiasDivisor::visible);
}

// Whether the sm_90a (wgmma) kernels run here; says why not when they do not.
static bool wgmma_kernels_run_here(const char* which) {
  if (!cuda::device_present()) {
    WARN("SKIPPED: no CUDA device");
    return false;
  }
  if (cuda::flash_forward_kernel_here(AttentionForward::auto_select) == cuda::FlashForwardKernel::wgmma_sm90a)
    return true;
  WARN("SKIPPED: the wgmma " << which << " does not run here (needs compute capability 9.0 and a build with "
                                         "KDTRAIN_CUDA_SM90A)");
  return false;
}

TEST_CASE("cuda wgmma forward (sm_90a) matches the fp32 reference", "[cuda][flash][attention][sm90a]") {
  if (!wgmma_kernels_run_here("forward")) return;
  const FlashForwardKernel ws = FlashForwardKernel::wgmma_sm90a;  // auto's: the warp-specialised kernel
  for (AttentionVariant v : all_attention_variants())
    for (int64_t D : {128, 64}) {
      for (int64_t T : {1, 7, 1000, 2048}) run_case(T >= 1000 ? 1 : 2, T, 4, 2, D, v, ws);  // GQA, group 2
      // The lockstep kernel, which an H200 passed at every T (2026-11-28): one T, multiple tiles.
      run_case(1, 1000, 4, 2, D, v, FlashForwardKernel::wgmma_sm90a_lockstep);
    }
  for (int64_t T : {7, 1000})
    run_case(T >= 1000 ? 1 : 2, T, 4, 2, 128, AttentionVariant::affine, ws, AffineBiasDivisor::visible);
}

TEST_CASE("cuda wgmma backward (sm_90a) matches the fp32 reference", "[cuda][flash][attention][sm90a]") {
  if (!wgmma_kernels_run_here("backward")) return;
  const auto sequence = AffineBiasDivisor::sequence;
  for (AttentionVariant v : all_attention_variants())
    for (int64_t D : {128, 64})
      for (int64_t T : {1, 7, 1000, 2048})
        run_case(T >= 1000 ? 1 : 2, T, 4, 2, D, v, FlashForwardKernel::wgmma_sm90a, sequence, true);
  for (int64_t T : {7, 1000})
    run_case(T >= 1000 ? 1 : 2, T, 4, 2, 64, AttentionVariant::affine, FlashForwardKernel::wgmma_sm90a,
             AffineBiasDivisor::visible, true);
}

#endif  // KDTRAIN_HAVE_CUDA
