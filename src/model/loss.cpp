#include "model/loss.h"

#include <algorithm>
#include <vector>

#include "core/error.h"

namespace kdtrain {

FusedLoss::~FusedLoss() {
  for (void* p : {logits_, teacher_logits_, static_cast<void*>(host_view_),
                  static_cast<void*>(targets_), static_cast<void*>(ce_), static_cast<void*>(kd_),
                  static_cast<void*>(soft_ce_)})
    if (p) backend_.release(p);
}

void FusedLoss::reserve(int64_t chunk, int64_t V, int64_t N) {
  const size_t a = dtype_size(backend_.act_dtype());
  if (chunk > chunk_ || V != V_) {
    for (void** p : {&logits_, &teacher_logits_, reinterpret_cast<void**>(&host_view_)})
      if (*p) backend_.release(*p), *p = nullptr;
    logits_ = backend_.alloc(chunk * V * a);
    teacher_logits_ = backend_.alloc(chunk * V * a);
    if (backend_.act_dtype() != DType::f32)
      host_view_ = static_cast<float*>(backend_.alloc(chunk * V * sizeof(float)));
    chunk_ = chunk;
    V_ = V;
  }
  if (N > N_) {
    for (void** p : {reinterpret_cast<void**>(&targets_), reinterpret_cast<void**>(&ce_),
                     reinterpret_cast<void**>(&kd_), reinterpret_cast<void**>(&soft_ce_)})
      if (*p) backend_.release(*p), *p = nullptr;
    targets_ = static_cast<int32_t*>(backend_.alloc(N * sizeof(int32_t)));
    ce_ = static_cast<float*>(backend_.alloc(N * sizeof(float)));
    kd_ = static_cast<float*>(backend_.alloc(N * sizeof(float)));
    soft_ce_ = static_cast<float*>(backend_.alloc(N * sizeof(float)));
    N_ = N;
  }
}

LossSums FusedLoss::run(Model& student, Model* teacher, const int32_t* targets,
                        const LossSettings& settings, float grad_scale, bool compute_grad,
                        const LogitsObserver& observer) {
  const int64_t N = student.tokens_in_batch(), V = student.config().vocab_size;
  if (!teacher)
    return run_chunks(student, nullptr, targets, settings, grad_scale, compute_grad, observer);
  KD_CHECK(teacher->config().vocab_size == V, "kd.teacher: vocabulary size ",
           teacher->config().vocab_size, " differs from the student's ", V);
  KD_CHECK(teacher->tokens_in_batch() == N, "kd.teacher: teacher ran on ",
           teacher->tokens_in_batch(), " tokens, student on ", N);
  const TeacherChunkFn online = [teacher](int64_t start, int64_t n, const void*, void* out) {
    teacher->head_logits(out, start, n);
  };
  return run_chunks(student, &online, targets, settings, grad_scale, compute_grad, observer);
}

LossSums FusedLoss::run(Model& student, const TeacherChunkFn& teacher, const int32_t* targets,
                        const LossSettings& settings, float grad_scale, bool compute_grad) {
  return run_chunks(student, &teacher, targets, settings, grad_scale, compute_grad, {});
}

LossSums FusedLoss::run_chunks(Model& student, const TeacherChunkFn* teacher,
                               const int32_t* targets, const LossSettings& settings,
                               float grad_scale, bool compute_grad,
                               const LogitsObserver& observer) {
  const int64_t N = student.tokens_in_batch(), V = student.config().vocab_size;
  for (int64_t i = 0; i < N; ++i)
    KD_CHECK(targets[i] >= 0 && targets[i] < V, "target id ", targets[i], " at position ", i,
             " is outside the vocabulary (", V, ")");
  const int64_t chunk = std::max<int64_t>(1, std::min(settings.chunk_tokens, N));
  reserve(chunk, V, N);
  backend_.to_device(targets_, targets, N * sizeof(int32_t));

  for (int64_t start = 0; start < N; start += chunk) {
    const int64_t n = std::min(chunk, N - start);
    student.head_logits(logits_, start, n);
    if (observer) {
      std::vector<float> host(n * V);
      if (backend_.act_dtype() == DType::f32) {
        backend_.to_host(host.data(), logits_, n * V * sizeof(float));
      } else {
        backend_.convert_to_f32(host_view_, logits_, n * V);
        backend_.to_host(host.data(), host_view_, n * V * sizeof(float));
      }
      observer(start, n, host.data());
    }
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
    if (compute_grad) student.head_backward(logits_, start, n);
  }

  std::vector<float> ce(N), kd(N), soft_ce(teacher ? N : 0);
  backend_.to_host(ce.data(), ce_, N * sizeof(float));
  backend_.to_host(kd.data(), kd_, N * sizeof(float));
  if (teacher) backend_.to_host(soft_ce.data(), soft_ce_, N * sizeof(float));
  LossSums sums;
  for (int64_t i = 0; i < N; ++i) {  // fixed order: deterministic
    sums.ce += ce[i];
    sums.kd += kd[i];
  }
  for (float v : soft_ce) sums.soft_ce += v;
  sums.tokens = N;
  return sums;
}

}  // namespace kdtrain
