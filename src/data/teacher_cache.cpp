// The teacher cache file format (data/teacher_cache.h): header encoding, the
// checksum, the reader and writer of teacher_cache.bin and the teacher hash it
// records. The cached-teacher loss (model/) and the builder (cli/) live apart,
// so the format links on its own (the fuzz target of its parser, fuzz/).
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <vector>

#include "config/limits.h"
#include "core/bf16.h"
#include "core/error.h"
#include "data/teacher_cache.h"
#include "io/checkpoint_format.h"
#include "io/model_dir.h"
#include "io/safetensors.h"
#include "io/teacher_cache_values.h"

namespace kdtrain::data {

namespace {

constexpr char kMagic[8] = {'K', 'D', 'T', 'C', 'A', 'C', 'H', 'E'};
constexpr char kEndMagic[8] = {'K', 'D', 'T', 'C', 'E', 'N', 'D', '\0'};

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
  // Bounded first, so the sizes derived below cannot overflow.
  KD_CHECK(header_.V > 0 && header_.V <= SizeLimits::vocab_size && header_.K >= 1 && header_.K <= header_.V &&
               header_.seq_len > 0 && header_.seq_len <= SizeLimits::seq_len && header_.windows >= 0,
           path, ": corrupt header (K ", header_.K, ", V ", header_.V, ", seq_len ",
           header_.seq_len, ", windows ", header_.windows, ")");
  const int64_t record = get<int64_t>(b, HeaderOffsets::record_bytes);
  KD_CHECK(record == header_.record_bytes(), path, ": corrupt header (record size ", record,
           ", expected ", header_.record_bytes(), ")");
  KD_CHECK(static_cast<uint64_t>(header_.windows) <=
               (size - kCacheHeaderBytes - kCacheTrailerBytes) / static_cast<uint64_t>(record),
           path, ": teacher cache is ", size, " bytes, too short for the ", header_.windows, " windows of ",
           record, " bytes its header describes: file is truncated");
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
  // The values, after the checksum (a damaged file is called damaged, not
  // tampered) and before any run uses them: a bad row stops the run before
  // its directory exists, naming the window.
  const double rounding = header_.value_type == CacheValueType::bf16 ? io::kBf16LogProbRounding
                                                                     : io::kF32LogProbRounding;
  CachedRows rows;
  for (int64_t w = 0; w < header_.windows; ++w) {
    rows.ids.clear();
    rows.logp.clear();
    rows.log_tail.clear();
    decode_window(w, rows);
    io::check_teacher_cache_rows({rows.ids.data(), rows.logp.data(), rows.log_tail.data(), header_.seq_len, header_.K},
                                 header_.V, rounding, path, w);
  }
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
  const size_t base = out.ids.size();
  decode_window(window, out);
  // Checked at open; checked again here because the ids index the vocabulary
  // and the mapped file could have been rewritten in place since.
  for (size_t i = base; i < out.ids.size(); ++i)
    KD_CHECK(out.ids[i] >= 0 && out.ids[i] < header_.V, path(), ": window ", window,
             " holds token id ", out.ids[i], " outside the vocabulary (", header_.V, ")");
}

void TeacherCache::decode_window(int64_t window, CachedRows& out) const {
  const int64_t T = header_.seq_len, K = header_.K;
  const uint8_t* rec = file_.data() + kCacheHeaderBytes + window * header_.record_bytes();
  out.K = K;
  const size_t base = out.ids.size(), tail_base = out.log_tail.size();
  out.ids.resize(base + T * K);
  out.logp.resize(base + T * K);
  out.log_tail.resize(tail_base + T);
  std::memcpy(out.ids.data() + base, rec, T * K * 4);
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
