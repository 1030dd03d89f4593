// `kdtrain teacher-cache`: runs a teacher over every window of a token dataset
// and writes its top-K log-probabilities as a sharded teacher cache (the format:
// data/teacher_cache.h; docs/distillation.md). Under `mpirun -np N` the shards
// are split among the ranks; a rerun of the same command resumes at the shards
// that are missing or incomplete, and the bytes do not depend on the number of
// ranks. Training reads the cache through data/ and model/cached_teacher_loss.h,
// never this builder.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/teacher_cache.h"

namespace kdtrain::cli {

struct TeacherCacheOptions {
  std::string teacher;                 // checkpoint directory
  std::vector<std::string> data;       // shard paths / globs
  std::string out;                     // output directory
  int64_t seq_len = 0, top_k = 0, batch_size = 1;
  int64_t chunk_tokens = 256;          // head logits rows at a time
  int64_t shard_windows = 0;           // windows per cache shard; 0: about 1 GiB of records
  data::CacheValueType value_type = data::CacheValueType::bf16;
  std::string device = "cpu";
  int64_t threads = 0;
  bool progress = true;
  bool json = false;                   // the final report as one JSON line (tokens/s for scripts)
  bool kernel_times = false;           // the report adds kernel_ms: GPU ms per timed kernel name
  bool force = false;                  // write into a non-empty --out (io/output_dir.h)
};

// The windows per shard `requested` gives for this header (0: about 1 GiB).
int64_t cache_shard_windows(const data::CacheHeader& header, int64_t requested);

// Runs the teacher over every window this rank's shards hold and writes them;
// rank 0 then writes the manifest. Returns the manifest.
data::CacheManifest build_teacher_cache(const TeacherCacheOptions& options);

// Rewrites a version-1 cache (<from>/teacher_cache.bin) as a sharded one in
// options.out (options.shard_windows, options.force); resumable like a build.
data::CacheManifest convert_teacher_cache(const std::string& from, const TeacherCacheOptions& options);

}  // namespace kdtrain::cli
