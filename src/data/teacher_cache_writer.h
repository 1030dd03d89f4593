// Writing a teacher cache (data/teacher_cache.h): one shard at a time, each
// written to a temporary name, fsynced and renamed (io::AtomicFileWriter), so a
// shard file that exists is complete; the manifest is written last. A killed
// writer is resumed by skipping the shards already complete.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "data/teacher_cache.h"

namespace kdtrain::data {

class CacheShardWriter {
 public:
  CacheShardWriter(const std::string& dir, const CacheManifest& plan, int64_t shard);
  ~CacheShardWriter();
  CacheShardWriter(const CacheShardWriter&) = delete;
  CacheShardWriter& operator=(const CacheShardWriter&) = delete;
  // ids (T, K), logp (T, K) fp32 (rounded to the value type), log_tail (T), their
  // values checked (check_values) before they are written.
  void add_window(const int32_t* ids, const float* logp, const float* log_tail);
  // Writes the trailer and renames the shard into place; returns its checksum.
  uint64_t commit();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// True when <dir>/<shard's file> is a complete shard of `plan` (its header is the
// plan's, its size and trailer right); sets *checksum to the trailer's. Reads the
// header and trailer only.
bool shard_complete(const std::string& dir, const CacheManifest& plan, int64_t shard, uint64_t* checksum);

// Deletes the temporaries a killed writer left for `shard` (<file>.tmp.<pid>).
void remove_shard_temporaries(const std::string& dir, const CacheManifest& plan, int64_t shard);

}  // namespace kdtrain::data
