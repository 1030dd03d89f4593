// What a training run is made of, built once by the trainer's set-up
// (train/trainer.cpp) and shared by its three companions: the step
// (train/train_step.h), the reporter (train/reporter.h) and the checkpointer
// (train/checkpointer.h). Each companion reads the parts it needs; none owns them.
#pragma once
#include <memory>
#include <string>

#include "backend/backend.h"
#include "config/config.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "data/teacher_cache.h"
#include "data/teacher_cache_prefetch.h"
#include "dist/communicator.h"
#include "dist/grad_reducer.h"
#include "model/loss.h"
#include "model/memory_plan.h"
#include "model/model.h"
#include "train/optimizer.h"

namespace kdtrain {

// What the training path of train.device can run, checked before anything is
// built (training_path_refusal, backend.h): on CUDA the attention runs the fused
// kernels only, so model.head_dim must be 64 or 128 and train.micro_batch and
// model.num_attention_heads at most 65535; the row kernels are not a training path.
void check_training_path(const Config& config);

struct RunParts {
  RunParts(const Config& c, dist::Communicator& m, const std::string& dir) : config(c), comm(m), run_dir(dir) {}

  // Builds everything from `config`, checking every input (data, teacher,
  // cache) before anything is written: the backend, the student (weights not
  // yet set), the loss, the data and sampler, the teacher or its cache, and the
  // optimizer over this rank's range.
  void build();

  Config config;
  dist::Communicator& comm;
  std::string run_dir;  // where config.json, metrics.jsonl and checkpoints/ go
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Model> student, teacher;      // teacher: kd.teacher, else null
  std::unique_ptr<data::TeacherCache> cache;    // kd.teacher_cache, else null
  std::unique_ptr<data::CachePrefetcher> cache_reader;  // reads the cache's rows ahead of the step
  std::unique_ptr<FusedLoss> loss;
  std::unique_ptr<data::TokenDataset> train_data, val_data;  // val_data: null without data.val
  std::unique_ptr<data::Sampler> sampler;
  dist::Range opt_range;  // the arena elements this rank's optimizer owns
  std::unique_ptr<AdamW> optimizer;
  std::string teacher_fingerprint;  // TrainingState::teacher_fingerprint

  bool is_root() const { return comm.rank() == 0; }
  // ZeRO-1: each rank holds the optimizer state of its shard only.
  bool zero1() const { return config.dist.zero1 && comm.distributed(); }
  // KD terms exist with an online or a cached teacher.
  bool has_teacher() const { return teacher != nullptr || cache != nullptr; }
  // Micro-batches per rank per step: global_batch = micro_batch x world x accumulation.
  int64_t accumulation_steps() const {
    return config.train.global_batch / (config.train.micro_batch * comm.world());
  }
  // The memory plan's input for this run on its backend and ranks (model/memory_plan.h):
  // the set-up log prints the plan; `kdtrain bench` prints it beside what it measured.
  MemoryPlanInput memory_plan_input() const;
  // Starts the reader of `cache` for this run's micro-batches (sets
  // cache_reader): build() does, and `kdtrain bench --teacher-cache` on its own cache.
  void start_cache_reader();
  // The loss the step minimises: weight*KD + (1-weight)*CE, or CE without a teacher.
  double mixed_loss(const LossSums& sums) const {
    return sums.mixed(static_cast<float>(config.kd.weight), has_teacher());
  }

 private:
  void load_data();
  void load_teacher();
};

}  // namespace kdtrain
