// kdtrain teacher-cache: runs a teacher over every window of the shards (the
// windowing of training: TokenDataset with --seq-len) and writes the top-K
// log-probabilities per target position as a sharded cache in --out
// (data/teacher_cache.h, docs/distillation.md) through cli/teacher_cache_builder.h.
// Under mpirun the shards are split among the ranks; rerunning the same command
// resumes. --convert rewrites a version-1 cache. Train from a cache with
// kd.teacher_cache=<out> and the same data.train and train.seq_len.
#include <memory>

#include "cli/commands.h"
#include "config/limits.h"
#include "cli/teacher_cache_builder.h"
#include "core/error.h"

namespace kdtrain::cli {

void register_teacher_cache(CLI::App& app) {
  auto o = std::make_shared<TeacherCacheOptions>();
  auto dtype = std::make_shared<std::string>("bf16");
  auto convert = std::make_shared<std::string>();
  auto* command = app.add_subcommand(
      "teacher-cache", "Precompute a teacher's top-k log-probabilities for cached distillation");
  command->add_option("--teacher", o->teacher, "teacher checkpoint directory")->transform(normal_path_option());
  command->add_option("--data", o->data, "token shards (paths or globs), as data.train");
  command->add_option("--seq-len", o->seq_len, "T: tokens per window, as train.seq_len")
      ->check(in_range<int64_t>(1, SizeLimits::seq_len));
  command->add_option("--out", o->out, "output directory")->required()->transform(normal_path_option());
  command->add_flag("--force", o->force, "write into a non-empty --out (never a run or a checkpoint)");
  command->add_option("--top-k", o->top_k, "K: token ids kept per position")
      ->check(in_range<int64_t>(1, SizeLimits::vocab_size));
  command->add_option("--batch-size", o->batch_size, "windows per teacher forward")
      ->check(in_range<int64_t>(1, SizeLimits::batch));
  command->add_option("--chunk-tokens", o->chunk_tokens, "rows of logits held at once")
      ->check(in_range<int64_t>(1, SizeLimits::chunk_tokens));
  command->add_option("--shard-windows", o->shard_windows, "windows per cache shard (0: about 1 GiB each)")
      ->check(in_range<int64_t>(0, SizeLimits::windows));
  command->add_option("--dtype", *dtype, "log-prob storage: bf16 (default) or f32")
      ->check(CLI::IsMember({"bf16", "f32"}));
  command->add_option("--device", o->device, "cpu or cuda")->check(one_of<Device>());
  command->add_option("--threads", o->threads, "CPU threads, 0 = all cores")
      ->check(in_range<int64_t>(0, SizeLimits::threads));
  command->add_flag("--kernel-times", o->kernel_times,
                    "time the head and trunk GEMMs, the top K and attention on the GPU (kernel_ms in the report; "
                    "events around each launch, so tokens/s is not the untimed rate)");
  command->add_flag("--json", o->json,
                    "print the final report (shape, bytes, tokens written, seconds, tokens/s) as one JSON line");
  command->add_option("--convert", *convert, "rewrite this version-1 cache directory as a sharded cache in --out")
      ->transform(normal_path_option());
  command->callback([o, dtype, convert] {
    o->value_type = *dtype == "f32" ? data::CacheValueType::f32 : data::CacheValueType::bf16;
    if (!convert->empty()) {
      convert_teacher_cache(*convert, *o);
      return;
    }
    KD_CHECK(!o->teacher.empty() && !o->data.empty() && o->seq_len > 0 && o->top_k > 0,
             "teacher-cache: --teacher, --data, --seq-len and --top-k are required (or --convert V1_DIR)");
    build_teacher_cache(*o);
  });
}

}  // namespace kdtrain::cli
