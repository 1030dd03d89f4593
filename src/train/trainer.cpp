#include "train/trainer.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <memory>

#include "io/model_dir.h"
#include "model/init.h"
#include "train/checkpointer.h"
#include "train/observer.h"
#include "train/rank_agreement.h"
#include "train/reporter.h"
#include "train/run_parts.h"
#include "train/signals.h"
#include "train/train_step.h"

namespace kdtrain {

namespace {

class Trainer {
 public:
  Trainer(const Config& config, const TrainOptions& options, dist::Communicator& comm)
      : options_(options), parts_(config, comm, options.run_dir), reporter_(parts_),
        checkpointer_(parts_, options) {}

  // Set up, then step → report (validation where due) → checkpoint where due,
  // until train.steps or a stop agreed by every rank.
  void run() {
    const int64_t total = parts_.config.train.steps;
    const nlohmann::json pending = setup();
    install_stop_handlers();
    if (step_ >= total) return reporter_.log_already_finished(options_.resume, step_);
    reporter_.start(step_, pending);
    if (options_.observer) options_.observer->on_start(parts_.comm.rank(), parts_.comm.world());
    bool stopped = false;
    while (step_ < total && !stopped) {
      const auto t0 = Clock::now();
      const StepResult r = step_fn_->run(step_ + 1);
      ++step_;
      const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      reporter_.report(step_, r, seconds, step_fn_->skips().skipped);
      stopped = checkpointer_.stop_agreed(reporter_.write_failed());
      if (checkpoint_due(parts_.config, step_, stopped)) save_checkpoint();
    }
    if (stopped) checkpointer_.log_stop(step_);
    reporter_.finish(step_, stopped);
  }

 private:
  // Builds the run's parts (every input checked before the run directory is
  // touched), then starts fresh or resumes. Returns the metrics records a
  // resumed checkpoint carries.
  nlohmann::json setup() {
    parts_.build();
    step_fn_ = std::make_unique<TrainStep>(parts_, options_.observer);
    nlohmann::json pending = nlohmann::json::array();
    if (!options_.resume.empty()) {
      TrainingState state = checkpointer_.resume();
      step_ = state.step;
      step_fn_->skips() = {state.skipped_steps, state.consecutive_skips};
      pending = state.pending_metrics;
    } else {
      const Config& config = parts_.config;
      Model& student = *parts_.student;
      if (!config.model.init.empty()) {
        LoadedModel init = load_model_dir(config.model.init);
        student.set_params(params_for(init, student, config.model.init));
      } else {
        student.set_params(init_params(student.layout(), config.model, config.attention, config.train.seed));
      }
    }
    // Checked on every rank, and the ranks agree, before rank 0 writes anything.
    require_ranks_agree(parts_.comm, {parts_.config, parts_.train_data->fingerprint(), parts_.teacher_fingerprint, step_});
    checkpointer_.open_run();
    reporter_.log_setup(step_fn_->reducer());
    return pending;
  }

  // The metrics synced first, so a checkpoint is never durable ahead of them;
  // the records they lack travel in the checkpoint.
  void save_checkpoint() {
    const LogsAtCheckpoint logs = reporter_.flush();
    if (logs.failure) checkpointer_.save_then_stop(step_, step_fn_->skips(), logs);
    reporter_.set_checkpoint(checkpointer_.save(step_, step_fn_->skips(), logs.pending));
  }

  TrainOptions options_;
  RunParts parts_;
  Reporter reporter_;
  Checkpointer checkpointer_;
  std::unique_ptr<TrainStep> step_fn_;  // after the parts: it hooks the student's backward
  int64_t step_ = 0;                    // optimizer steps completed
};

}  // namespace

void train(const Config& config, const TrainOptions& options) {
  std::unique_ptr<dist::Communicator> comm =
      dist::make_communicator(config.dist.backend, config.train.device, config.dist.timeout_s);
  // Only rank 0 talks on the console; every rank's errors still surface below.
  if (comm->rank() != 0) spdlog::set_level(spdlog::level::err);
  try {
    validate(config, comm->world());
    check_training_path(config);
    Trainer trainer(config, options, *comm);
    trainer.run();
  } catch (const std::exception& e) {
    if (comm->world() == 1) throw;
    // One rank's error must end the job, not leave the others in a collective.
    std::fprintf(stderr, "kdtrain: rank %d of %d: error: %s\n", comm->rank(), comm->world(), e.what());
    std::fflush(stderr);
    comm->abort(1);
  }
}

}  // namespace kdtrain
