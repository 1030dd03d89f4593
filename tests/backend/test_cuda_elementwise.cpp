// CUDA elementwise ops and small reductions against the CPU reference:
// conversions, add/accumulate, alpha activation (both phi), sigmoid gate, SwiGLU,
// column sums. Inputs are bf16-exact; the device computes in fp32 and rounds each
// output once to bf16 (relative error <= u = 2^-8), so:
//   bf16 outputs:  check_bf16_rounded (test_cuda_util.h): NMSE < (1.05u)^2 = 1.7e-5,
//                  max |err| <= 1.05u * max |ref| = 4.1e-3 * max |ref|
//   conversions:   bf16 -> f32 exact; f32 -> bf16 equal to round-to-nearest-even
//   column sums (fp32 out, against a float64 reference): NMSE < 1e-10,
//   max |err| <= 1e-5 * max |ref|
// plus NaN/inf checks, outputs NaN until written, guards around every buffer and
// bit-identical reruns.
#include "backend/cpu/cpu_ops.h"
#include "support/test_cuda_util.h"

using namespace kdtrain;
using namespace kdtrain::cudatest;

namespace {
const int64_t kSizes[] = {1, 33, 1025, 70001};
}  // namespace

TEST_CASE("cuda conversions bf16 <-> f32", "[cuda][elementwise]") {
  KD_REQUIRE_CUDA_OR_SKIP();
  auto be = cuda_backend();
  if (be->act_dtype() != DType::bf16) return;  // self-check on CPU: identity copies
  for (int64_t n : kSizes) {
    INFO("n=" << n);
    const std::vector<float> x = random_values(n, 1 + n, 0.f, 3.f, false);
    DevBuf src(*be, n, DType::f32), mid(*be, n, DType::bf16), back(*be, n, DType::f32);
    src.upload(x);
    be->convert_from_f32(mid.get(), src.f32(), n);
    be->convert_to_f32(back.f32(), mid.get(), n);
    const std::vector<float> m = mid.download(), b = back.download();
    bool exact = true;
    for (int64_t i = 0; i < n; ++i) exact = exact && m[i] == round_bf16(x[i]) && b[i] == m[i];
    CHECK(exact);
    CHECK(mid.guard_intact());
    CHECK(back.guard_intact());
  }
}

TEST_CASE("cuda add and accumulate", "[cuda][elementwise]") {
  KD_REQUIRE_CUDA_OR_SKIP();
  auto be = cuda_backend();
  for (int64_t n : kSizes) {
    INFO("n=" << n);
    const std::vector<float> a = random_values(n, 2 + n, 0.f, 1.f), b = random_values(n, 3 + n, 0.f, 1.f);
    std::vector<float> ref(n);
    cpu::add(ref.data(), a.data(), b.data(), n);
    DevBuf da(*be, n, DType::bf16), db(*be, n, DType::bf16), out(*be, n, DType::bf16);
    da.upload(a);
    db.upload(b);
    be->add(out.get(), da.get(), db.get(), n);
    check_bf16_output("add", out, ref);
    be->add(da.get(), da.get(), db.get(), n);  // aliasing out == a
    check_bf16_output("add aliased", da, ref);
    std::vector<float> acc = a;
    cpu::accumulate(acc.data(), b.data(), n);
    db.upload(a);
    DevBuf src(*be, n, DType::bf16);
    src.upload(b);
    be->accumulate(db.get(), src.get(), n);
    check_bf16_output("accumulate", db, acc);
  }
}

TEST_CASE("cuda alpha activation forward and backward", "[cuda][elementwise][affine]") {
  KD_REQUIRE_CUDA_OR_SKIP();
  auto be = cuda_backend();
  for (AlphaActivation act : {AlphaActivation::linear_clip, AlphaActivation::sigmoid}) {
    for (int64_t n : kSizes) {
      INFO("n=" << n << " act=" << static_cast<int>(act));
      // std 6 puts values on both sides of the clip points +-5 and deep in the tails.
      const std::vector<float> z = random_values(n, 4 + n, 0.f, 6.f);
      const std::vector<float> g = random_values(n, 5 + n, 0.f, 1.f);
      std::vector<float> ref_a(n), ref_dz(n);
      cpu::alpha_activation_forward(ref_a.data(), z.data(), n, act);
      cpu::alpha_activation_backward(ref_dz.data(), g.data(), z.data(), n, act);
      DevBuf dz_in(*be, n, DType::bf16), dg(*be, n, DType::bf16), alpha(*be, n, DType::bf16),
          dz(*be, n, DType::bf16);
      dz_in.upload(z);
      dg.upload(g);
      be->alpha_activation_forward(alpha.get(), dz_in.get(), n, act);
      be->alpha_activation_backward(dz.get(), dg.get(), dz_in.get(), n, act);
      check_bf16_output("alpha", alpha, ref_a);
      check_bf16_output("dz", dz, ref_dz);
    }
  }
}

TEST_CASE("cuda sigmoid gate forward and backward", "[cuda][elementwise][gated]") {
  KD_REQUIRE_CUDA_OR_SKIP();
  auto be = cuda_backend();
  for (int64_t n : kSizes) {
    INFO("n=" << n);
    const std::vector<float> x = random_values(n, 6 + n, 0.f, 1.f);
    const std::vector<float> gate = random_values(n, 7 + n, 0.f, 4.f);
    const std::vector<float> g = random_values(n, 8 + n, 0.f, 1.f);
    std::vector<float> ref_out(n), ref_dx(n), ref_dg(n);
    cpu::sigmoid_gate_forward(ref_out.data(), x.data(), gate.data(), n);
    cpu::sigmoid_gate_backward(ref_dx.data(), ref_dg.data(), g.data(), x.data(), gate.data(), n);
    DevBuf dx_in(*be, n, DType::bf16), dgate_in(*be, n, DType::bf16), dgo(*be, n, DType::bf16),
        out(*be, n, DType::bf16), dx(*be, n, DType::bf16), dgate(*be, n, DType::bf16);
    dx_in.upload(x);
    dgate_in.upload(gate);
    dgo.upload(g);
    be->sigmoid_gate_forward(out.get(), dx_in.get(), dgate_in.get(), n);
    be->sigmoid_gate_backward(dx.get(), dgate.get(), dgo.get(), dx_in.get(), dgate_in.get(), n);
    check_bf16_output("gate out", out, ref_out);
    check_bf16_output("gate dinp", dx, ref_dx);
    check_bf16_output("gate dgate", dgate, ref_dg);
  }
}

TEST_CASE("cuda swiglu forward and backward", "[cuda][elementwise][mlp]") {
  KD_REQUIRE_CUDA_OR_SKIP();
  auto be = cuda_backend();
  for (int64_t N : {1, 33, 1025}) {
    for (int64_t F : {1, 44, 65, 259}) {
      INFO("N=" << N << " F=" << F);
      const std::vector<float> gu = random_values(N * 2 * F, 9 + N * F, 0.f, 2.f);
      const std::vector<float> g = random_values(N * F, 10 + N * F, 0.f, 1.f);
      std::vector<float> ref_out(N * F), ref_dgu(N * 2 * F);
      cpu::swiglu_forward(ref_out.data(), gu.data(), N, F);
      cpu::swiglu_backward(ref_dgu.data(), g.data(), gu.data(), N, F);
      DevBuf dgu_in(*be, N * 2 * F, DType::bf16), dgo(*be, N * F, DType::bf16),
          out(*be, N * F, DType::bf16), dgu(*be, N * 2 * F, DType::bf16);
      dgu_in.upload(gu);
      dgo.upload(g);
      be->swiglu_forward(out.get(), dgu_in.get(), N, F);
      be->swiglu_backward(dgu.get(), dgo.get(), dgu_in.get(), N, F);
      check_bf16_output("swiglu out", out, ref_out);
      check_bf16_output("swiglu dgate_up", dgu, ref_dgu);
    }
  }
}

TEST_CASE("cuda column sums accumulate deterministically", "[cuda][elementwise][affine]") {
  KD_REQUIRE_CUDA_OR_SKIP();
  auto be = cuda_backend();
  for (int64_t N : {1, 33, 1025, 20000}) {
    for (int64_t H : {1, 6, 33, 300}) {
      INFO("N=" << N << " H=" << H);
      const std::vector<float> x = random_values(N * H, 11 + N * H, 0.5f, 0.3f);
      const std::vector<float> s0 = random_values(H, 12 + H, 0.f, 1.f, false);
      // float64 truth: a long fp32 sum on the CPU would itself carry ~1e-5 error.
      std::vector<double> ref64(s0.begin(), s0.end()), x64(x.begin(), x.end());
      cpu::column_sum_accumulate(ref64.data(), x64.data(), N, H);
      const std::vector<float> ref(ref64.begin(), ref64.end());
      DevBuf dx(*be, N * H, DType::bf16), sums(*be, H, DType::f32);
      dx.upload(x);
      CHECK(reruns_bit_identical(sums, s0, [&] { be->column_sum_accumulate(sums.f32(), dx.get(), N, H); }));
      check_output("column sums", sums, ref, 1e-10, 1e-5);
    }
  }
}

TEST_CASE("cuda backend memory stats follow every allocation", "[cuda][memory]") {
  KD_REQUIRE_CUDA_OR_SKIP();
  auto be = cuda_backend();
  const MemoryStats before = be->memory_stats();
  void* a = be->alloc(100 << 20);  // 100 MiB
  void* b = be->alloc(1000);       // rounded up to a multiple of 256: 1024
  const MemoryStats during = be->memory_stats();
  CHECK(during.current_bytes == before.current_bytes + (100 << 20) + 1024);
  CHECK(during.peak_bytes >= during.current_bytes);
  be->release(a);
  const MemoryStats after = be->memory_stats();
  CHECK(after.current_bytes == during.current_bytes - (100 << 20));
  CHECK(after.peak_bytes == during.peak_bytes);
  be->release(b);
  if (cuda_available()) {  // device-wide readings exist on a device only
    CHECK(during.device_used_peak_bytes >= during.peak_bytes);
    CHECK(during.device_total_bytes >= during.device_used_peak_bytes);
  }
}

TEST_CASE("cuda backend memory: zeroed alloc, zero, overlapping copy", "[cuda][memory]") {
  KD_REQUIRE_CUDA_OR_SKIP();
  auto be = cuda_backend();
  const int64_t n = 1000;
  {
    void* raw = be->alloc(n * sizeof(float));  // alloc zeroes
    std::vector<float> host(n, 1.f);
    be->to_host(host.data(), raw, n * sizeof(float));
    be->release(raw);
    CHECK(host == std::vector<float>(n, 0.f));
  }
  DevBuf buf(*be, n, DType::f32);
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(i);
  buf.upload(x);
  // memmove semantics in both directions, as the CPU backend.
  be->copy(buf.f32() + 10, buf.f32(), 500 * sizeof(float));
  std::vector<float> want = x;
  std::copy(x.begin(), x.begin() + 500, want.begin() + 10);
  CHECK(buf.download() == want);
  be->copy(buf.f32(), buf.f32() + 10, 500 * sizeof(float));
  std::vector<float> want2 = want;
  std::copy(want.begin() + 10, want.begin() + 510, want2.begin());
  CHECK(buf.download() == want2);
  be->zero(buf.f32() + 100, 50 * sizeof(float));
  std::fill(want2.begin() + 100, want2.begin() + 150, 0.f);
  CHECK(buf.download() == want2);
  CHECK(buf.guard_intact());
}
