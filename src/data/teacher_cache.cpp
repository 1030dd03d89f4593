#include "data/teacher_cache.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>

#include "backend/backend.h"
#include "core/error.h"
#include "data/shard_manifest.h"
#include "io/checkpoint_format.h"
#include "io/safetensors.h"
#include "model/loss.h"
#include "model/model.h"
#include "io/model_dir.h"

namespace kdtrain::data {

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

}  // namespace

// ---------------------------------------------------------------- maths

bool topk_log_probs(const float* z, int64_t V, int64_t K, int32_t* ids, float* logp,
                    float* log_tail) {
  double mx = kNegInf;
  bool finite = true;
  for (int64_t j = 0; j < V; ++j) {
    finite = finite && std::isfinite(z[j]);
    mx = std::max(mx, static_cast<double>(z[j]));
  }
  if (!finite) return false;
  double sum = 0.0;
  for (int64_t j = 0; j < V; ++j) sum += std::exp(static_cast<double>(z[j]) - mx);
  const double lse = mx + std::log(sum);
  thread_local std::vector<int32_t> order;
  order.resize(V);
  std::iota(order.begin(), order.end(), 0);
  auto before = [z](int32_t a, int32_t b) { return z[a] > z[b] || (z[a] == z[b] && a < b); };
  if (K < V) std::nth_element(order.begin(), order.begin() + K, order.end(), before);
  std::sort(order.begin(), order.begin() + K, before);
  double rest = 0.0;
  for (int64_t j = K; j < V; ++j) rest += std::exp(static_cast<double>(z[order[j]]) - mx);
  for (int64_t k = 0; k < K; ++k) {
    ids[k] = order[k];
    logp[k] = static_cast<float>(static_cast<double>(z[order[k]]) - lse);
  }
  *log_tail = rest > 0.0 ? static_cast<float>(std::log(rest) + mx - lse)
                         : -std::numeric_limits<float>::infinity();
  return true;
}

namespace {

double logsumexp(const double* x, int64_t n) {
  double mx = kNegInf;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i]);
  if (mx == kNegInf) return kNegInf;
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += std::exp(x[i] - mx);
  return mx + std::log(s);
}

}  // namespace

template <typename T>
void dense_cached_teacher(const int32_t* ids, const float* logp, const float* log_tail, int64_t n,
                          int64_t K, int64_t V, CacheTail tail, double tau, const T* student,
                          T* out) {
  KD_CHECK(tau > 0.0, "teacher cache: temperature must be positive");
  KD_CHECK(tail == CacheTail::renormalize || student != nullptr,
           "teacher cache: bucket mode needs the student logits");
  {  // Validate first: exceptions must not escape the parallel region.
    std::vector<int64_t> seen(V, -1);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t k = 0; k < K; ++k) {
        const int32_t id = ids[r * K + k];
        KD_CHECK(id >= 0 && id < V, "teacher cache: row ", r, " holds id ", id,
                 " outside the vocabulary (", V, ")");
        KD_CHECK(seen[id] != r, "teacher cache: row ", r, " repeats id ", id);
        seen[id] = r;
      }
  }
#pragma omp parallel
  {
    std::vector<char> in_topk(V);
    std::vector<double> a(K + 1), ls(V);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < n; ++r) {
      const int32_t* id = ids + r * K;
      const float* lp = logp + r * K;
      T* t = out + r * V;
      std::fill(in_topk.begin(), in_topk.end(), 0);
      for (int64_t k = 0; k < K; ++k) in_topk[id[k]] = 1;
      if (tail == CacheTail::renormalize) {
        // softmax(t / tau) in the loss = p_T^(1/tau) renormalised over the K ids.
        std::fill(t, t + V, static_cast<T>(-INFINITY));
        for (int64_t k = 0; k < K; ++k) t[id[k]] = static_cast<T>(lp[k]);
        continue;
      }
      // Coarse teacher over K + 1 buckets at temperature tau.
      for (int64_t k = 0; k < K; ++k) a[k] = static_cast<double>(lp[k]) / tau;
      a[K] = static_cast<double>(log_tail[r]) / tau;
      const double lse_a = logsumexp(a.data(), K + 1);
      const double log_q_tail = a[K] - lse_a;
      // Student log softmax(s / tau) and the log of its tail bucket.
      const T* s = student + r * V;
      for (int64_t j = 0; j < V; ++j) ls[j] = static_cast<double>(s[j]) / tau;
      const double lse_s = logsumexp(ls.data(), V);
      double mx = kNegInf;
      for (int64_t j = 0; j < V; ++j) {
        ls[j] -= lse_s;
        if (!in_topk[j]) mx = std::max(mx, ls[j]);
      }
      double tail_sum = 0.0;
      for (int64_t j = 0; j < V; ++j)
        if (!in_topk[j]) tail_sum += std::exp(ls[j] - mx);
      const double log_p_tail = mx + std::log(tail_sum);  // -inf when K = V
      const double uniform = -std::log(static_cast<double>(std::max<int64_t>(V - K, 1)));
      for (int64_t j = 0; j < V; ++j) {
        if (in_topk[j]) continue;
        double v = log_q_tail + (std::isfinite(log_p_tail) ? ls[j] - log_p_tail : uniform);
        t[j] = static_cast<T>(tau * v);
      }
      for (int64_t k = 0; k < K; ++k) t[id[k]] = static_cast<T>(tau * (a[k] - lse_a));
    }
  }
}

template void dense_cached_teacher<float>(const int32_t*, const float*, const float*, int64_t,
                                          int64_t, int64_t, CacheTail, double, const float*,
                                          float*);
template void dense_cached_teacher<double>(const int32_t*, const float*, const float*, int64_t,
                                           int64_t, int64_t, CacheTail, double, const double*,
                                           double*);

void bucket_teacher_entropy(const float* logp, const float* log_tail, int64_t n, int64_t K,
                            double tau, double* out) {
  std::vector<double> a(K + 1);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t k = 0; k < K; ++k) a[k] = static_cast<double>(logp[r * K + k]) / tau;
    a[K] = static_cast<double>(log_tail[r]) / tau;
    const double lse = logsumexp(a.data(), K + 1);
    double h = 0.0;
    for (int64_t m = 0; m <= K; ++m) {
      const double lq = a[m] - lse;
      if (std::isfinite(lq)) h -= std::exp(lq) * lq;
    }
    out[r] = tau * tau * h;
  }
}

void check_cached_loss_kind(KdLoss kd_loss, CacheTail tail) {
  KD_CHECK(!(tail == CacheTail::renormalize && kd_loss == KdLoss::reverse_kl),
           "kd.loss=reverse_kl with kd.teacher_cache needs kd.cache_tail=bucket: the "
           "renormalised top-k teacher gives zero probability to the student's other tokens");
}

LossSums run_cached_loss(FusedLoss& loss, Model& student, const CachedRows& rows, CacheTail tail,
                         const int32_t* targets, const LossSettings& settings, float grad_scale,
                         bool compute_grad) {
  const int64_t N = student.tokens_in_batch(), V = student.config().vocab_size, K = rows.K;
  KD_CHECK(static_cast<int64_t>(rows.log_tail.size()) == N &&
               static_cast<int64_t>(rows.ids.size()) == N * K,
           "kd.teacher_cache: ", rows.log_tail.size(), " cached rows for ", N, " student tokens");
  check_cached_loss_kind(settings.kd_loss, tail);
  Backend& backend = student.backend();
  const bool f32 = backend.act_dtype() == DType::f32;
  std::vector<float> host_teacher, host_student;
  float* scratch = nullptr;  // (chunk, V) fp32 in backend memory, bf16 backends only
  int64_t scratch_rows = 0;
  const FusedLoss::TeacherChunkFn fn = [&](int64_t start, int64_t n, const void* student_logits,
                                           void* teacher_logits) {
    if (!f32 && n > scratch_rows) {
      if (scratch) backend.release(scratch);
      scratch = static_cast<float*>(backend.alloc(n * V * sizeof(float)));
      scratch_rows = n;
    }
    host_teacher.resize(n * V);
    const float* s = nullptr;
    if (tail == CacheTail::bucket) {
      host_student.resize(n * V);
      if (f32) {
        backend.to_host(host_student.data(), student_logits, n * V * sizeof(float));
      } else {
        backend.convert_to_f32(scratch, student_logits, n * V);
        backend.to_host(host_student.data(), scratch, n * V * sizeof(float));
      }
      s = host_student.data();
    }
    dense_cached_teacher<float>(rows.ids.data() + start * K, rows.logp.data() + start * K,
                                rows.log_tail.data() + start, n, K, V, tail, settings.temperature,
                                s, host_teacher.data());
    if (f32) {
      backend.to_device(teacher_logits, host_teacher.data(), n * V * sizeof(float));
    } else {
      backend.to_device(scratch, host_teacher.data(), n * V * sizeof(float));
      backend.convert_from_f32(teacher_logits, scratch, n * V);
    }
  };
  LossSettings run_settings = settings;
  const bool bucket_soft_ce = tail == CacheTail::bucket && settings.kd_loss == KdLoss::soft_ce;
  if (bucket_soft_ce) run_settings.kd_loss = KdLoss::forward_kl;
  LossSums sums;
  try {
    sums = loss.run(student, fn, targets, run_settings, grad_scale, compute_grad);
  } catch (...) {
    if (scratch) backend.release(scratch);
    throw;
  }
  if (scratch) backend.release(scratch);
  if (bucket_soft_ce) {
    std::vector<double> h(N);
    bucket_teacher_entropy(rows.logp.data(), rows.log_tail.data(), N, K, settings.temperature,
                           h.data());
    for (double v : h) sums.kd += v;
  }
  return sums;
}

// ---------------------------------------------------------------- builder

uint64_t teacher_hash(const LoadedModel& teacher) {
  CacheChecksum sum;
  std::string config = io::hf_config_json(teacher.model, teacher.attention).dump();
  config.resize((config.size() + 7) / 8 * 8, ' ');
  sum.update(config.data(), config.size());
  // The parameters zero-padded to whole 8-byte words, without copying them.
  const std::vector<float>& params = teacher.params;
  const size_t pairs = params.size() / 2;
  sum.update(params.data(), pairs * 2 * sizeof(float));
  if (params.size() % 2) {
    const float last[2] = {params.back(), 0.f};
    sum.update(last, sizeof last);
  }
  return sum.value();
}

namespace {

// <out>/cache.json: what the cache was made from, for people (the binary header
// is what the trainer checks).
void write_cache_info(const TeacherCacheOptions& o, const CacheHeader& h) {
  nlohmann::json doc;
  doc["format"] = "kdtrain.teacher_cache/1";
  doc["file"] = kCacheFileName;
  doc["teacher"] = o.teacher;
  doc["data"] = o.data;
  doc["seq_len"] = h.seq_len;
  doc["top_k"] = h.K;
  doc["vocab_size"] = h.V;
  doc["windows"] = h.windows;
  doc["value_dtype"] = h.value_type == CacheValueType::bf16 ? "bf16" : "f32";
  doc["data_fingerprint"] = h.data_fingerprint;
  doc["teacher_hash"] = h.teacher_hash;
  doc["record_bytes"] = h.record_bytes();
  const std::string text = doc.dump(2) + "\n";
  io::AtomicFileWriter out((std::filesystem::path(o.out) / "cache.json").string());
  out.write(text.data(), text.size());
  out.commit();
}

}  // namespace

CacheHeader build_teacher_cache(const TeacherCacheOptions& o) {
  KD_CHECK(o.seq_len >= 1, "--seq-len must be at least 1");
  KD_CHECK(o.batch_size >= 1, "--batch-size must be at least 1");
  KD_CHECK(o.chunk_tokens >= 1, "chunk_tokens must be at least 1");
  LoadedModel teacher = load_model_dir(o.teacher);
  const int64_t V = teacher.model.vocab_size, T = o.seq_len;
  KD_CHECK(o.top_k >= 1 && o.top_k <= V, "--top-k must be in [1, ", V, "] (the teacher's vocab), got ",
           o.top_k);
  check_manifest_vocab(o.data, V, "--data");
  TokenDataset data(o.data, T, V);
  CacheHeader header;
  header.value_type = o.value_type;
  header.K = o.top_k;
  header.V = V;
  header.seq_len = T;
  header.windows = data.num_windows();
  header.data_fingerprint = data.fingerprint();
  header.teacher_hash = teacher_hash(teacher);

  auto backend = make_backend(o.device, o.threads);
  Model model(teacher.model, teacher.attention, *backend, false);
  model.set_params(teacher.params);
  teacher.params.clear();
  teacher.params.shrink_to_fit();

  const int64_t K = o.top_k, B = o.batch_size;
  const int64_t chunk = std::min(o.chunk_tokens, B * T);
  const size_t act = dtype_size(backend->act_dtype());
  void* logits = backend->alloc(chunk * V * act);
  float* logits_f32 = backend->act_dtype() == DType::f32
                          ? nullptr
                          : static_cast<float*>(backend->alloc(chunk * V * sizeof(float)));
  std::vector<float> host(chunk * V);
  std::vector<int32_t> inputs(B * T), targets(B * T), ids(B * T * K);
  std::vector<float> logp(B * T * K), tail(B * T);
  TeacherCacheWriter writer(o.out, header);
  const auto started = std::chrono::steady_clock::now();
  auto last = started;
  try {
    for (int64_t w0 = 0; w0 < header.windows; w0 += B) {
      const int64_t b = std::min(B, header.windows - w0);
      std::vector<int64_t> windows(b);
      std::iota(windows.begin(), windows.end(), w0);
      data.fill_batch(windows, inputs.data(), targets.data());
      model.forward(inputs.data(), b, T, false);
      for (int64_t start = 0; start < b * T; start += chunk) {
        const int64_t n = std::min(chunk, b * T - start);
        model.head_logits(logits, start, n);
        if (logits_f32) {
          backend->convert_to_f32(logits_f32, logits, n * V);
          backend->to_host(host.data(), logits_f32, n * V * sizeof(float));
        } else {
          backend->to_host(host.data(), logits, n * V * sizeof(float));
        }
        int64_t bad = 0;
#pragma omp parallel for schedule(static) reduction(+ : bad)
        for (int64_t r = 0; r < n; ++r)
          bad += !topk_log_probs(host.data() + r * V, V, K, ids.data() + (start + r) * K,
                                 logp.data() + (start + r) * K, tail.data() + start + r);
        KD_CHECK(bad == 0, o.teacher, ": the teacher produced non-finite logits on ", bad,
                 " positions of windows ", w0, "..", w0 + b - 1);
      }
      for (int64_t i = 0; i < b; ++i)
        writer.add_window(ids.data() + i * T * K, logp.data() + i * T * K, tail.data() + i * T);
      const auto now = std::chrono::steady_clock::now();
      const double elapsed = std::chrono::duration<double>(now - started).count();
      if (o.progress && (std::chrono::duration<double>(now - last).count() > 5.0 ||
                         w0 + b == header.windows)) {
        last = now;
        spdlog::info("teacher-cache: {}/{} windows, {:.0f} tokens/s, {:.0f}s", w0 + b,
                     header.windows, (w0 + b) * T / std::max(elapsed, 1e-9), elapsed);
      }
    }
    writer.commit();
    write_cache_info(o, header);
  } catch (...) {
    backend->release(logits);
    if (logits_f32) backend->release(logits_f32);
    throw;
  }
  backend->release(logits);
  if (logits_f32) backend->release(logits_f32);
  return header;
}

}  // namespace kdtrain::data
