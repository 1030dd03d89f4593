// What the data-parallel tests share beyond mpi_util.h (mpirun, under_mpi, the
// visible skip): a child process run with its output logged, and a hidden
// worker test case of this test binary run on every rank of an mpirun job.
#pragma once
#include <catch2/catch.hpp>

#include <filesystem>
#include <initializer_list>
#include <string>
#include <vector>

#include "support/mpi_util.h"
#include "support/process_util.h"

namespace kdtrain::testing {

// Runs `args` with its output in `log`, waits up to `timeout_s`, returns the exit code.
inline int run_logged(const std::vector<std::string>& args, const std::filesystem::path& log, std::string* out,
                      double timeout_s = 120.0) {
  const Process p = spawn(args, log.string());
  REQUIRE(p.pid > 0);
  const int code = wait_for(p, timeout_s);
  *out = read_file(log.string());
  return code;
}

// Runs this binary's hidden test case `tag` (e.g. "[.dist-worker]") under
// mpirun on each of `rank_counts`, logging to log_dir/worker<ranks>.log; every
// rank must run the case and pass.
inline void require_worker_passes(const std::string& tag, std::initializer_list<int> rank_counts,
                                  const std::filesystem::path& log_dir) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  for (int ranks : rank_counts) {
    std::string out;
    const int code = run_logged(under_mpi(ranks, {self, tag, "--use-colour", "no"}),
                                log_dir / ("worker" + std::to_string(ranks) + ".log"), &out);
    INFO(ranks << " ranks: " << out);
    CHECK(code == 0);
    CHECK(out.find("All tests passed") != std::string::npos);  // the worker case ran on every rank
    CHECK(out.find("No tests ran") == std::string::npos);
  }
}

}  // namespace kdtrain::testing
