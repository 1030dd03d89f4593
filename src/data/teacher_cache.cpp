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

constexpr char kMagic[8] = {'K', 'D', 'T', 'C', 'A', 'C', 'H', 'E'};
constexpr char kEndMagic[8] = {'K', 'D', 'T', 'C', 'E', 'N', 'D', '\0'};
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Header field offsets (bytes); the rest of the 256 bytes is zero.
struct HeaderOffsets {
  static constexpr size_t magic = 0, version = 8, value_type = 12, K = 16, V = 24, seq_len = 32,
                          windows = 40, data_fingerprint = 48, teacher_hash = 56,
                          record_bytes = 64;
};

template <typename T>
void put(uint8_t* base, size_t offset, T value) {
  std::memcpy(base + offset, &value, sizeof(T));
}
template <typename T>
T get(const uint8_t* base, size_t offset) {
  T value;
  std::memcpy(&value, base + offset, sizeof(T));
  return value;
}

int64_t value_bytes(CacheValueType t) { return t == CacheValueType::bf16 ? 2 : 4; }

std::vector<uint8_t> encode_header(const CacheHeader& h) {
  std::vector<uint8_t> b(kCacheHeaderBytes, 0);
  std::memcpy(b.data(), kMagic, 8);
  put<uint32_t>(b.data(), HeaderOffsets::version, kCacheVersion);
  put<uint32_t>(b.data(), HeaderOffsets::value_type, static_cast<uint32_t>(h.value_type));
  put<int64_t>(b.data(), HeaderOffsets::K, h.K);
  put<int64_t>(b.data(), HeaderOffsets::V, h.V);
  put<int64_t>(b.data(), HeaderOffsets::seq_len, h.seq_len);
  put<int64_t>(b.data(), HeaderOffsets::windows, h.windows);
  put<uint64_t>(b.data(), HeaderOffsets::data_fingerprint, h.data_fingerprint);
  put<uint64_t>(b.data(), HeaderOffsets::teacher_hash, h.teacher_hash);
  put<int64_t>(b.data(), HeaderOffsets::record_bytes, h.record_bytes());
  return b;
}

}  // namespace

CacheTail parse_cache_tail(const std::string& name) {
  if (name == "renormalize") return CacheTail::renormalize;
  if (name == "bucket") return CacheTail::bucket;
  fail("kd.cache_tail: unknown mode '", name, "' (choose renormalize or bucket)");
}

int64_t CacheHeader::record_bytes() const {
  const int64_t raw = seq_len * K * (4 + value_bytes(value_type)) + seq_len * 4;
  return (raw + 7) / 8 * 8;
}

void CacheChecksum::update(const void* bytes, size_t n) {
  const uint8_t* p = static_cast<const uint8_t*>(bytes);
  for (size_t i = 0; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h_ = (h_ ^ w) * 0x100000001b3ULL;
  }
  bytes_ += n;
}

uint64_t CacheChecksum::value() const { return (h_ ^ bytes_) * 0x100000001b3ULL; }

// ---------------------------------------------------------------- reader

TeacherCache::TeacherCache(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / kCacheFileName).string();
  KD_CHECK(std::filesystem::exists(path), "teacher cache ", dir, ": no ", kCacheFileName,
           " (write one with `kdtrain teacher-cache`)");
  file_ = io::MappedFile(path);
  const uint8_t* b = file_.data();
  const uint64_t size = file_.size();
  KD_CHECK(size >= static_cast<uint64_t>(kCacheHeaderBytes + kCacheTrailerBytes), path,
           ": teacher cache is ", size, " bytes, shorter than its header and trailer (truncated?)");
  KD_CHECK(std::memcmp(b, kMagic, 8) == 0, path, ": not a kdtrain teacher cache (bad magic)");
  const uint32_t version = get<uint32_t>(b, HeaderOffsets::version);
  KD_CHECK(version == kCacheVersion, path, ": teacher cache version ", version,
           " is not supported (expected ", kCacheVersion, ")");
  const uint32_t vt = get<uint32_t>(b, HeaderOffsets::value_type);
  KD_CHECK(vt <= 1, path, ": unknown value type ", vt);
  header_.value_type = static_cast<CacheValueType>(vt);
  header_.K = get<int64_t>(b, HeaderOffsets::K);
  header_.V = get<int64_t>(b, HeaderOffsets::V);
  header_.seq_len = get<int64_t>(b, HeaderOffsets::seq_len);
  header_.windows = get<int64_t>(b, HeaderOffsets::windows);
  header_.data_fingerprint = get<uint64_t>(b, HeaderOffsets::data_fingerprint);
  header_.teacher_hash = get<uint64_t>(b, HeaderOffsets::teacher_hash);
  KD_CHECK(header_.V > 0 && header_.K >= 1 && header_.K <= header_.V && header_.seq_len > 0 &&
               header_.windows >= 0,
           path, ": corrupt header (K ", header_.K, ", V ", header_.V, ", seq_len ",
           header_.seq_len, ", windows ", header_.windows, ")");
  const int64_t record = get<int64_t>(b, HeaderOffsets::record_bytes);
  KD_CHECK(record == header_.record_bytes(), path, ": corrupt header (record size ", record,
           ", expected ", header_.record_bytes(), ")");
  const uint64_t payload = static_cast<uint64_t>(kCacheHeaderBytes) +
                           static_cast<uint64_t>(header_.windows) * static_cast<uint64_t>(record);
  KD_CHECK(size == payload + kCacheTrailerBytes, path, ": teacher cache is ", size,
           " bytes but its header describes ", payload + kCacheTrailerBytes, " (", header_.windows,
           " windows of ", record, " bytes): ", size < payload + kCacheTrailerBytes
               ? "file is truncated" : "trailing bytes");
  KD_CHECK(std::memcmp(b + payload + 8, kEndMagic, 8) == 0, path, ": bad trailer magic");
  CacheChecksum sum;
  sum.update(b, payload);
  const uint64_t stored = get<uint64_t>(b, payload);
  KD_CHECK(sum.value() == stored, path, ": checksum mismatch (stored ", stored, ", computed ",
           sum.value(), "): the cache is corrupt; rebuild it with `kdtrain teacher-cache`");
}

void TeacherCache::require_match(const TokenDataset& data, int64_t vocab_size,
                                 const std::string& key) const {
  KD_CHECK(header_.V == vocab_size, key, ": ", path(), " holds teacher log-probs over ",
           header_.V, " ids but the student's vocab_size is ", vocab_size);
  KD_CHECK(header_.seq_len == data.seq_len(), key, ": ", path(), " was made with seq_len ",
           header_.seq_len, " but train.seq_len is ", data.seq_len());
  KD_CHECK(header_.windows == data.num_windows() && header_.data_fingerprint == data.fingerprint(),
           key, ": ", path(), " was made from different data (", header_.windows,
           " windows, fingerprint ", header_.data_fingerprint, "; data.train has ",
           data.num_windows(), " windows, fingerprint ", data.fingerprint(),
           "); rebuild it with `kdtrain teacher-cache` on these shards");
}

void TeacherCache::append_window(int64_t window, CachedRows& out) const {
  KD_CHECK(window >= 0 && window < header_.windows, path(), ": window ", window,
           " out of range [0, ", header_.windows, ")");
  const int64_t T = header_.seq_len, K = header_.K;
  const uint8_t* rec = file_.data() + kCacheHeaderBytes + window * header_.record_bytes();
  out.K = K;
  const size_t base = out.ids.size(), tail_base = out.log_tail.size();
  out.ids.resize(base + T * K);
  out.logp.resize(base + T * K);
  out.log_tail.resize(tail_base + T);
  std::memcpy(out.ids.data() + base, rec, T * K * 4);
  for (int64_t i = 0; i < T * K; ++i)
    KD_CHECK(out.ids[base + i] >= 0 && out.ids[base + i] < header_.V, path(), ": window ", window,
             " holds token id ", out.ids[base + i], " outside the vocabulary (", header_.V, ")");
  const uint8_t* values = rec + T * K * 4;
  if (header_.value_type == CacheValueType::bf16) {
    for (int64_t i = 0; i < T * K; ++i)
      out.logp[base + i] = io::bf16_to_float(get<uint16_t>(values, 2 * i));
  } else {
    std::memcpy(out.logp.data() + base, values, T * K * 4);
  }
  std::memcpy(out.log_tail.data() + tail_base, values + T * K * value_bytes(header_.value_type),
              T * 4);
}

// ---------------------------------------------------------------- writer

struct TeacherCacheWriter::Impl {
  std::string dir;
  CacheHeader header;
  io::AtomicFileWriter out;
  CacheChecksum sum;
  int64_t written = 0;
  std::vector<uint8_t> record;
  Impl(const std::string& d, const CacheHeader& h)
      : dir(d), header(h), out((std::filesystem::path(d) / kCacheFileName).string()) {}
};

TeacherCacheWriter::TeacherCacheWriter(const std::string& dir, const CacheHeader& header) {
  std::filesystem::create_directories(dir);
  impl_ = std::make_unique<Impl>(dir, header);
  const std::vector<uint8_t> h = encode_header(header);
  impl_->out.write(h.data(), h.size());
  impl_->sum.update(h.data(), h.size());
  impl_->record.assign(header.record_bytes(), 0);
}

TeacherCacheWriter::~TeacherCacheWriter() = default;

void TeacherCacheWriter::add_window(const int32_t* ids, const float* logp, const float* log_tail) {
  const CacheHeader& h = impl_->header;
  KD_CHECK(impl_->written < h.windows, impl_->out.temp_path(), ": more windows than the header's ",
           h.windows);
  const int64_t TK = h.seq_len * h.K;
  uint8_t* rec = impl_->record.data();
  std::memcpy(rec, ids, TK * 4);
  uint8_t* values = rec + TK * 4;
  if (h.value_type == CacheValueType::bf16) {
    for (int64_t i = 0; i < TK; ++i) put<uint16_t>(values, 2 * i, io::float_to_bf16(logp[i]));
  } else {
    std::memcpy(values, logp, TK * 4);
  }
  std::memcpy(values + TK * value_bytes(h.value_type), log_tail, h.seq_len * 4);
  impl_->out.write(rec, impl_->record.size());
  impl_->sum.update(rec, impl_->record.size());
  ++impl_->written;
}

void TeacherCacheWriter::commit() {
  KD_CHECK(impl_->written == impl_->header.windows, impl_->out.temp_path(), ": wrote ",
           impl_->written, " windows, header says ", impl_->header.windows);
  uint8_t trailer[kCacheTrailerBytes];
  put<uint64_t>(trailer, 0, impl_->sum.value());
  std::memcpy(trailer + 8, kEndMagic, 8);
  impl_->out.write(trailer, sizeof(trailer));
  impl_->out.commit();
}

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

namespace {

uint64_t teacher_hash(const LoadedModel& teacher) {
  CacheChecksum sum;
  std::string config = io::hf_config_json(teacher.model, teacher.attention).dump();
  config.resize((config.size() + 7) / 8 * 8, ' ');
  sum.update(config.data(), config.size());
  std::vector<float> params = teacher.params;
  if (params.size() % 2) params.push_back(0.f);
  sum.update(params.data(), params.size() * sizeof(float));
  return sum.value();
}

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
