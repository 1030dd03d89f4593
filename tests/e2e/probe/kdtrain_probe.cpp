// kdtrain_probe: `kdtrain train` with a TrainObserver, for the data-parallel
// tests (tests/dist/test_dist.cpp). The production binary has no such hooks.
//
//   kdtrain_probe [--record DIR] [--nan-at R:S] [--kill-at R:S:K] [--stop-at R:S:K] train ...
//
// --record DIR   every rank writes DIR/rank<r>.pid at start and appends one JSON
//                line per step to DIR/rank<r>.jsonl: its window ids and their first
//                input tokens, alpha_ma, an FNV-1a hash of its master weights,
//                loss, grad norm and whether the update was applied;
// --nan-at R:S   rank R puts a NaN into its local gradients at step S, in the
//                middle of the arena (another rank's shard), before it is reduced;
// --kill-at R:S:K / --stop-at R:S:K
//                rank R raises SIGKILL / SIGSTOP at step S when its K-th gradient
//                bucket (0-based, in launch order) becomes ready, so buckets
//                0..K-1 are already in flight on every rank: a rank that dies or
//                hangs in the middle of the gradient reduction.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "cli/commands.h"
#include "model/model.h"
#include "train/observer.h"

namespace fs = std::filesystem;
using namespace kdtrain;

namespace {

struct StepPoint {
  int rank = -1;
  long long step = -1, bucket = -1;
  static StepPoint parse(const std::string& text, bool with_bucket) {
    StepPoint p;
    const int want = with_bucket ? 3 : 2;
    if (!text.empty() &&
        std::sscanf(text.c_str(), "%d:%lld:%lld", &p.rank, &p.step, &p.bucket) != want)
      throw CLI::ValidationError("expected " + std::string(with_bucket ? "R:S:K" : "R:S") + ", got " + text);
    return p;
  }
};

class Probe final : public TrainObserver {
 public:
  std::string record_dir, nan_at, kill_at, stop_at;

  void on_start(int rank, int) override {
    rank_ = rank;
    nan_ = StepPoint::parse(nan_at, false);
    kill_ = StepPoint::parse(kill_at, true);
    stop_ = StepPoint::parse(stop_at, true);
    if (record_dir.empty()) return;
    fs::create_directories(record_dir);
    const std::string stem = (fs::path(record_dir) / ("rank" + std::to_string(rank))).string();
    std::ofstream(stem + ".pid") << getpid() << "\n";
    log_ = std::make_unique<std::ofstream>(stem + ".jsonl", std::ios::app);
  }

  void on_micro_batch(int64_t step, const int32_t* inputs, int64_t B, int64_t T) override {
    if (step != step_) {
      step_ = step;
      first_tokens_.clear();
      buckets_ = 0;
    }
    for (int64_t j = 0; j < B; ++j) first_tokens_.push_back(inputs[j * T]);
  }

  void on_grads_ready(int64_t step, int64_t begin, int64_t end, Model& student) override {
    const int64_t bucket = buckets_++;
    const int64_t middle = student.layout().total / 2;
    if (nan_.rank == rank_ && nan_.step == step && begin <= middle && middle < end) {
      const float nan = std::nanf("");
      student.backend().to_device(student.grads() + middle, &nan, sizeof nan);
    }
    for (const auto& [point, signal] : {std::pair{kill_, SIGKILL}, std::pair{stop_, SIGSTOP}})
      if (point.rank == rank_ && point.step == step && point.bucket == bucket) {
        std::fprintf(stderr, "kdtrain_probe: rank %d raises signal %d at step %lld, bucket %lld\n", rank_,
                     signal, static_cast<long long>(step), static_cast<long long>(bucket));
        std::fflush(stderr);
        raise(signal);
      }
  }

  void on_step_end(const StepObservation& o, Model& student) override {
    if (!log_) return;
    const std::vector<float> params = student.get_params();
    uint64_t hash = 1469598103934665603ull;  // FNV-1a over the bytes of the master arena
    for (float p : params) {
      uint32_t bits;
      std::memcpy(&bits, &p, sizeof bits);
      for (int i = 0; i < 4; ++i) hash = (hash ^ ((bits >> (8 * i)) & 0xFF)) * 1099511628211ull;
    }
    nlohmann::json rec;
    rec["step"] = o.step;
    rec["rank"] = o.rank;
    rec["world"] = o.world;
    rec["windows"] = *o.windows;
    rec["first_tokens"] = first_tokens_;  // what the rank actually read
    rec["alpha_ma"] = student.variant().alpha_ma();
    rec["weights_fnv"] = std::to_string(hash);
    rec["loss"] = o.loss;
    rec["grad_norm"] = o.grad_norm;
    rec["applied"] = o.applied;
    *log_ << rec.dump() << "\n";
    log_->flush();
  }

 private:
  int rank_ = 0;
  StepPoint nan_, kill_, stop_;
  std::unique_ptr<std::ofstream> log_;
  int64_t step_ = -1, buckets_ = 0;
  std::vector<int32_t> first_tokens_;
};

}  // namespace

int main(int argc, char** argv) {
  Probe probe;
  CLI::App app{"kdtrain_probe: kdtrain train with test hooks (tests only)"};
  app.require_subcommand(1);
  app.add_option("--record", probe.record_dir, "per-rank step records into this directory");
  app.add_option("--nan-at", probe.nan_at, "R:S: NaN into rank R's local gradients at step S");
  app.add_option("--kill-at", probe.kill_at, "R:S:K: rank R raises SIGKILL at step S, gradient bucket K");
  app.add_option("--stop-at", probe.stop_at, "R:S:K: rank R raises SIGSTOP at step S, gradient bucket K");
  kdtrain::cli::register_train(app, &probe);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kdtrain: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
