// The version-1 teacher cache (one file, <dir>/teacher_cache.bin, 32-bit ids,
// one whole-file checksum; docs/distillation.md, "Version 1"), read only to
// convert it (`kdtrain teacher-cache --convert`): training refuses it, naming
// that command.
#pragma once
#include <cstdint>
#include <string>

#include "data/teacher_cache_format.h"
#include "io/file_util.h"

namespace kdtrain::data {

constexpr char kCacheV1FileName[] = "teacher_cache.bin";

class TeacherCacheV1 {
 public:
  explicit TeacherCacheV1(const std::string& dir);  // maps, validates and checksums the whole file
  // K, V, seq_len, windows, fingerprints and value type (as version 2 names them).
  const CacheHeader& header() const { return header_; }
  const std::string& path() const { return file_.path(); }
  // Window w's ids (T, K), log-probs (T, K) as fp32 and log tails (T).
  void read_window(int64_t window, int32_t* ids, float* logp, float* log_tail) const;

 private:
  io::MappedFile file_;
  CacheHeader header_;
  int64_t record_bytes_ = 0;
};

}  // namespace kdtrain::data
