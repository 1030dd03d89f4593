// kdtrain teacher-cache: runs a teacher over every window of the shards (the
// windowing of training: TokenDataset with --seq-len) and writes the top-K
// log-probabilities per target position to <out>/teacher_cache.bin
// (data/teacher_cache.h, docs/distillation.md) through cli/teacher_cache_builder.h.
// Train from it with kd.teacher_cache=<out> and the same data.train and train.seq_len.
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "cli/teacher_cache_builder.h"
#include "core/error.h"

namespace kdtrain::cli {

void register_teacher_cache(CLI::App& app) {
  auto o = std::make_shared<TeacherCacheOptions>();
  auto dtype = std::make_shared<std::string>("bf16");
  auto* command = app.add_subcommand(
      "teacher-cache", "Precompute a teacher's top-k log-probabilities for cached distillation");
  command->add_option("--teacher", o->teacher, "teacher checkpoint directory")->required()->transform(normal_path_option());
  command->add_option("--data", o->data, "token shards (paths or globs), as data.train")
      ->required();
  command->add_option("--seq-len", o->seq_len, "T: tokens per window, as train.seq_len")
      ->required();
  command->add_option("--out", o->out, "output directory")->required()->transform(normal_path_option());
  command->add_flag("--force", o->force, "write into a non-empty --out (never a run or a checkpoint)");
  command->add_option("--top-k", o->top_k, "K: token ids kept per position")->required();
  command->add_option("--batch-size", o->batch_size, "windows per teacher forward");
  command->add_option("--chunk-tokens", o->chunk_tokens, "rows of logits held at once");
  command->add_option("--dtype", *dtype, "log-prob storage: bf16 (default) or f32")
      ->check(CLI::IsMember({"bf16", "f32"}));
  command->add_option("--device", o->device, "cpu or cuda");
  command->add_option("--threads", o->threads, "CPU threads, 0 = all cores");
  command->callback([o, dtype] {
    o->value_type = *dtype == "f32" ? data::CacheValueType::f32 : data::CacheValueType::bf16;
    const data::CacheHeader h = build_teacher_cache(*o);
    const double bytes = 256.0 + 16.0 + static_cast<double>(h.windows) * h.record_bytes();
    std::printf("wrote %s/%s: %lld windows x %lld tokens, top-%lld of %lld, %s, %.1f MiB\n",
                o->out.c_str(), data::kCacheFileName, static_cast<long long>(h.windows),
                static_cast<long long>(h.seq_len), static_cast<long long>(h.K),
                static_cast<long long>(h.V), dtype->c_str(), bytes / (1 << 20));
  });
}

}  // namespace kdtrain::cli
