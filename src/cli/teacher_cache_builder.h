// `kdtrain teacher-cache`: runs a teacher over every window of a token dataset
// and writes its top-K log-probabilities as a teacher cache (the file format:
// data/teacher_cache.h; docs/distillation.md). Training reads the cache through
// data/ and model/cached_teacher_loss.h, never this builder.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/teacher_cache.h"

namespace kdtrain::cli {

// Top-K of one row of logits (V): ids by descending logit (ties: lower id first),
// log-probabilities log softmax(z) of those ids and log of the remaining mass.
// Returns false (writing nothing) when a logit is not finite.
bool topk_log_probs(const float* logits, int64_t V, int64_t K, int32_t* ids, float* logp,
                    float* log_tail);

struct TeacherCacheOptions {
  std::string teacher;                 // checkpoint directory
  std::vector<std::string> data;       // shard paths / globs
  std::string out;                     // output directory
  int64_t seq_len = 0, top_k = 0, batch_size = 1;
  int64_t chunk_tokens = 256;          // head logits rows at a time
  data::CacheValueType value_type = data::CacheValueType::bf16;
  std::string device = "cpu";
  int64_t threads = 0;
  bool progress = true;
  bool force = false;                  // write into a non-empty --out (io/output_dir.h)
};

// Runs the teacher over every window and writes the cache; returns its header.
data::CacheHeader build_teacher_cache(const TeacherCacheOptions& options);

}  // namespace kdtrain::cli
