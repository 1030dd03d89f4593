#include "cli/teacher_cache_builder.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>

#include "backend/backend.h"
#include "core/error.h"
#include "data/shard_manifest.h"
#include "io/file_util.h"
#include "io/model_dir.h"
#include "io/output_dir.h"
#include "model/model.h"

namespace kdtrain::cli {

using data::CacheHeader;
using data::CacheValueType;

bool topk_log_probs(const float* z, int64_t V, int64_t K, int32_t* ids, float* logp,
                    float* log_tail) {
  double mx = -std::numeric_limits<double>::infinity();
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

constexpr const char* kCacheInfoFile = "cache.json";

// <out>/cache.json: what the cache was made from, for people (the binary header
// is what the trainer checks).
void write_cache_info(const TeacherCacheOptions& o, const CacheHeader& h) {
  nlohmann::json doc;
  doc["format"] = "kdtrain.teacher_cache/1";
  doc["file"] = data::kCacheFileName;
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
  io::AtomicFileWriter out((std::filesystem::path(o.out) / kCacheInfoFile).string());
  out.write(text.data(), text.size());
  out.commit();
}

}  // namespace

CacheHeader build_teacher_cache(const TeacherCacheOptions& o) {
  KD_CHECK(o.seq_len >= 1, "--seq-len must be at least 1");
  KD_CHECK(o.batch_size >= 1, "--batch-size must be at least 1");
  KD_CHECK(o.chunk_tokens >= 1, "chunk_tokens must be at least 1");
  io::claim_output_dir(o.out, {"--out", {data::kCacheFileName, kCacheInfoFile}, o.force});
  LoadedModel teacher = load_model_dir(o.teacher);
  const int64_t V = teacher.model.vocab_size, T = o.seq_len;
  KD_CHECK(teacher.model.max_position_embeddings >= T, "--teacher ", o.teacher, " has max_position_embeddings ",
           teacher.model.max_position_embeddings, ", fewer than --seq-len ", T, "; the teacher cannot score windows that long");
  KD_CHECK(o.top_k >= 1 && o.top_k <= V, "--top-k must be in [1, ", V, "] (the teacher's vocab), got ",
           o.top_k);
  data::check_manifest_vocab(o.data, V, "--data");
  data::TokenDataset dataset(o.data, T, V);
  CacheHeader header;
  header.value_type = o.value_type;
  header.K = o.top_k;
  header.V = V;
  header.seq_len = T;
  header.windows = dataset.num_windows();
  header.data_fingerprint = dataset.fingerprint();
  header.teacher_hash = data::teacher_hash(teacher);

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
  data::TeacherCacheWriter writer(o.out, header);
  const auto started = std::chrono::steady_clock::now();
  auto last = started;
  try {
    for (int64_t w0 = 0; w0 < header.windows; w0 += B) {
      const int64_t b = std::min(B, header.windows - w0);
      std::vector<int64_t> windows(b);
      std::iota(windows.begin(), windows.end(), w0);
      dataset.fill_batch(windows, inputs.data(), targets.data());
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

}  // namespace kdtrain::cli
