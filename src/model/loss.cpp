#include "model/loss.h"

#include <algorithm>
#include <vector>

#include "backend/op_checks.h"
#include "core/error.h"

namespace kdtrain {

LossSettings loss_settings(const KdConfig& kd) {
  LossSettings s;
  s.kd_loss = kd.loss;
  s.temperature = static_cast<float>(kd.temperature);
  s.kd_weight = static_cast<float>(kd.weight);
  s.chunk_tokens = kd.chunk_tokens;
  return s;
}

int64_t loss_chunk_tokens(int64_t requested, int64_t N, int64_t V, int64_t act_bytes,
                          int64_t buffers, int64_t free_bytes) {
  const int64_t rows_cap = std::max<int64_t>(1, N);
  if (requested > 0) return std::min(requested, rows_cap);
  if (free_bytes < 0) return std::min(kHostChunk, rows_cap);
  const int64_t row_bytes = std::max<int64_t>(1, buffers) * V * act_bytes;
  const int64_t fits = free_bytes / row_bytes;
  int64_t chunk = 256;
  for (int64_t c : {int64_t(8192), int64_t(4096)})
    if (c <= fits) {
      chunk = c;
      break;
    }
  if (chunk == 256 && fits > 256) chunk = fits / 256 * 256;
  return std::min(chunk, rows_cap);
}

FusedLoss::~FusedLoss() {
  for (void* p : {logits_, teacher_logits_, static_cast<void*>(host_view_),
                  static_cast<void*>(targets_), static_cast<void*>(ce_),
                  static_cast<void*>(sparse_ids_), static_cast<void*>(sparse_logp_)})
    if (p) backend_.release(p);
}

void FusedLoss::reserve(int64_t chunk, int64_t V, int64_t N, bool teacher, bool observer) {
  const size_t a = dtype_size(backend_.act_dtype());
  if (chunk > chunk_ || V != V_) {
    for (void** p : {&logits_, &teacher_logits_, reinterpret_cast<void**>(&host_view_)})
      if (*p) backend_.release(*p), *p = nullptr;
    logits_ = backend_.alloc(chunk * V * a);
    chunk_ = chunk;
    V_ = V;
  }
  // Allocated on first need only: a student-only run never holds teacher logits,
  // and the fp32 view exists only for observers on a bf16 backend.
  if (teacher && !teacher_logits_) teacher_logits_ = backend_.alloc(chunk_ * V * a);
  if (observer && !host_view_ && backend_.act_dtype() != DType::f32)
    host_view_ = static_cast<float*>(backend_.alloc(chunk_ * V * sizeof(float)));
  if (N > N_) {
    for (void** p : {reinterpret_cast<void**>(&targets_), reinterpret_cast<void**>(&ce_)})
      if (*p) backend_.release(*p), *p = nullptr;
    targets_ = static_cast<int32_t*>(backend_.alloc(N * sizeof(int32_t)));
    ce_ = static_cast<float*>(backend_.alloc(3 * N * sizeof(float)));
    N_ = N;
  }
  kd_ = ce_ + N;  // capacity 3 * N_ >= 3 * N: ce, kd, soft-CE stay adjacent for one read
  soft_ce_ = ce_ + 2 * N;
}

LossSums FusedLoss::run(Model& student, Model* teacher, const int32_t* targets,
                        const LossSettings& settings, float grad_scale, bool compute_grad,
                        const LogitsObserver& observer) {
  const int64_t N = student.tokens_in_batch(), V = student.config().vocab_size;
  if (!teacher)
    return run_chunks(student, nullptr, nullptr, targets, settings, grad_scale, compute_grad,
                      observer);
  KD_CHECK(teacher->config().vocab_size == V, "kd.teacher: vocabulary size ",
           teacher->config().vocab_size, " differs from the student's ", V);
  KD_CHECK(teacher->tokens_in_batch() == N, "kd.teacher: teacher ran on ",
           teacher->tokens_in_batch(), " tokens, student on ", N);
  const TeacherChunkFn online = [teacher](int64_t start, int64_t n, const void*, void* out) {
    teacher->head_logits(out, start, n);
  };
  return run_chunks(student, &online, nullptr, targets, settings, grad_scale, compute_grad,
                    observer);
}

LossSums FusedLoss::run(Model& student, const TeacherChunkFn& teacher, const int32_t* targets,
                        const LossSettings& settings, float grad_scale, bool compute_grad) {
  return run_chunks(student, &teacher, nullptr, targets, settings, grad_scale, compute_grad, {});
}

LossSums FusedLoss::run(Model& student, const SparseTeacher& teacher, const int32_t* targets,
                        const LossSettings& settings, float grad_scale, bool compute_grad) {
  const int64_t N = student.tokens_in_batch(), V = student.config().vocab_size;
  if (teacher.on_device) {
    rows_ids_ = teacher.ids;
    rows_logp_ = teacher.logp;
    rows_tail_ = teacher.log_tail;
  } else {
    op_checks::sparse_teacher_ids(teacher.ids, N, teacher.K, V);  // the device cannot throw
    upload_sparse(teacher, N);
  }
  return run_chunks(student, nullptr, &teacher, targets, settings, grad_scale, compute_grad, {});
}

// The rows of the whole micro-batch in one upload: N*K*8 + N*4 bytes (8.3 MiB at
// N = 16384, K = 64), against the (chunk, V) teacher logits the dense form held.
void FusedLoss::upload_sparse(const SparseTeacher& teacher, int64_t N) {
  const int64_t K = teacher.K;
  if (N * K > sparse_capacity_ || !sparse_ids_) {
    for (void** p : {reinterpret_cast<void**>(&sparse_ids_), reinterpret_cast<void**>(&sparse_logp_)})
      if (*p) backend_.release(*p), *p = nullptr;
    sparse_ids_ = static_cast<int32_t*>(backend_.alloc(N * K * sizeof(int32_t)));
    sparse_logp_ = static_cast<float*>(backend_.alloc((N * K + N) * sizeof(float)));
    sparse_capacity_ = N * K;
  }
  backend_.to_device(sparse_ids_, teacher.ids, N * K * sizeof(int32_t));
  backend_.to_device(sparse_logp_, teacher.logp, N * K * sizeof(float));
  if (teacher.log_tail) backend_.to_device(sparse_logp_ + N * K, teacher.log_tail, N * sizeof(float));
  rows_ids_ = sparse_ids_;
  rows_logp_ = sparse_logp_;
  rows_tail_ = sparse_logp_ + N * K;
}

// Hands chunk [start, start + n)'s student logits to the observer as fp32 on the host.
void FusedLoss::observe_chunk(int64_t start, int64_t n, int64_t V, const LogitsObserver& observer) {
  std::vector<float> host(n * V);
  if (backend_.act_dtype() == DType::f32) {
    backend_.to_host(host.data(), logits_, n * V * sizeof(float));
  } else {
    backend_.convert_to_f32(host_view_, logits_, n * V);
    backend_.to_host(host.data(), host_view_, n * V * sizeof(float));
  }
  observer(start, n, host.data());
}

// The KD of rows [start, start + n) from the uploaded top-K rows of a cached teacher.
void FusedLoss::sparse_chunk(const SparseTeacher& sparse, int64_t start, int64_t n, int64_t V,
                             const LossSettings& settings, float grad_scale, bool compute_grad) {
  const int64_t K = sparse.K;
  SparseKdChunkArgs args;
  args.n = n;
  args.V = V;
  args.K = K;
  args.logits = logits_;
  args.targets = targets_ + start;
  args.ids = rows_ids_ + start * K;
  args.logp = rows_logp_ + start * K;
  args.log_tail = rows_tail_ + start;
  args.tail = sparse.tail;
  args.ce = ce_ + start;
  args.kd = kd_ + start;
  args.soft_ce = soft_ce_ + start;
  args.kd_loss = settings.kd_loss;
  args.temperature = settings.temperature;
  args.kd_weight = settings.kd_weight;
  args.grad_scale = grad_scale;
  args.compute_grad = compute_grad;
  backend_.sparse_kd_loss_chunk(args);
}

// The loss of rows [start, start + n) against dense teacher logits (or the targets alone).
void FusedLoss::dense_chunk(const TeacherChunkFn* teacher, int64_t start, int64_t n, int64_t V,
                            const LossSettings& settings, float grad_scale, bool compute_grad) {
  if (teacher) (*teacher)(start, n, logits_, teacher_logits_);
  LossChunkArgs args;
  args.n = n;
  args.V = V;
  args.logits = logits_;
  args.teacher_logits = teacher ? teacher_logits_ : nullptr;
  args.targets = targets_ + start;
  args.ce = ce_ + start;
  args.kd = kd_ + start;
  args.soft_ce = teacher ? soft_ce_ + start : nullptr;
  args.kd_loss = settings.kd_loss;
  args.temperature = settings.temperature;
  args.kd_weight = teacher ? settings.kd_weight : 0.f;
  args.grad_scale = grad_scale;
  args.compute_grad = compute_grad;
  backend_.loss_chunk(args);
}

// ce, kd and (with a teacher) soft-CE are adjacent: one read brings them back,
// summed in a fixed order (deterministic).
LossSums FusedLoss::read_sums(int64_t N, bool has_teacher) {
  const int64_t terms = has_teacher ? 3 : 2;
  std::vector<float> ce_kd(static_cast<size_t>(terms * N));
  backend_.to_host(ce_kd.data(), ce_, terms * N * sizeof(float));
  LossSums sums;
  for (int64_t i = 0; i < N; ++i) {
    sums.ce += ce_kd[i];
    sums.kd += ce_kd[N + i];
  }
  for (int64_t i = 0; has_teacher && i < N; ++i) sums.soft_ce += ce_kd[2 * N + i];
  sums.tokens = N;
  return sums;
}

LossSums FusedLoss::run_chunks(Model& student, const TeacherChunkFn* teacher, const SparseTeacher* sparse,
                               const int32_t* targets, const LossSettings& settings, float grad_scale,
                               bool compute_grad, const LogitsObserver& observer) {
  const int64_t N = student.tokens_in_batch(), V = student.config().vocab_size;
  for (int64_t i = 0; i < N; ++i)
    KD_CHECK(targets[i] >= 0 && targets[i] < V, "target id ", targets[i], " at position ", i,
             " is outside the vocabulary (", V, ")");
  if (settings.chunk_tokens <= 0 && auto_chunk_ == 0) {
    // Sized once, against the memory left after the models and their activations.
    const int64_t buffers = teacher ? 2 : 1;
    auto_chunk_ = loss_chunk_tokens(0, N, V, dtype_size(backend_.act_dtype()), buffers,
                                    backend_.free_device_bytes());
  }
  const int64_t chunk =
      settings.chunk_tokens > 0 ? std::min(settings.chunk_tokens, N) : std::min(auto_chunk_, N);
  reserve(chunk, V, N, teacher != nullptr, static_cast<bool>(observer));
  backend_.to_device(targets_, targets, N * sizeof(int32_t));
  for (int64_t start = 0; start < N; start += chunk) {
    const int64_t n = std::min(chunk, N - start);
    student.head_logits(logits_, start, n);
    if (observer) observe_chunk(start, n, V, observer);
    if (sparse)
      sparse_chunk(*sparse, start, n, V, settings, grad_scale, compute_grad);
    else
      dense_chunk(teacher, start, n, V, settings, grad_scale, compute_grad);
    if (compute_grad) student.head_backward(logits_, start, n);
  }
  return read_sums(N, teacher || sparse);
}

}  // namespace kdtrain
