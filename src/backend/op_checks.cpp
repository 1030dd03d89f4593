#include "backend/op_checks.h"

#include <vector>

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
struct Named {
  const char* name;
  const void* ptr;
};
// given() for each, in order: the first missing one is named.
void all_given(const char* op, std::initializer_list<Named> required) {
  for (const Named& n : required) given(op, n.name, n.ptr);
}
}  // namespace

void embedding_forward(const void* out, const int32_t* tokens, const void* wte, int64_t N,
                       int64_t C) {
  const char* op = "embedding_forward";
  rows_cols(op, N, C);
  if (N == 0) return;
  all_given(op, {{"out", out}, {"tokens", tokens}, {"wte", wte}});
}

void embedding_backward(const float* dwte, const void* dout, const int32_t* tokens, int64_t N,
                        int64_t C, int64_t V) {
  const char* op = "embedding_backward";
  rows_cols(op, N, C);
  positive(op, "V", V);
  if (N == 0) return;
  all_given(op, {{"dwte", dwte}, {"dout", dout}, {"tokens", tokens}});
}

namespace {
// Both RMSNorm forwards: sizes, eps, and (when there are rows) the buffers.
void rmsnorm_forward_common(const char* op, int64_t N, int64_t C, float eps,
                            std::initializer_list<Named> required) {
  rows_cols(op, N, C);
  KD_CHECK(eps >= 0.f, op, ": eps must be >= 0, got ", eps);
  if (N > 0) all_given(op, required);
}
}  // namespace

void rmsnorm_forward(const void* out, const float* rstd, const void* inp, const void* weight,
                     int64_t N, int64_t C, float eps) {
  rmsnorm_forward_common("rmsnorm_forward", N, C, eps,
                         {{"out", out}, {"rstd", rstd}, {"inp", inp}, {"weight", weight}});
}

void add_rmsnorm_forward(const void* sum_out, const void* out, const float* rstd, const void* a,
                         const void* b, const void* weight, int64_t N, int64_t C, float eps) {
  const char* op = "add_rmsnorm_forward";
  rmsnorm_forward_common(
      op, N, C, eps,
      {{"sum_out", sum_out}, {"out", out}, {"rstd", rstd}, {"a", a}, {"b", b}, {"weight", weight}});
  KD_CHECK(N == 0 || (out != sum_out && out != a && out != b), op,
           ": out must not alias the sum or its terms");
}

void rmsnorm_backward(const void* dinp, const float* dweight, const void* dout, const void* inp,
                      const void* weight, const float* rstd, int64_t N, int64_t C) {
  const char* op = "rmsnorm_backward";
  rows_cols(op, N, C);
  if (N == 0) return;
  KD_CHECK(dinp != nullptr || dweight != nullptr, op, ": neither dinp nor dweight given");
  all_given(op, {{"dout", dout}, {"inp", inp}, {"weight", weight}, {"rstd", rstd}});
}

namespace {
void matmul_common(const char* op, int64_t N, int64_t IC, int64_t OC,
                   std::initializer_list<Named> required) {
  non_negative(op, "N", N);
  positive(op, "IC", IC);
  positive(op, "OC", OC);
  if (N == 0) return;
  all_given(op, required);
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
  all_given(op, {{"x", x}, {"cos", cos}, {"sin", sin}});
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
  const AttentionFeatures f = a.features;
  KD_CHECK(!f.sink || a.sinks != nullptr, "attention (sink): sinks must be given");
  KD_CHECK(!f.affine || (a.alpha != nullptr && a.alpha_ma != nullptr),
           "attention (affine variants): alpha and alpha_ma must be given");
  if (s.B == 0 || s.T == 0) return;
  all_given(op, {{"qkv", a.qkv}, {"lse", a.lse}});
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
  KD_CHECK(!a.features.affine || a.dalpha != nullptr,
           "attention backward (affine): dalpha must be given");
  if (a.shape.B == 0 || a.shape.T == 0) return;
  all_given(op, {{"out", a.out}, {"dout", a.dout}, {"dqkv", a.dqkv}});
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
  all_given(op, {{"sums", sums}, {"x", x}});
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
  all_given(op, {{"logits", a.logits}, {"targets", a.targets}, {"ce", a.ce}, {"kd", a.kd}});
}

void sparse_kd_loss_chunk(const SparseKdChunkArgs& a) {
  const char* op = "sparse_kd_loss_chunk";
  KD_CHECK(a.temperature > 0.f, op, ": temperature must be positive, got ", a.temperature);
  non_negative(op, "n", a.n);
  positive(op, "V", a.V);
  KD_CHECK(a.K >= 1 && a.K <= a.V, op, ": K = ", a.K, " must be in [1, V = ", a.V, "]");
  KD_CHECK(a.kd_weight >= 0.f && a.kd_weight <= 1.f, op, ": kd_weight must be in [0, 1], got ",
           a.kd_weight);
  KD_CHECK(!(a.kd_loss == KdLoss::reverse_kl && a.tail == CacheTail::renormalize), op,
           ": reverse_kl needs kd.cache_tail=bucket (the renormalised teacher is 0 off its top k)");
  if (a.n == 0) return;
  all_given(op, {{"logits", a.logits}, {"targets", a.targets}, {"ids", a.ids}, {"logp", a.logp},
                 {"ce", a.ce}, {"kd", a.kd}});
  if (a.tail == CacheTail::bucket) given(op, "log_tail", a.log_tail);
}

void topk_log_probs(const TopkArgs& a) {
  const char* op = "topk_log_probs";
  non_negative(op, "n", a.n);
  positive(op, "V", a.V);
  KD_CHECK(a.K >= 1 && a.K <= a.V, op, ": K = ", a.K, " must be in [1, V = ", a.V, "]");
  if (a.n == 0) return;
  all_given(op, {{"logits", a.logits}, {"ids", a.ids}, {"logp", a.logp}, {"log_tail", a.log_tail}});
}

void sparse_teacher_ids(const int32_t* ids, int64_t n, int64_t K, int64_t V) {
  std::vector<int64_t> seen(static_cast<size_t>(V), -1);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t k = 0; k < K; ++k) {
      const int32_t id = ids[r * K + k];
      KD_CHECK(id >= 0 && id < V, "teacher cache: row ", r, " holds id ", id,
               " outside the vocabulary (", V, ")");
      KD_CHECK(seen[id] != r, "teacher cache: row ", r, " repeats id ", id);
      seen[id] = r;
    }
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
  all_given(op, {{"master", a.master}, {"grad", a.grad}, {"m", a.m}, {"v", a.v}});
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
