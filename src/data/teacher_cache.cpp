// The teacher cache reader (data/teacher_cache.h): the manifest, opening the
// shards, verifying them on first read, decoding and validating rows; and the
// teacher hash a cache records. The byte layout is data/teacher_cache_format.cpp.
#include "data/teacher_cache.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/bf16.h"
#include "core/error.h"
#include "core/json_parse.h"
#include "data/teacher_cache_v1.h"
#include "io/checkpoint_format.h"
#include "io/model_dir.h"
#include "io/teacher_cache_values.h"

namespace kdtrain::data {

namespace fs = std::filesystem;

std::string cache_shard_file(int64_t shard) {
  char name[32];
  std::snprintf(name, sizeof name, "shard_%05lld.bin", static_cast<long long>(shard));
  return name;
}

// ---------------------------------------------------------------- manifest

CacheManifest plan_cache(const CacheHeader& header, int64_t shard_windows) {
  KD_CHECK(shard_windows >= 1, "teacher cache: windows per shard must be at least 1, got ", shard_windows);
  CacheManifest m;
  m.header = header;
  m.shard_windows = shard_windows;
  for (int64_t w = 0, s = 0; w < header.windows; w += shard_windows, ++s)
    m.shards.push_back({cache_shard_file(s), w, std::min(shard_windows, header.windows - w), 0});
  return m;
}

namespace {

template <typename T>
T field(const nlohmann::json& doc, const char* key, const std::string& path) {
  KD_CHECK(doc.contains(key), path, ": missing \"", key, "\"");
  try {
    return doc.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    fail(path, ": \"", key, "\" has the wrong type (", doc.at(key).dump(), ")");
  }
}

}  // namespace

CacheManifest read_cache_manifest(const std::string& dir) {
  const std::string path = (fs::path(dir) / kCacheManifestName).string();
  if (!fs::exists(path)) {
    KD_CHECK(!fs::exists(fs::path(dir) / kCacheV1FileName), "teacher cache ", dir,
             " is a version-1 cache (one teacher_cache.bin, 32-bit ids); convert it with "
             "`kdtrain teacher-cache --convert ", dir, " --out NEW_DIR`");
    fail("teacher cache ", dir, ": no ", kCacheManifestName,
         " (write one with `kdtrain teacher-cache`; an interrupted write is resumed by rerunning its command)");
  }
  const nlohmann::json doc = parse_json(read_text_file(path), path);
  KD_CHECK(doc.is_object(), path, ": not a JSON object");
  KD_CHECK(field<std::string>(doc, "format", path) == kCacheFormat, path, ": format \"",
           doc.at("format").get<std::string>(), "\" is not ", kCacheFormat);
  CacheManifest m;
  CacheHeader& h = m.header;
  const std::string vt = field<std::string>(doc, "value_type", path);
  KD_CHECK(vt == "bf16" || vt == "f32", path, ": value_type \"", vt, "\" is not bf16 or f32");
  h.value_type = vt == "bf16" ? CacheValueType::bf16 : CacheValueType::f32;
  h.K = field<int64_t>(doc, "top_k", path);
  h.V = field<int64_t>(doc, "vocab_size", path);
  h.seq_len = field<int64_t>(doc, "seq_len", path);
  h.windows = field<int64_t>(doc, "windows", path);
  h.data_fingerprint = field<uint64_t>(doc, "data_fingerprint", path);
  h.teacher_hash = field<uint64_t>(doc, "teacher_hash", path);
  m.shard_windows = field<int64_t>(doc, "shard_windows", path);
  KD_CHECK(h.V >= 1 && h.K >= 1 && h.K <= h.V && h.seq_len >= 1 && h.windows >= 0 && m.shard_windows >= 1, path,
           ": bad sizes (top_k ", h.K, ", vocab_size ", h.V, ", seq_len ", h.seq_len, ", windows ", h.windows,
           ", shard_windows ", m.shard_windows, ")");
  const CacheManifest plan = plan_cache(h, m.shard_windows);
  const nlohmann::json& shards = doc.contains("shards") ? doc.at("shards") : nlohmann::json();
  KD_CHECK(shards.is_array() && shards.size() == plan.shards.size(), path, ": \"shards\" must list ",
           plan.shards.size(), " shards of ", m.shard_windows, " windows for ", h.windows, " windows");
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string where = path + " shards[" + std::to_string(s) + "]";
    CacheShardInfo info{field<std::string>(shards[s], "file", where), field<int64_t>(shards[s], "first_window", where),
                        field<int64_t>(shards[s], "windows", where), field<uint64_t>(shards[s], "checksum", where)};
    const CacheShardInfo& want = plan.shards[s];
    KD_CHECK(info.file == want.file && info.first_window == want.first_window && info.windows == want.windows, where,
             ": shard ", info.file, " windows ", info.first_window, "+", info.windows, ", expected ", want.file,
             " windows ", want.first_window, "+", want.windows);
    m.shards.push_back(info);
  }
  if (doc.contains("made_from")) m.made_from = doc.at("made_from");
  return m;
}

void write_cache_manifest(const std::string& dir, const CacheManifest& m) {
  const CacheHeader& h = m.header;
  nlohmann::json doc;
  doc["format"] = kCacheFormat;
  doc["value_type"] = to_string(h.value_type);
  doc["top_k"] = h.K;
  doc["vocab_size"] = h.V;
  doc["seq_len"] = h.seq_len;
  doc["windows"] = h.windows;
  doc["data_fingerprint"] = h.data_fingerprint;
  doc["teacher_hash"] = h.teacher_hash;
  doc["id_bits"] = h.id_bits();
  doc["record_bytes"] = h.record_bytes();
  doc["shard_windows"] = m.shard_windows;
  nlohmann::json shards = nlohmann::json::array();
  for (const CacheShardInfo& s : m.shards)
    shards.push_back({{"file", s.file}, {"first_window", s.first_window}, {"windows", s.windows},
                      {"checksum", s.checksum}});
  doc["shards"] = shards;
  if (!m.made_from.is_null()) doc["made_from"] = m.made_from;
  const std::string text = doc.dump(1) + "\n";
  io::AtomicFileWriter out((fs::path(dir) / kCacheManifestName).string());
  out.write(text.data(), text.size());
  out.commit();
}

// ---------------------------------------------------------------- reader

TeacherCache::TeacherCache(const std::string& dir) : dir_(dir), manifest_(read_cache_manifest(dir)) {
  const CacheHeader& h = manifest_.header;
  own_checks_.assign(checks_bytes() / sizeof(uint64_t), 0);
  use_checks(own_checks_.data());
  for (size_t s = 0; s < manifest_.shards.size(); ++s) {
    const CacheShardInfo& info = manifest_.shards[s];
    const std::string path = (fs::path(dir) / info.file).string();
    KD_CHECK(fs::exists(path), describe(s), ": missing (an interrupted `kdtrain teacher-cache` is resumed by "
             "rerunning its command)");
    files_.emplace_back(path);
    const io::MappedFile& f = files_.back();
    KD_CHECK(f.size() >= static_cast<uint64_t>(kCacheHeaderBytes + kCacheTrailerBytes), describe(s), ": ",
             f.size(), " bytes, shorter than a header and trailer (truncated)");
    const ShardHeader sh = decode_shard_header(f.data(), path);
    KD_CHECK(sh.cache.K == h.K && sh.cache.V == h.V && sh.cache.seq_len == h.seq_len &&
                 sh.cache.value_type == h.value_type && sh.cache.windows == h.windows &&
                 sh.cache.data_fingerprint == h.data_fingerprint && sh.cache.teacher_hash == h.teacher_hash,
             describe(s), ": header (K ", sh.cache.K, ", V ", sh.cache.V, ", seq_len ", sh.cache.seq_len, ", ",
             to_string(sh.cache.value_type), ", fingerprints) does not match ", kCacheManifestName,
             " (K ", h.K, ", V ", h.V, ", seq_len ", h.seq_len, ", ", to_string(h.value_type),
             "): a shard of another cache");
    KD_CHECK(sh.shard == static_cast<int64_t>(s) && sh.first_window == info.first_window &&
                 sh.windows == info.windows,
             describe(s), ": its header says shard ", sh.shard, ", windows ", sh.first_window, "+", sh.windows);
    KD_CHECK(f.size() == sh.file_bytes(), describe(s), ": ", f.size(), " bytes, expected ", sh.file_bytes(),
             f.size() < sh.file_bytes() ? " (truncated)" : " (trailing bytes)");
    const uint64_t stored = decode_trailer(f.data() + f.size() - kCacheTrailerBytes, path);
    KD_CHECK(stored == info.checksum, describe(s), ": trailer checksum ", stored, " differs from ",
             kCacheManifestName, "'s ", info.checksum, ": the shard was rewritten or belongs to another cache");
  }
}

std::string TeacherCache::describe(int64_t s) const {
  const CacheShardInfo& info = manifest_.shards[s];
  return "teacher cache " + dir_ + ": shard " + info.file + " (windows " + std::to_string(info.first_window) + ".." +
         std::to_string(info.first_window + info.windows - 1) + ")";
}

void TeacherCache::require_match(const TokenDataset& data, int64_t vocab_size, const std::string& key) const {
  const CacheHeader& h = header();
  KD_CHECK(h.V == vocab_size, key, ": ", dir_, " holds teacher log-probs over ", h.V,
           " ids but the student's vocab_size is ", vocab_size);
  KD_CHECK(h.seq_len == data.seq_len(), key, ": ", dir_, " was made with seq_len ", h.seq_len,
           " but train.seq_len is ", data.seq_len());
  KD_CHECK(h.windows == data.num_windows() && h.data_fingerprint == data.fingerprint(), key, ": ", dir_,
           " was made from different data (", h.windows, " windows, fingerprint ", h.data_fingerprint,
           "; data.train has ", data.num_windows(), " windows, fingerprint ", data.fingerprint(),
           "); rebuild it with `kdtrain teacher-cache` on these shards");
}

int64_t TeacherCache::shard_of(int64_t window) const {
  KD_CHECK(window >= 0 && window < header().windows, "teacher cache ", dir_, ": window ", window,
           " out of range [0, ", header().windows, ")");
  return window / manifest_.shard_windows;
}

size_t TeacherCache::checks_bytes() const { return ShardChecks::bytes(static_cast<int64_t>(manifest_.shards.size())); }

void TeacherCache::use_checks(void* memory) {
  checks_ = std::make_unique<ShardChecks>(static_cast<int64_t>(manifest_.shards.size()), memory);
}

void TeacherCache::share_checks(std::unique_ptr<dist::NodeSharedMemory> memory) {
  for (int64_t s = 0; s < checks_->shards(); ++s)
    KD_CHECK(checks_->state(s) == ShardChecks::State::unsummed, "teacher cache ", dir_,
             ": shard checks shared after a shard was summed (", describe(s), ")");
  use_checks(memory->data());
  node_memory_ = std::move(memory);
}

void TeacherCache::share_checks_in_file(const std::string& file) {
  share_checks(std::make_unique<dist::NodeSharedMemory>(file, checks_bytes(), checks_key()));
}

// What a node's table holds: this cache's shards, by their manifest entries.
uint64_t TeacherCache::checks_key() const {
  CacheChecksum key;
  const uint64_t head[3] = {header().teacher_hash, header().data_fingerprint, manifest_.shards.size()};
  key.update(head, sizeof head);
  for (const CacheShardInfo& info : manifest_.shards) key.update(&info.checksum, sizeof info.checksum);
  return key.value() == 0 ? 1 : key.value();
}

void TeacherCache::share_checks_on_node(dist::Communicator& comm) {
  share_checks(std::make_unique<dist::NodeSharedMemory>(comm, checks_bytes(), "cache-checks", checks_key()));
}

std::string TeacherCache::checks_private_reason() const {
  return node_memory_ ? node_memory_->why_private() : "not shared with other ranks";
}

// Sums a shard this thread claimed, outside any lock: threads and ranks sum
// different shards at once.
void TeacherCache::sum_claimed(int64_t s, bool ahead) const {
  const io::MappedFile& f = files_[s];
  CacheChecksum sum;
  sum.update(f.data(), f.size() - kCacheTrailerBytes);
  checks_->finish(s, sum.value(), sum.value() == manifest_.shards[s].checksum);
  std::lock_guard<std::mutex> lock(verify_mutex_);  // a waiter checked the state under it: no lost wake-up
  ++(ahead ? summed_ahead_ : summed_on_read_);
  verify_done_.notify_all();
}

bool TeacherCache::verify_if_free(int64_t s, bool ahead) const {
  if (!checks_->claim(s, checks_member())) return false;
  sum_claimed(s, ahead);
  return true;
}

// How often a read waiting for a shard looks again: another rank's sum of it
// (about 0.2 s per GiB) wakes no thread here.
constexpr std::chrono::milliseconds kRemoteSumPoll{2};

// Whether the member that claimed a shard has died (another rank, killed
// mid-sum where the launcher does not end the job): its lock on the node's
// memory is gone (dist/node_shared_memory.h), whatever its pid now names.
bool TeacherCache::claimer_died(uint32_t claimer) const {
  return claimer != checks_member() && node_memory_ && !node_memory_->member_alive(claimer);
}

void TeacherCache::verify_shard(int64_t s, int64_t window) const {
  ShardChecks::State state;  // good or bad (both final) once the loop ends
  for (;;) {
    verify_if_free(s, false);
    uint32_t claimer = 0;
    {
      std::unique_lock<std::mutex> lock(verify_mutex_);
      while ((state = checks_->state(s)) == ShardChecks::State::summing && !claimer_died(claimer = checks_->claimer(s)))
        verify_done_.wait_for(lock, kRemoteSumPoll);
    }
    if (state == ShardChecks::State::good || state == ShardChecks::State::bad) break;
    // Summing by a member that died: release it and claim it again. Unsummed (another
    // waiter released it first): claim it again.
    if (state == ShardChecks::State::summing) checks_->release(s, claimer);
  }
  KD_CHECK(state == ShardChecks::State::good, describe(s), ": checksum mismatch (stored ",
           manifest_.shards[s].checksum, ", computed ", checks_->computed(s), ") found when reading window ", window,
           ": the shard is corrupt; delete it and rerun `kdtrain teacher-cache` to rewrite it");
}

bool TeacherCache::shard_verified(int64_t s) const { return checks_->state(s) == ShardChecks::State::good; }

int64_t TeacherCache::shards_summed_on_read() const {
  std::lock_guard<std::mutex> lock(verify_mutex_);
  return summed_on_read_;
}

int64_t TeacherCache::shards_summed_ahead() const {
  std::lock_guard<std::mutex> lock(verify_mutex_);
  return summed_ahead_;
}

void TeacherCache::append_window(int64_t window, CachedRows& out) const {
  const CacheHeader& h = header();
  out.K = h.K;
  const size_t base = out.ids.size(), tail_base = out.log_tail.size();
  out.ids.resize(base + h.seq_len * h.K);
  out.logp.resize(base + h.seq_len * h.K);
  out.log_tail.resize(tail_base + h.seq_len);
  decode_window(window, out.ids.data() + base, out.logp.data() + base, out.log_tail.data() + tail_base);
}

void TeacherCache::decode_window(int64_t window, int32_t* ids, float* logp, float* log_tail) const {
  const int64_t s = shard_of(window);
  verify_shard(s, window);
  const CacheHeader& h = header();
  const int64_t local = window - manifest_.shards[s].first_window;
  const uint8_t* record = files_[s].data() + kCacheHeaderBytes + local * h.record_bytes();
  decode_record(h, record, ids, logp, log_tail);
  check_values(h, ids, logp, log_tail, describe(s), window);
}

void check_values(const CacheHeader& h, const int32_t* ids, const float* logp, const float* log_tail,
                  const std::string& where, int64_t window) {
  const double rounding = h.value_type == CacheValueType::bf16 ? io::kBf16LogProbRounding : io::kF32LogProbRounding;
  io::check_teacher_cache_rows({ids, logp, log_tail, h.seq_len, h.K}, h.V, rounding, where, window);
}

// ---------------------------------------------------------------- teacher hash

TeacherHasher::TeacherHasher(const ModelConfig& model, const AttentionConfig& attention) {
  std::string config = io::hf_config_json(model, attention).dump();
  config.resize((config.size() + 7) / 8 * 8, ' ');
  sum_.update(config.data(), config.size());
}

void TeacherHasher::add(const float* values, int64_t n) {
  int64_t i = 0;
  if (has_carry_ && n > 0) {
    const float pair[2] = {carry_, values[0]};
    sum_.update(pair, sizeof pair);
    has_carry_ = false;
    i = 1;
  }
  const int64_t pairs = (n - i) / 2;
  sum_.update(values + i, static_cast<size_t>(pairs) * 2 * sizeof(float));
  i += 2 * pairs;
  if (i < n) {
    carry_ = values[i];
    has_carry_ = true;
  }
}

void TeacherHasher::add_bf16(const void* values, int64_t n) {
  constexpr int64_t kSlice = int64_t(1) << 20;
  std::vector<float> slice(static_cast<size_t>(std::min(n, kSlice)));
  const auto* bytes = static_cast<const unsigned char*>(values);
  for (int64_t start = 0; start < n; start += kSlice) {
    const int64_t len = std::min(kSlice, n - start);
    for (int64_t i = 0; i < len; ++i) {
      uint16_t b;
      std::memcpy(&b, bytes + 2 * (start + i), sizeof b);
      slice[i] = bf16_bits_to_float(b);
    }
    add(slice.data(), len);
  }
}

uint64_t TeacherHasher::value() {
  if (has_carry_) {
    const float last[2] = {carry_, 0.f};  // zero-padded to a whole word
    sum_.update(last, sizeof last);
    has_carry_ = false;
  }
  return sum_.value();
}

uint64_t teacher_hash(const LoadedModel& teacher) {
  TeacherHasher hash(teacher.model, teacher.attention);
  hash.add(teacher.params.data(), static_cast<int64_t>(teacher.params.size()));
  return hash.value();
}

}  // namespace kdtrain::data
