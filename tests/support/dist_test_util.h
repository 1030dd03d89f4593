// What the data-parallel tests share beyond mpi_util.h (mpirun, under_mpi, the
// visible skip): a child process run with its output logged.
#pragma once
#include <catch2/catch.hpp>

#include <filesystem>
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

}  // namespace kdtrain::testing
