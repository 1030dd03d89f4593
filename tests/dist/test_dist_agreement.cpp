// Every rank of a job checks everything, and the ranks agree, before anything
// is written (train/rank_agreement.h). The ranks
// are started with different command lines through mpirun's `A : B` form.
#include <catch2/catch.hpp>

#include <filesystem>

#include "support/mpi_util.h"
#include "support/process_util.h"
#include "support/reliability_util.h"
#include "support/temp_dir.h"

using namespace kdtrain;
using namespace kdtrain::testing;

namespace {

std::vector<std::string> rank_args(const std::string& shard, const fs::path& run_dir,
                                   const std::vector<std::string>& more = {}) {
  return plus(tiny_train_args(shard, run_dir.string(), 2, 2),
              plus({"--set", "train.threads=1", "--set", "dist.timeout_s=60"}, more));
}

// A two-rank job on one shard whose run directory must not appear when the ranks disagree.
struct TwoRankJob {
  TempDir tmp;
  std::string shard;
  fs::path run_dir;
  std::string out;  // the job's output, of the last run

  TwoRankJob(const std::string& name, uint32_t seed)
      : tmp(name), shard(text_shard(tmp.path, "train.bin", 20000, seed)), run_dir(tmp.path / "run") {}

  // Rank 1 adds `other` to rank 0's command line; the exit code of mpirun.
  int run_with_rank1_adding(const std::vector<std::string>& other) {
    return run(under_mpi_per_rank({rank_args(shard, run_dir), rank_args(shard, run_dir, other)}), &out,
               tmp.file("job.log"));
  }
};

}  // namespace

TEST_CASE("dist: ranks started with different configs are refused before anything is written",
          "[reliability][dist][mpi]") {
  REQUIRE_MPIRUN();
  TwoRankJob job("agree", 11);
  // Before: both ranks trained together without a word, exit 0, and checkpointed.
  for (const std::vector<std::string>& other : {std::vector<std::string>{"--set", "optimizer.lr=0.002"},
                                                std::vector<std::string>{"--set", "train.seed=7"}}) {
    INFO(other[1]);
    const int code = job.run_with_rank1_adding(other);
    INFO(job.out);
    CHECK(code != 0);
    require_all(job.out, {"started with different configs", other[1].substr(0, other[1].find('=')), "on rank 1"});
    CHECK_FALSE(fs::exists(job.run_dir));
  }
  // Same config: trains.
  REQUIRE(run(under_mpi(2, rank_args(job.shard, job.run_dir)), &job.out, job.tmp.file("ok.log")) == 0);
  CHECK(metrics_of(job.run_dir).size() == 2);
}

TEST_CASE("dist: a config error on one rank ends the job before rank 0 creates the run directory",
          "[reliability][dist][mpi]") {
  REQUIRE_MPIRUN();
  TwoRankJob job("agree_error", 12);
  for (const std::vector<std::string>& broken :
       {std::vector<std::string>{"--set", "train.seq_len=abc"},                         // rejected while resolving
        std::vector<std::string>{"--set", "data.train=" + job.tmp.file("missing.bin")}}) {  // rejected in the checks
    INFO(broken[1]);
    // Before: rank 0 created the run directory (config.json, lock) before rank 1's error ended the job.
    const int code = job.run_with_rank1_adding(broken);
    INFO(job.out);
    CHECK(code != 0);
    CHECK_FALSE(fs::exists(job.run_dir));
  }
}
