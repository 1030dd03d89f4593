// Launching the kdtrain binary under mpirun from tests (the [mpi] tests).
#pragma once
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace kdtrain::testing {

inline std::string find_mpirun() {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    const size_t end = dirs.find(':', start) == std::string::npos ? dirs.size() : dirs.find(':', start);
    const std::filesystem::path candidate = std::filesystem::path(dirs.substr(start, end - start)) / "mpirun";
    if (!candidate.parent_path().empty() && std::filesystem::exists(candidate)) return candidate.string();
    start = end + 1;
  }
  return "";
}

inline std::vector<std::string> mpirun_prefix() {
  return {find_mpirun(), "--oversubscribe", "--allow-run-as-root", "--mca", "mpi_yield_when_idle", "1"};
}

// `args` on `ranks` ranks.
inline std::vector<std::string> under_mpi(int ranks, std::vector<std::string> args) {
  std::vector<std::string> cmd = mpirun_prefix();
  cmd.insert(cmd.end(), {"-np", std::to_string(ranks)});
  cmd.insert(cmd.end(), args.begin(), args.end());
  return cmd;
}

// One job whose rank r runs per_rank[r] (mpirun's `-np 1 A : -np 1 B` form):
// ranks started with different command lines.
inline std::vector<std::string> under_mpi_per_rank(const std::vector<std::vector<std::string>>& per_rank) {
  std::vector<std::string> cmd = mpirun_prefix();
  for (size_t r = 0; r < per_rank.size(); ++r) {
    if (r > 0) cmd.push_back(":");
    cmd.insert(cmd.end(), {"-np", "1"});
    cmd.insert(cmd.end(), per_rank[r].begin(), per_rank[r].end());
  }
  return cmd;
}

}  // namespace kdtrain::testing

#define REQUIRE_MPIRUN()                                                 \
  do {                                                                   \
    if (::kdtrain::testing::find_mpirun().empty()) {                     \
      WARN("SKIPPED: mpirun not found on PATH (install openmpi-bin)");   \
      return;                                                            \
    }                                                                    \
  } while (0)
