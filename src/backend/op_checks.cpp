#include "backend/op_checks.h"

#include "core/error.h"

namespace kdtrain::op_checks {

namespace {
void given(const char* op, const char* what, const void* p) {
  KD_CHECK(p != nullptr, op, ": ", what, " must be given");
}
void non_negative(const char* op, const char* what, int64_t v) {
  KD_CHECK(v >= 0, op, ": ", what, " must be >= 0, got ", v);
}
void positive(const char* op, const char* what, int64_t v) {
  KD_CHECK(v > 0, op, ": ", what, " must be >= 1, got ", v);
}
void rows_cols(const char* op, int64_t N, int64_t C) {
  non_negative(op, "N", N);
  positive(op, "C", C);
}
}  // namespace

void embedding_forward(const void* out, const int32_t* tokens, const void* wte, int64_t N,
                       int64_t C) {
  const char* op = "embedding_forward";
  rows_cols(op, N, C);
  if (N == 0) return;
  given(op, "out", out);
  given(op, "tokens", tokens);
  given(op, "wte", wte);
}

void embedding_backward(const float* dwte, const void* dout, const int32_t* tokens, int64_t N,
                        int64_t C, int64_t V) {
  const char* op = "embedding_backward";
  rows_cols(op, N, C);
  positive(op, "V", V);
  if (N == 0) return;
  given(op, "dwte", dwte);
  given(op, "dout", dout);
  given(op, "tokens", tokens);
}

void rmsnorm_forward(const void* out, const float* rstd, const void* inp, const void* weight,
                     int64_t N, int64_t C, float eps) {
  const char* op = "rmsnorm_forward";
  rows_cols(op, N, C);
  KD_CHECK(eps >= 0.f, op, ": eps must be >= 0, got ", eps);
  if (N == 0) return;
  given(op, "out", out);
  given(op, "rstd", rstd);
  given(op, "inp", inp);
  given(op, "weight", weight);
}

void add_rmsnorm_forward(const void* sum_out, const void* out, const float* rstd, const void* a,
                         const void* b, const void* weight, int64_t N, int64_t C, float eps) {
  const char* op = "add_rmsnorm_forward";
  rows_cols(op, N, C);
  KD_CHECK(eps >= 0.f, op, ": eps must be >= 0, got ", eps);
  if (N == 0) return;
  given(op, "sum_out", sum_out);
  given(op, "out", out);
  given(op, "rstd", rstd);
  given(op, "a", a);
  given(op, "b", b);
  given(op, "weight", weight);
  KD_CHECK(out != sum_out && out != a && out != b, op, ": out must not alias the sum or its terms");
}

void rmsnorm_backward(const void* dinp, const float* dweight, const void* dout, const void* inp,
                      const void* weight, const float* rstd, int64_t N, int64_t C) {
  const char* op = "rmsnorm_backward";
  rows_cols(op, N, C);
  if (N == 0) return;
  KD_CHECK(dinp != nullptr || dweight != nullptr, op, ": neither dinp nor dweight given");
  given(op, "dout", dout);
  given(op, "inp", inp);
  given(op, "weight", weight);
  given(op, "rstd", rstd);
}

namespace {
struct Named {
  const char* name;
  const void* ptr;
};
void matmul_common(const char* op, int64_t N, int64_t IC, int64_t OC,
                   std::initializer_list<Named> required) {
  non_negative(op, "N", N);
  positive(op, "IC", IC);
  positive(op, "OC", OC);
  if (N == 0) return;
  for (const Named& n : required) given(op, n.name, n.ptr);
}
}  // namespace

void matmul_forward(const void* out, const void* inp, const void* weight, int64_t N, int64_t IC,
                    int64_t OC) {
  matmul_common("matmul_forward", N, IC, OC, {{"out", out}, {"inp", inp}, {"weight", weight}});
}

void matmul_backward(const void* dout, const void* inp, const void* weight, int64_t N, int64_t IC,
                     int64_t OC) {
  matmul_common("matmul_backward", N, IC, OC, {{"dout", dout}, {"inp", inp}, {"weight", weight}});
}

void rope(const char* op, const void* x, const float* cos, const float* sin, int64_t B, int64_t T,
          int64_t n_heads, int64_t n_rot, int64_t D) {
  non_negative(op, "B", B);
  non_negative(op, "T", T);
  KD_CHECK(D > 0 && D % 2 == 0 && n_rot >= 0 && n_rot <= n_heads, "rope: head dim ", D,
           " must be even and n_rot ", n_rot, " <= n_heads ", n_heads);
  if (B == 0 || T == 0 || n_rot == 0) return;
  given(op, "x", x);
  given(op, "cos", cos);
  given(op, "sin", sin);
}

namespace {
template <typename Args>
void attention_common(const char* op, const Args& a) {
  const AttentionShape& s = a.shape;
  non_negative(op, "B", s.B);
  non_negative(op, "T", s.T);
  positive(op, "D", s.D);
  KD_CHECK(s.H > 0 && s.Hkv > 0 && s.H % s.Hkv == 0, "attention: n_kv_heads (", s.Hkv,
           ") must divide n_heads (", s.H, ")");
  KD_CHECK(a.scale > 0.f, op, ": scale must be positive, got ", a.scale);
  const AttentionVariant v = a.variant;
  KD_CHECK(!has_sink(v) || a.sinks != nullptr, "attention (sink): sinks must be given");
  KD_CHECK(!has_affine(v) || (a.alpha != nullptr && a.alpha_ma != nullptr),
           "attention (affine variants): alpha and alpha_ma must be given");
  if (s.B == 0 || s.T == 0) return;
  given(op, "qkv", a.qkv);
  given(op, "lse", a.lse);
}
}  // namespace

void attention_forward(const AttentionForwardArgs& a) {
  attention_common("attention_forward", a);
  if (a.shape.B == 0 || a.shape.T == 0) return;
  given("attention_forward", "out", a.out);
}

void attention_backward(const AttentionBackwardArgs& a) {
  const char* op = "attention_backward";
  attention_common(op, a);
  KD_CHECK(!has_affine(a.variant) || a.dalpha != nullptr,
           "attention backward (affine): dalpha must be given");
  if (a.shape.B == 0 || a.shape.T == 0) return;
  given(op, "out", a.out);
  given(op, "dout", a.dout);
  given(op, "dqkv", a.dqkv);
}

void elementwise(const char* op, int64_t n, std::initializer_list<const void*> pointers) {
  non_negative(op, "n", n);
  if (n == 0) return;
  for (const void* p : pointers) KD_CHECK(p != nullptr, op, ": a buffer is null");
}

void column_sum(const float* sums, const void* x, int64_t N, int64_t H) {
  const char* op = "column_sum_accumulate";
  non_negative(op, "N", N);
  non_negative(op, "H", H);
  if (N == 0 || H == 0) return;
  given(op, "sums", sums);
  given(op, "x", x);
}

void swiglu(const char* op, int64_t N, int64_t F, std::initializer_list<const void*> pointers) {
  non_negative(op, "N", N);
  positive(op, "F", F);
  elementwise(op, N, pointers);
}

void loss_chunk(const LossChunkArgs& a) {
  const char* op = "loss_chunk";
  KD_CHECK(a.temperature > 0.f, "loss_chunk: temperature must be positive, got ", a.temperature);
  non_negative(op, "n", a.n);
  positive(op, "V", a.V);
  KD_CHECK(a.kd_weight >= 0.f && a.kd_weight <= 1.f, op, ": kd_weight must be in [0, 1], got ",
           a.kd_weight);
  if (a.n == 0) return;
  given(op, "logits", a.logits);
  given(op, "targets", a.targets);
  given(op, "ce", a.ce);
  given(op, "kd", a.kd);
}

void sum_squares(const float* x, int64_t n) {
  non_negative("sum_squares", "n", n);
  if (n > 0) given("sum_squares", "x", x);
}

void adamw(const AdamWArgs& a) {
  const char* op = "adamw_update";
  KD_CHECK(a.step >= 1, "adamw_update: step must be >= 1, got ", a.step);
  non_negative(op, "n", a.n);
  if (a.n == 0) return;
  given(op, "master", a.master);
  given(op, "grad", a.grad);
  given(op, "m", a.m);
  given(op, "v", a.v);
  KD_CHECK(a.num_segments >= 0 && (a.num_segments == 0 || a.segments != nullptr), op,
           ": segments must be given when num_segments is ", a.num_segments);
  int64_t previous_end = 0;
  for (int64_t i = 0; i < a.num_segments; ++i) {
    const ParamSegment& s = a.segments[i];
    KD_CHECK(s.begin >= previous_end && s.begin <= s.end && s.end <= a.n, op, ": segment ", i,
             " [", s.begin, ", ", s.end, ") is not sorted, disjoint and inside [0, ", a.n, ")");
    previous_end = s.end;
  }
}

}  // namespace kdtrain::op_checks
