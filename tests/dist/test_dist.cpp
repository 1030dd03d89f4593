// Data parallelism (issues 6 and 18), the unit level: shard boundaries, the
// single-process communicator, the MPI collectives on odd sizes against
// rank-ordered sums (a hidden worker test run under mpirun), the per-rank
// optimizer memory `kdtrain info` reports, and bench --collectives. The
// training runs under mpirun are in test_dist_e2e.cpp.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "data/shard.h"
#include "support/dist_test_util.h"
#include "dist/communicator.h"
#include "dist/grad_reducer.h"
#include "dist/mpi_communicator.h"
#include "io/safetensors.h"
#include "support/process_util.h"
#include "support/temp_dir.h"

using namespace kdtrain;
using namespace kdtrain::testing;

namespace fs = std::filesystem;

TEST_CASE("dist: shard ranges tile the arena, near-equal and aligned", "[dist]") {
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{63}, int64_t{1000}, int64_t{109384}, int64_t{1} << 33}) {
    for (int world : {1, 2, 3, 4, 7, 8}) {
      int64_t covered = 0;
      for (int r = 0; r < world; ++r) {
        const dist::Range s = dist::shard_range(n, r, world);
        CHECK(s.begin == covered);
        CHECK(s.begin % 64 == 0);
        CHECK(s.size() <= n / world + 64);
        covered = s.end;
      }
      CHECK(covered == n);
    }
  }
  CHECK_THROWS_WITH(dist::shard_range(10, 2, 2), Catch::Contains("out of range"));
}

TEST_CASE("dist: without a launcher the communicator is a single process", "[dist]") {
  auto comm = dist::make_single_communicator();
  CHECK(comm->world() == 1);
  CHECK(comm->rank() == 0);
  CHECK_FALSE(comm->distributed());
  std::vector<float> x(200, 2.f);
  dist::GradReducer reducer(*comm, x.data(), 200, {}, nullptr);
  reducer.begin_step();
  reducer.mark_final(0, 200);
  reducer.finish();
  CHECK(x == std::vector<float>(200, 2.f));
  CHECK(comm->any(true));
  CHECK_FALSE(comm->any(false));
  CHECK(dist::broadcast_string(*comm, "abc", 0) == "abc");
}

#if KDTRAIN_HAVE_MPI
// Runs inside `mpirun -np W kdtrain_tests "[.dist-worker]"` (hidden from the
// normal run): the MPI collectives on odd sizes, against sums computed here in
// rank order from every rank's reproducible inputs. The gradient buckets are
// marked final in a different order on every rank (the launch order is the
// reducer's, so ranks still agree), straddle shard boundaries, and are
// reduced in fp32 and in bf16 (fp32 sums of bf16-rounded contributions).
TEST_CASE("dist worker: MPI collectives against rank-ordered sums", "[.dist-worker]") {
  REQUIRE(dist::launched_by_mpi());
  dist::MpiCommunicator comm(60.0);
  comm.set_round_elements(997);  // several all-gather rounds per shard
  const int W = comm.world(), R = comm.rank();
  auto contribution = [](int rank, int64_t i) {
    return static_cast<float>(std::sin(0.37 * double(i) + rank) * (1.0 + rank * 1e-3));
  };
  for (int64_t n : {int64_t{1}, int64_t{100}, int64_t{10007}}) {
    for (bool bf16 : {false, true}) {
      for (int64_t bucket : {int64_t{64}, int64_t{1000}, int64_t{1} << 20}) {
        for (bool overlap : {true, false}) {
          INFO("n = " << n << ", bucket " << bucket << (bf16 ? ", bf16" : ", fp32")
                      << (overlap ? ", overlap" : "") << ", rank " << R << " of " << W);
          auto rounded = [&](int rank, int64_t i) {
            const float x = contribution(rank, i);
            return bf16 ? io::bf16_to_float(io::float_to_bf16(x)) : x;
          };
          std::vector<float> expected(n);
          for (int64_t i = 0; i < n; ++i) {
            float sum = rounded(0, i);
            for (int r = 1; r < W; ++r) sum += rounded(r, i);
            expected[i] = sum;
          }
          std::vector<float> data(n);
          for (int64_t i = 0; i < n; ++i) data[i] = contribution(R, i);
          dist::GradReduceOptions options;
          options.bucket_elements = bucket;
          options.overlap = overlap;
          options.bf16 = bf16;
          dist::GradReducer reducer(comm, data.data(), n, options, nullptr);
          for (int step = 0; step < 2; ++step) {  // buffers reused by the second step
            for (int64_t i = 0; i < n; ++i) data[i] = contribution(R, i);
            reducer.begin_step();
            std::vector<int64_t> cuts;  // this rank's own order of 37-element ranges
            for (int64_t begin = 0; begin < n; begin += 37) cuts.push_back(begin);
            std::mt19937 shuffle(static_cast<unsigned>(R * 7 + step));
            std::shuffle(cuts.begin(), cuts.end(), shuffle);
            for (int64_t begin : cuts) reducer.mark_final(begin, std::min(n, begin + 37));
            reducer.finish();
            const dist::Range mine = dist::shard_range(n, R, W);
            for (int64_t i = mine.begin; i < mine.end; ++i) REQUIRE(data[i] == expected[i]);  // bit-exact
          }
          comm.all_gather(data.data(), n);
          REQUIRE(data == expected);
        }
      }
    }
  }
  std::vector<double> host = {double(R), 1.0};
  comm.all_reduce_sum_host(host.data(), 2);
  CHECK(host[0] == double(W * (W - 1) / 2));
  CHECK(host[1] == double(W));
  CHECK(dist::broadcast_string(comm, R == 1 ? "from rank 1" : "", 1) == "from rank 1");
  CHECK(comm.any(R == W - 1));
  CHECK_FALSE(comm.any(false));
  comm.barrier();
}
#endif

TEST_CASE("dist: MPI collectives are rank-ordered sums on 2, 3 and 4 ranks", "[dist][mpi]") {
  REQUIRE_MPIRUN();
  TempDir tmp("collectives");
  require_worker_passes("[.dist-worker]", {2, 3, 4}, tmp.path);
}

TEST_CASE("dist: kdtrain info shows per-rank optimizer memory under ZeRO-1", "[dist][info]") {
  TempDir tmp("info");
  std::string one, eight;
  REQUIRE(run({KDTRAIN_BINARY, "info", "--preset", "llama3.2-1b", "--world-size", "1"}, &one,
              (tmp.path / "1.log").string()) == 0);
  REQUIRE(run({KDTRAIN_BINARY, "info", "--preset", "llama3.2-1b", "--world-size", "8"}, &eight,
              (tmp.path / "8.log").string()) == 0);
  INFO(one << "\n----\n" << eight);
  CHECK(eight.find("ZeRO-1 over 8 ranks") != std::string::npos);
  CHECK(one != eight);
}

TEST_CASE("dist: bench --collectives times MPI's reduction beside the communication model", "[dist][mpi][scaling]") {
  REQUIRE_MPIRUN();
  TempDir tmp("collective_bench");
  std::string out;
  const int code = run_logged(under_mpi(2, {KDTRAIN_BINARY, "bench", "--collectives", "--steps", "1", "--json"}),
                              tmp.path / "bench.log", &out, 300.0);
  INFO(out);
  REQUIRE(code == 0);
  const size_t start = out.find("{\"");
  REQUIRE(start != std::string::npos);
  const nlohmann::json j = nlohmann::json::parse(out.substr(start, out.find('\n', start) - start));
  CHECK(j["world"] == 2);
  CHECK(j["link"]["p2p_gb_s"].get<double>() > 0.0);
  REQUIRE(j["rows"].size() == 12);  // 3 arena sizes x (3 bucket sizes + the all-gather)
  for (const auto& row : j["rows"]) {
    CHECK(row["measured_ms"].get<double>() > 0.0);
    CHECK(row["predicted_ms"].get<double>() > 0.0);
  }
}
