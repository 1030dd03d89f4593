// A teacher checkpoint and a token shard over the llama_like vocabulary (61),
// the `kdtrain teacher-cache` options over them, and a tiny run distilling from
// their cache, shared by the teacher cache tests.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/teacher_cache_builder.h"
#include "data/shard.h"
#include "io/checkpoint_format.h"
#include "model/init.h"
#include "model/param_layout.h"
#include "support/model_fixtures.h"
#include "support/run_parts_fixture.h"
#include "support/temp_dir.h"

namespace kdtrain::testing {

// A teacher checkpoint, a student config and a shard over the fixture vocabulary.
struct CacheFixture {
  TempDir dir;
  ModelConfig teacher_cfg = testing::llama_like();
  ModelConfig student_cfg = testing::llama_like();
  AttentionConfig attention;
  std::string teacher_dir, shard;
  int64_t T = 9;

  explicit CacheFixture(int64_t tokens = 40) {
    teacher_cfg.hidden_size = 48;  // a different (wider) teacher
    teacher_cfg.intermediate_size = 64;
    teacher_cfg.num_attention_heads = 8;
    teacher_cfg.head_dim = 6;
    ParamLayout layout = make_param_layout(teacher_cfg, attention);
    std::vector<float> params = init_params(layout, teacher_cfg, attention, 7);
    for (float& p : params) p *= 20.f;  // sharper teacher distributions
    teacher_dir = dir.file("teacher");
    io::write_model_checkpoint(teacher_dir, teacher_cfg, attention, layout, params.data());
    std::vector<int32_t> t = testing::random_tokens(tokens, teacher_cfg.vocab_size, 3);
    shard = dir.file("data_000.bin");
    data::write_shard(shard, std::vector<uint32_t>(t.begin(), t.end()), 7);
  }

  cli::TeacherCacheOptions options(int64_t K, data::CacheValueType vt) const {
    cli::TeacherCacheOptions o;
    o.teacher = teacher_dir;
    o.data = {shard};
    o.out = dir.file("cache");
    o.seq_len = T;
    o.top_k = K;
    o.batch_size = 2;
    o.chunk_tokens = 5;  // several chunks per batch, not a divisor
    o.value_type = vt;
    o.threads = 2;
    o.progress = false;
    o.shard_windows = 3;  // several shards, the last one short
    return o;
  }
};

// A bf16 top-8 cache of the fixture's data, and a tiny run (global batch 4 of micro-batches
// of 2) that trains the fixture's student from it.
inline Config cached_run_config(CacheFixture& f) {
  cli::build_teacher_cache(f.options(8, data::CacheValueType::bf16));
  Config c = tiny_run_config(f.shard);
  c.model = f.student_cfg;
  c.kd.teacher_cache = f.dir.file("cache");
  c.kd.cache_tail = CacheTail::bucket;
  c.train.seq_len = f.T;
  return c;
}

// Whether `dir` holds a staging temporary (a `.tmp.` name) of an unfinished write.
inline bool has_temporary(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.path().filename().string().find(".tmp.") != std::string::npos) return true;
  return false;
}

}  // namespace kdtrain::testing
