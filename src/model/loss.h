// The fused classifier (docs/distillation.md): loss = kd_weight*KD + (1-kd_weight)*CE over
// the tokens of the last forward, computed in chunks of `chunk_tokens` rows so
// that only (chunk, V) logits of the student and the teacher exist at once —
// never (B*T, V). With compute_grad, each chunk's dlogits is pushed straight
// back through the LM head into d(final hidden), ready for Model::backward().
#pragma once
#include <cstdint>
#include <functional>

#include "model/model.h"

namespace kdtrain {

struct LossSettings {
  KdLoss kd_loss = KdLoss::forward_kl;
  float temperature = 1.f;
  float kd_weight = 0.f;       // ignored when no teacher is given
  int64_t chunk_tokens = 0;    // rows per chunk; 0 = auto (loss_chunk_tokens)
};

// The settings of a run's distillation loss (kd.loss, kd.temperature, kd.weight,
// kd.chunk_tokens): what training, validation and `kdtrain bench` run.
LossSettings loss_settings(const KdConfig& kd);

// Rows of logits per loss chunk, decided here for every caller (the loss, `kdtrain
// info`, `kdtrain bench`): `requested` when > 0. Auto (0): kHostChunk rows where
// the backend's memory is host memory (free_bytes < 0); on a device the most of
// kDeviceChunks (8192, then 4096) whose student and teacher (chunk, V) logits
// (`buffers` of them, act_bytes each) fit in free_bytes, else the most multiple of
// 256 rows that fits (at least 256). Never more than N; never B*T*V unless that
// is what fits.
constexpr int64_t kHostChunk = 1024;
int64_t loss_chunk_tokens(int64_t requested, int64_t N, int64_t V, int64_t act_bytes,
                          int64_t buffers, int64_t free_bytes);

struct LossSums {
  double ce = 0.0;   // sum over tokens of per-token CE
  double kd = 0.0;   // sum over tokens of per-token KD (tau^2-scaled), 0 without teacher
  // Sum of the teacher soft cross-entropy -tau^2 sum p_T log p_S (= forward KL + teacher
  // entropy at tau = 1): the KD loss on a cross-entropy scale whatever kd.loss is, the
  // number comparable to the paper's "Loss" column (docs/evaluation.md); 0 without teacher.
  double soft_ce = 0.0;
  int64_t tokens = 0;
  LossSums& operator+=(const LossSums& o) {
    ce += o.ce;
    kd += o.kd;
    soft_ce += o.soft_ce;
    tokens += o.tokens;
    return *this;
  }
  double mixed(float kd_weight, bool has_teacher) const {  // mean of the optimised loss
    const double w = has_teacher ? kd_weight : 0.0;
    return tokens ? (w * kd + (1.0 - w) * ce) / tokens : 0.0;
  }
};

// Called with each chunk's student logits (fp32, host) before they are overwritten.
using LogitsObserver = std::function<void(int64_t start, int64_t n, const float* logits)>;

class FusedLoss {
 public:
  explicit FusedLoss(Backend& backend) : backend_(backend) {}
  ~FusedLoss();
  FusedLoss(const FusedLoss&) = delete;
  FusedLoss& operator=(const FusedLoss&) = delete;

  // Student (and teacher, may be null) must have run forward on the same tokens.
  // targets: host int32 (B*T). grad_scale multiplies the gradient (1/global tokens).
  LossSums run(Model& student, Model* teacher, const int32_t* targets,
               const LossSettings& settings, float grad_scale, bool compute_grad,
               const LogitsObserver& observer = {});

  // ---- teacher from a callback (the teacher logit cache, data/teacher_cache.h) ----
  // Before each chunk's loss, fills teacher_logits (n, V; backend memory, act dtype)
  // for rows [start, start + n); student_logits then holds the student's chunk logits.
  using TeacherChunkFn = std::function<void(int64_t start, int64_t n, const void* student_logits,
                                            void* teacher_logits)>;
  LossSums run(Model& student, const TeacherChunkFn& teacher, const int32_t* targets,
               const LossSettings& settings, float grad_scale, bool compute_grad);
  // ---- end teacher from a callback ----

  // ---- a cached sparse teacher (data/teacher_cache.h) ----
  // Host rows, one per student token: top-K ids (N, K), their log-probabilities
  // (N, K) and the log of the tail mass (N). Each chunk's KD runs in the backend's
  // sparse_kd_loss_chunk: no (n, V) teacher exists on the host or the device.
  struct SparseTeacher {
    int64_t K = 0;
    const int32_t* ids = nullptr;
    const float* logp = nullptr;
    const float* log_tail = nullptr;
    CacheTail tail = CacheTail::renormalize;
    // ids, logp and log_tail are backend memory, uploaded and checked by the
    // cache reader (data/teacher_cache_prefetch.h): no check or upload here.
    bool on_device = false;
  };
  LossSums run(Model& student, const SparseTeacher& teacher, const int32_t* targets,
               const LossSettings& settings, float grad_scale, bool compute_grad);

 private:
  LossSums run_chunks(Model& student, const TeacherChunkFn* teacher, const SparseTeacher* sparse,
                      const int32_t* targets, const LossSettings& settings, float grad_scale,
                      bool compute_grad, const LogitsObserver& observer);
  void observe_chunk(int64_t start, int64_t n, int64_t V, const LogitsObserver& observer);
  void sparse_chunk(const SparseTeacher& sparse, int64_t start, int64_t n, int64_t V,
                    const LossSettings& settings, float grad_scale, bool compute_grad);
  void dense_chunk(const TeacherChunkFn* teacher, int64_t start, int64_t n, int64_t V,
                   const LossSettings& settings, float grad_scale, bool compute_grad);
  LossSums read_sums(int64_t N, bool has_teacher);
  void upload_sparse(const SparseTeacher& teacher, int64_t N);
  void reserve(int64_t chunk, int64_t V, int64_t N, bool teacher, bool observer);
  Backend& backend_;
  void* logits_ = nullptr;          // (chunk, V)
  void* teacher_logits_ = nullptr;  // (chunk, V)
  float* host_view_ = nullptr;      // (chunk, V) fp32 conversion buffer for observers
  int32_t* targets_ = nullptr;      // (N)
  float* ce_ = nullptr;             // (N), then kd (N), then soft-CE (N): one read
  float* kd_ = nullptr;             // ce_ + N
  float* soft_ce_ = nullptr;        // ce_ + 2N
  int64_t chunk_ = 0, V_ = 0, N_ = 0;
  int64_t auto_chunk_ = 0;          // the auto chunk, decided at the first run
  int32_t* sparse_ids_ = nullptr;   // (N, K) of a sparse teacher
  float* sparse_logp_ = nullptr;    // (N, K), then log_tail (N)
  int64_t sparse_capacity_ = 0;     // rows x K the two hold
  // The sparse teacher's rows in backend memory for this run: the two above, or
  // the cache reader's upload.
  const int32_t* rows_ids_ = nullptr;
  const float* rows_logp_ = nullptr;
  const float* rows_tail_ = nullptr;
};

}  // namespace kdtrain
