// Teacher logit cache (SPEC §3, docs/distillation.md): for every target
// position of every window of a TokenDataset, the teacher's top-K token ids,
// their log-probabilities at temperature 1 and the log of the remaining tail
// mass, so training can distil without running the teacher.
//
// File <dir>/teacher_cache.bin, little-endian:
//   header (256 bytes)  magic "KDTCACHE", version, value dtype, K, V, seq_len,
//                       windows, data fingerprint, teacher hash, record bytes
//   records             one per window, in window order (aligned with the shards
//                       through TokenDataset's window index), each:
//                         ids      uint32 (T, K)   top-K ids, by descending log-prob
//                         logp     bf16|f32 (T, K) log softmax of the raw logits
//                         log_tail f32 (T)         log(1 - sum_K p), -inf when K = V
//                         zero padding to a multiple of 8 bytes
//   trailer (16 bytes)  checksum (64-bit, over header + records), magic "KDTCEND\0"
// The checksum is verified when the file is opened; any mismatch, a wrong size
// or a bad field is refused with an error naming the file.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config/config.h"
#include "data/dataset.h"
#include "io/file_util.h"

namespace kdtrain {
class Model;
class Backend;
class FusedLoss;
struct LoadedModel;
struct LossSettings;
struct LossSums;
}  // namespace kdtrain

namespace kdtrain::data {

constexpr char kCacheFileName[] = "teacher_cache.bin";
constexpr uint32_t kCacheVersion = 1;
constexpr int64_t kCacheHeaderBytes = 256;
constexpr int64_t kCacheTrailerBytes = 16;

enum class CacheValueType : uint32_t { bf16 = 0, f32 = 1 };

struct CacheHeader {
  CacheValueType value_type = CacheValueType::bf16;
  int64_t K = 0, V = 0, seq_len = 0, windows = 0;
  uint64_t data_fingerprint = 0;  // TokenDataset::fingerprint() of the data it was made from
  uint64_t teacher_hash = 0;      // hash of the teacher's config.json and weights
  int64_t record_bytes() const;   // bytes per window record (padded to 8)
};

// Streaming 64-bit checksum: FNV-1a over little-endian 64-bit words (inputs are
// multiples of 8 bytes), finished with the byte count.
class CacheChecksum {
 public:
  void update(const void* bytes, size_t n);  // n % 8 == 0
  uint64_t value() const;

 private:
  uint64_t h_ = 0xcbf29ce484222325ULL;
  uint64_t bytes_ = 0;
};

// One window's rows, decoded to fp32: ids (T, K), logp (T, K), log_tail (T).
struct CachedRows {
  int64_t K = 0;
  std::vector<int32_t> ids;
  std::vector<float> logp;
  std::vector<float> log_tail;
};

class TeacherCache {
 public:
  explicit TeacherCache(const std::string& dir);  // maps, validates and checksums
  const CacheHeader& header() const { return header_; }
  const std::string& path() const { return file_.path(); }

  // Refuses (naming `key` and the file) a cache made for other data, another
  // seq_len or another vocabulary size.
  void require_match(const TokenDataset& data, int64_t vocab_size, const std::string& key) const;

  // Appends window `window`'s T rows to out (ids, logp, log_tail).
  void append_window(int64_t window, CachedRows& out) const;

 private:
  io::MappedFile file_;
  CacheHeader header_;
};

// Writes teacher_cache.bin atomically; records come from a callback in window order.
class TeacherCacheWriter {
 public:
  TeacherCacheWriter(const std::string& dir, const CacheHeader& header);
  ~TeacherCacheWriter();
  TeacherCacheWriter(const TeacherCacheWriter&) = delete;
  TeacherCacheWriter& operator=(const TeacherCacheWriter&) = delete;
  // ids (T, K), logp (T, K) fp32 (rounded to the header's value type), log_tail (T).
  void add_window(const int32_t* ids, const float* logp, const float* log_tail);
  void commit();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Top-K of one row of logits (V): ids by descending logit (ties: lower id first),
// log-probabilities log softmax(z) of those ids and log of the remaining mass.
// Returns false (writing nothing) when a logit is not finite.
bool topk_log_probs(const float* logits, int64_t V, int64_t K, int32_t* ids, float* logp,
                    float* log_tail);

// The dense teacher logits (n, V) that make the fused loss (backend loss_chunk,
// which applies softmax(t / tau)) compute the cached-teacher loss exactly:
//   renormalize: t = stored log p_T on the K ids, -inf elsewhere, so the teacher
//     is softmax(log p_T / tau) renormalised over the K ids;
//   bucket: the K+1 coarse teacher q = softmax over {log p_T,k / tau, log_tail / tau};
//     t_k = tau log q_k on the K ids and, on every other id j, the tail mass spread
//     like the student's: t_j = tau (log q_tail + log p_S,j - log P_S,tail),
//     p_S = softmax(s / tau). Then every KD loss of the fine distributions equals
//     the same loss of the (K+1)-bucket distributions, and the fused loss's
//     gradient (teacher held fixed) is the exact gradient of the bucket loss.
// student (n, V) host logits are read in bucket mode only (may be null otherwise).
template <typename T>
void dense_cached_teacher(const int32_t* ids, const float* logp, const float* log_tail, int64_t n,
                          int64_t K, int64_t V, CacheTail tail, double tau, const T* student,
                          T* out);

// soft_ce in bucket mode: the fine cross-entropy against the expanded teacher is
// not the bucket cross-entropy (it adds the student's entropy inside the tail), so
// the fused loss runs forward_kl (same gradient) and the constant tau^2 H(q) of
// each row's (K+1)-bucket teacher is added to its KD value. Writes it per row.
void bucket_teacher_entropy(const float* logp, const float* log_tail, int64_t n, int64_t K,
                            double tau, double* out);

// Refuses kd.loss=reverse_kl with kd.cache_tail=renormalize (infinite: the teacher is
// zero outside its top K).
void check_cached_loss_kind(KdLoss kd_loss, CacheTail tail);

// The fused loss against cached rows [0, N) (N = the student's tokens in batch,
// rows in the order of the student's tokens). reverse_kl needs kd.cache_tail=bucket.
LossSums run_cached_loss(FusedLoss& loss, Model& student, const CachedRows& rows, CacheTail tail,
                         const int32_t* targets, const LossSettings& settings, float grad_scale,
                         bool compute_grad);

struct TeacherCacheOptions {
  std::string teacher;                 // checkpoint directory
  std::vector<std::string> data;       // shard paths / globs
  std::string out;                     // output directory
  int64_t seq_len = 0, top_k = 0, batch_size = 1;
  int64_t chunk_tokens = 256;          // head logits rows at a time
  CacheValueType value_type = CacheValueType::bf16;
  std::string device = "cpu";
  int64_t threads = 0;
  bool progress = true;
};
// The teacher's fingerprint as a cache records it (CacheHeader::teacher_hash): a
// hash of its config and weights. Training records it too (trainer_state.json).
uint64_t teacher_hash(const LoadedModel& teacher);

// Runs the teacher over every window and writes the cache; returns its header.
CacheHeader build_teacher_cache(const TeacherCacheOptions& options);

}  // namespace kdtrain::data
