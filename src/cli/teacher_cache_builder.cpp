#include "cli/teacher_cache_builder.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <future>
#include <numeric>
#include <optional>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "core/error.h"
#include "core/kernel_timer.h"
#include "data/shard_manifest.h"
#include "data/teacher_cache_v1.h"
#include "data/teacher_cache_writer.h"
#include "dist/communicator.h"
#include "io/model_dir.h"
#include "io/output_dir.h"
#include "model/model.h"

namespace kdtrain::cli {

using data::CacheHeader;
using data::CacheManifest;

namespace fs = std::filesystem;

int64_t cache_shard_windows(const CacheHeader& h, int64_t requested) {
  KD_CHECK(requested >= 0, "--shard-windows must be at least 1 (or 0 for about 1 GiB per shard), got ", requested);
  if (requested > 0) return requested;
  return std::max<int64_t>(1, (int64_t(1) << 30) / h.record_bytes());
}

namespace {

// What --out may already hold: this cache's manifest and shards, their
// temporaries, and a version-1 cache's files (a cache rewritten in place).
std::vector<std::string> own_files(const std::string& out, const CacheManifest& plan) {
  std::vector<std::string> own = {data::kCacheManifestName, data::kCacheV1FileName, "cache.json"};
  for (const data::CacheShardInfo& s : plan.shards) own.push_back(s.file);
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(out, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("shard_", 0) == 0 && name.find(".bin.tmp.") != std::string::npos) own.push_back(name);
    if (name.rfind(std::string(data::kCacheManifestName) + ".tmp.", 0) == 0) own.push_back(name);
  }
  return own;
}

// Fills shard `s`'s windows: fill(first_window, count, ids, logp, log_tail) for
// batches of up to `batch` windows, in order.
using FillBatch = std::function<void(int64_t, int64_t, int32_t*, float*, float*)>;

// This job's write time: every rank's tokens written now, rank 0's wall time.
struct WriteTiming {
  int ranks = 1;
  double tokens_written = 0, seconds = 0;
};

// --kernel-times: rank 0's GPU milliseconds per timed kernel name, collected batch by batch.
nlohmann::json kernel_ms() {
  nlohmann::json ms = nlohmann::json::object();
  for (const auto& [name, t] : kernel_timer().totals()) ms[name] = {{"ms", t.total_ms}, {"calls", t.calls}};
  return ms;
}

// Two batches of host rows: the teacher fills one while a second thread checks,
// packs, checksums and writes the other, in window order, so the bytes are those
// of one thread. (The H200 window of 6c903e5 wrote at 0.62x the teacher's
// forward-only rate; the writer's host work, about 8 ms of every 8 windows on
// one core here, had left the GPU idle.)
void write_shard(const std::string& out, const CacheManifest& plan, int64_t s, int64_t batch, const FillBatch& fill) {
  const CacheHeader& h = plan.header;
  const int64_t T = h.seq_len, K = h.K;
  struct Rows {
    std::vector<int32_t> ids;
    std::vector<float> logp, tail;
  };
  Rows rows[2];
  for (Rows& r : rows) {
    r.ids.resize(batch * T * K);
    r.logp.resize(batch * T * K);
    r.tail.resize(batch * T);
  }
  data::remove_shard_temporaries(out, plan, s);
  data::CacheShardWriter writer(out, plan, s);
  std::future<void> writing;  // declared last: an error in fill waits for it before the rows go
  const data::CacheShardInfo& info = plan.shards[s];
  int next = 0;
  for (int64_t w0 = info.first_window; w0 < info.first_window + info.windows; w0 += batch) {
    const int64_t b = std::min(batch, info.first_window + info.windows - w0);
    Rows& r = rows[next];
    fill(w0, b, r.ids.data(), r.logp.data(), r.tail.data());
    if (writing.valid()) writing.get();  // the other rows are written: they may be refilled next
    writing = std::async(std::launch::async, [&writer, &r, b, T, K] {
      for (int64_t i = 0; i < b; ++i)
        writer.add_window(r.ids.data() + i * T * K, r.logp.data() + i * T * K, r.tail.data() + i * T);
    });
    next ^= 1;
  }
  if (writing.valid()) writing.get();
  writer.commit();
}

// What a run wrote: the cache's shape and size, and how fast this job wrote it
// (tokens of the shards written now, resumed ones not counted, over the wall
// time from the first shard to the manifest).
nlohmann::json written_report(const std::string& out, const CacheManifest& m, const WriteTiming& t) {
  const CacheHeader& h = m.header;
  double bytes = 0;
  for (const data::CacheShardInfo& s : m.shards)
    bytes += data::kCacheHeaderBytes + data::kCacheTrailerBytes + static_cast<double>(s.windows) * h.record_bytes();
  return {{"out", out}, {"windows", h.windows}, {"seq_len", h.seq_len}, {"tokens", h.windows * h.seq_len},
          {"shards", m.shards.size()}, {"top_k", h.K}, {"vocab_size", h.V}, {"id_bits", h.id_bits()},
          {"value_type", data::to_string(h.value_type)}, {"bytes", bytes}, {"ranks", t.ranks},
          {"tokens_written", t.tokens_written}, {"seconds", t.seconds},
          {"tokens_per_s", t.seconds > 0 ? t.tokens_written / t.seconds : 0.0}};
}

void print_written(const nlohmann::json& r, bool json) {
  if (json) return (void)std::printf("%s\n", r.dump().c_str());
  std::printf("wrote %s: %lld windows x %lld tokens in %zu shards, top-%lld of %lld (%d-bit ids), %s, %.1f MiB\n",
              r["out"].get<std::string>().c_str(), r["windows"].get<long long>(), r["seq_len"].get<long long>(),
              r["shards"].get<size_t>(), r["top_k"].get<long long>(), r["vocab_size"].get<long long>(),
              r["id_bits"].get<int>(), r["value_type"].get<std::string>().c_str(), r["bytes"].get<double>() / (1 << 20));
  if (r.contains("kernel_ms"))
    for (const auto& [name, t] : r["kernel_ms"].items())
      std::printf("  %-12s %10.1f ms in %lld calls\n", name.c_str(), t["ms"].get<double>(), t["calls"].get<long long>());
}

// Writes this rank's missing shards (shard s belongs to rank s % world), then,
// on rank 0 once every rank is done, the manifest from the shards' trailers.
void write_cache(dist::Communicator& comm, const std::string& out, CacheManifest& plan, int64_t batch,
                 const TeacherCacheOptions& o, const FillBatch& fill) {
  const int64_t shards = static_cast<int64_t>(plan.shards.size());
  const auto started = std::chrono::steady_clock::now();
  const auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  };
  int64_t done = 0, skipped = 0, mine = 0, written_windows = 0;
  for (int64_t s = comm.rank(); s < shards; s += comm.world()) ++mine;
  for (int64_t s = comm.rank(); s < shards; s += comm.world()) {
    uint64_t checksum = 0;
    if (data::shard_complete(out, plan, s, &checksum)) {
      ++skipped;
    } else {
      write_shard(out, plan, s, batch, fill);
      written_windows += plan.shards[s].windows;
    }
    ++done;
    if (o.progress)
      spdlog::info("teacher-cache rank {}/{}: {}/{} shards ({} already complete), {:.0f} tokens/s, {:.0f}s",
                   comm.rank(), comm.world(), done, mine, skipped,
                   static_cast<double>(written_windows * plan.header.seq_len) / std::max(elapsed(), 1e-9), elapsed());
  }
  double written_tokens = static_cast<double>(written_windows * plan.header.seq_len);
  comm.all_reduce_sum_host(&written_tokens, 1);
  comm.barrier();
  if (comm.rank() != 0) return;
  for (int64_t s = 0; s < shards; ++s)
    KD_CHECK(data::shard_complete(out, plan, s, &plan.shards[s].checksum), "teacher cache ", out, ": shard ",
             plan.shards[s].file, " is missing or incomplete after every rank finished");
  data::write_cache_manifest(out, plan);
  if (o.progress || o.json) {
    nlohmann::json report = written_report(out, plan, {comm.world(), written_tokens, elapsed()});
    if (o.kernel_times) report["kernel_ms"] = kernel_ms();
    print_written(report, o.json);
  }
}

// Checks --out on every rank (the same answer everywhere), then removes an
// earlier manifest: the manifest exists only while every shard is complete.
void prepare_out(dist::Communicator& comm, const std::string& out, const CacheManifest& plan, bool force) {
  io::claim_output_dir(out, {"--out", own_files(out, plan), force, "teacher-cache"});
  comm.barrier();
  if (comm.rank() == 0) {
    fs::create_directories(out);
    fs::remove(fs::path(out) / data::kCacheManifestName);
  }
  comm.barrier();
}

// The teacher's rows of windows [w0, w0 + b): forward, then the head logits a
// chunk at a time through the backend's top K; only ids, log-probs and tails
// come back to the host.
class TeacherRows {
 public:
  TeacherRows(const TeacherCacheOptions& o, LoadedModel& teacher, data::TokenDataset& dataset)
      : o_(o), dataset_(dataset), backend_(make_backend(o.device, o.threads)),
        model_(teacher.model, teacher.attention, *backend_, ModelUse::frozen) {
    model_.set_params(teacher.params);
    teacher.params.clear();
    teacher.params.shrink_to_fit();
    const int64_t V = teacher.model.vocab_size, T = o.seq_len;
    chunk_ = std::min(o.chunk_tokens, o.batch_size * T);
    inputs_.resize(o.batch_size * T);
    targets_.resize(o.batch_size * T);
    topk_.V = V;
    topk_.K = o.top_k;
    logits_ = alloc(chunk_ * V * dtype_size(backend_->act_dtype()));
    topk_.logits = logits_;
    const int64_t rows = o.batch_size * T;
    ids_ = static_cast<int32_t*>(alloc(rows * o.top_k * sizeof(int32_t)));
    logp_ = static_cast<float*>(alloc(rows * o.top_k * sizeof(float)));
    tail_ = static_cast<float*>(alloc(rows * sizeof(float)));
  }
  ~TeacherRows() {
    for (void* p : buffers_) backend_->release(p);
  }
  TeacherRows(const TeacherRows&) = delete;
  TeacherRows& operator=(const TeacherRows&) = delete;

  void fill(int64_t w0, int64_t b, int32_t* ids, float* logp, float* tail) {
    const int64_t T = o_.seq_len, K = o_.top_k;
    std::vector<int64_t> windows(b);
    std::iota(windows.begin(), windows.end(), w0);
    dataset_.fill_batch(windows, inputs_.data(), targets_.data());
    model_.forward(inputs_.data(), b, T, false);
    // The batch's rows stay on the device until its last chunk: one copy back per
    // array, not three waits a chunk.
    for (int64_t start = 0; start < b * T; start += chunk_) {
      const int64_t n = std::min(chunk_, b * T - start);
      model_.head_logits(logits_, start, n);
      topk_.n = n;
      topk_.ids = ids_ + start * K;
      topk_.logp = logp_ + start * K;
      topk_.log_tail = tail_ + start;
      backend_->topk_log_probs(topk_);
    }
    backend_->to_host(ids, ids_, b * T * K * sizeof(int32_t));
    backend_->to_host(logp, logp_, b * T * K * sizeof(float));
    backend_->to_host(tail, tail_, b * T * sizeof(float));
    if (KernelTimer::on()) kernel_timer().collect();  // this batch's marks are reached
    const int64_t bad = std::count_if(tail, tail + b * T, [](float x) { return std::isnan(x); });
    KD_CHECK(bad == 0, o_.teacher, ": the teacher produced NaN, +inf or all -inf logits on ", bad,
             " positions of windows ", w0, "..", w0 + b - 1);
  }

 private:
  void* alloc(size_t bytes) {
    buffers_.push_back(backend_->alloc(bytes));
    return buffers_.back();
  }
  const TeacherCacheOptions& o_;
  data::TokenDataset& dataset_;
  std::unique_ptr<Backend> backend_;
  Model model_;
  int64_t chunk_ = 0;
  void* logits_ = nullptr;  // (chunk, V) head logits, read by the top K
  int32_t* ids_ = nullptr;   // (batch x seq_len, K) on the backend's device, as the next two
  float* logp_ = nullptr;
  float* tail_ = nullptr;    // (batch x seq_len)
  std::vector<int32_t> inputs_, targets_;
  std::vector<void*> buffers_;
  TopkArgs topk_;
};

// Runs `body` on every rank; one rank's error ends the whole job (the others
// would wait in a barrier for ever), naming the rank.
template <typename Body>
CacheManifest on_every_rank(dist::Communicator& comm, const Body& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    if (comm.world() == 1) throw;
    std::fprintf(stderr, "kdtrain: rank %d of %d: error: %s\n", comm.rank(), comm.world(), e.what());
    std::fflush(stderr);
    comm.abort(1);
    throw;  // not reached: abort ends the process
  }
}

CacheManifest build_on_rank(dist::Communicator& comm, const TeacherCacheOptions& o) {
  LoadedModel teacher = load_model_dir(o.teacher);
  const int64_t V = teacher.model.vocab_size, T = o.seq_len;
  KD_CHECK(teacher.model.max_position_embeddings >= T, "--teacher ", o.teacher, " has max_position_embeddings ",
           teacher.model.max_position_embeddings, ", fewer than --seq-len ", T,
           "; the teacher cannot score windows that long");
  KD_CHECK(o.top_k >= 1 && o.top_k <= V, "--top-k must be in [1, ", V, "] (the teacher's vocab), got ", o.top_k);
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
  CacheManifest plan = data::plan_cache(header, cache_shard_windows(header, o.shard_windows));
  plan.made_from = {{"teacher", o.teacher}, {"data", o.data}};
  prepare_out(comm, o.out, plan, o.force);
  TeacherRows rows(o, teacher, dataset);
  std::optional<KernelTiming> timing;
  if (o.kernel_times) timing.emplace();
  write_cache(comm, o.out, plan, o.batch_size, o,
              [&](int64_t w0, int64_t b, int32_t* ids, float* logp, float* tail) { rows.fill(w0, b, ids, logp, tail); });
  return plan;
}

CacheManifest convert_on_rank(dist::Communicator& comm, const std::string& from, const TeacherCacheOptions& o) {
  const data::TeacherCacheV1 v1(from);
  CacheManifest plan = data::plan_cache(v1.header(), cache_shard_windows(v1.header(), o.shard_windows));
  plan.made_from = {{"converted_from", from}};
  KD_CHECK(fs::weakly_canonical(from) != fs::weakly_canonical(o.out), "--convert ", from,
           ": --out must be another directory (the version-1 file is read while the shards are written)");
  prepare_out(comm, o.out, plan, o.force);
  const int64_t T = v1.header().seq_len, K = v1.header().K;
  write_cache(comm, o.out, plan, 1, o, [&](int64_t w0, int64_t b, int32_t* ids, float* logp, float* tail) {
    for (int64_t i = 0; i < b; ++i) v1.read_window(w0 + i, ids + i * T * K, logp + i * T * K, tail + i * T);
  });
  return plan;
}

}  // namespace

CacheManifest build_teacher_cache(const TeacherCacheOptions& o) {
  KD_CHECK(o.seq_len >= 1, "--seq-len must be at least 1");
  KD_CHECK(o.batch_size >= 1, "--batch-size must be at least 1");
  KD_CHECK(o.chunk_tokens >= 1, "chunk_tokens must be at least 1");
  const Device device = o.device == "cuda" ? Device::cuda : Device::cpu;
  // No collective timeout: a rank waits at the final barrier while the others write.
  std::unique_ptr<dist::Communicator> comm = dist::make_communicator(DistBackend::auto_select, device, 0.0);
  return on_every_rank(*comm, [&] { return build_on_rank(*comm, o); });
}

CacheManifest convert_teacher_cache(const std::string& from, const TeacherCacheOptions& o) {
  std::unique_ptr<dist::Communicator> comm = dist::make_communicator(DistBackend::auto_select, Device::cpu, 0.0);
  return on_every_rank(*comm, [&] { return convert_on_rank(*comm, from, o); });
}

}  // namespace kdtrain::cli
