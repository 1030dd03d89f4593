// A teacher cache of random rows shaped like a teacher's, for the benches that
// read one (`kdtrain bench --teacher-cache`, `--teacher-cache-read`) without a
// teacher or data: per position K distinct ids, descending log-probabilities
// holding 90 % of the mass, the other 10 % in the tail. It is written, checked
// and opened like any other cache (data/teacher_cache_writer.h).
#pragma once
#include <cstdint>
#include <string>

#include "data/teacher_cache.h"

namespace kdtrain::data {

// Writes a complete cache of `shape` (K, V, seq_len, windows, value type; the
// fingerprints as given) into the existing directory `dir`, in shards of
// `shard_windows` windows, its rows drawn from `seed`.
void write_synthetic_cache(const std::string& dir, const CacheHeader& shape, int64_t shard_windows, uint64_t seed);

// A new directory under the system's temporary directory for one such cache,
// unique to this process and `purpose`.
std::string synthetic_cache_dir(const std::string& purpose);

}  // namespace kdtrain::data
