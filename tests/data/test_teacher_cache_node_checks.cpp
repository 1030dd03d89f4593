// Shard checksums summed once per node (data/shard_checks.h,
// dist/node_shared_memory.h): caches sharing one table of summed shards sum
// each shard once between them, however their threads and reads race; a
// mismatch one finds stops the other's read of that shard, naming it and the
// window; and under mpirun the ranks of a node share the table through
// /dev/shm, so the node sums each shard once (a hidden worker run on 2 and 3
// ranks). Counting sums, not timing them: what the tests check holds in every
// interleaving of the threads and ranks.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "data/shard_checks.h"
#include "data/teacher_cache.h"
#include "data/teacher_cache_prefetch.h"
#include "dist/communicator.h"
#include "dist/node_shared_memory.h"
#include "support/dist_test_util.h"
#include "support/held_child.h"
#include "support/mpi_util.h"
#include "support/synthetic_cache_fixture.h"
#include "support/temp_dir.h"
#if KDTRAIN_HAVE_MPI
#include "dist/mpi_communicator.h"
#endif

using namespace kdtrain;
using namespace kdtrain::testing;
using Catch::Matchers::Contains;

namespace {

// Where the caches of a test keep their shared table (each joins the file as a
// member): /dev/shm, as in a run.
struct TableFile {
  TempDir dir{"node_checks_table", shared_memory_base()};
  std::string path() const { return dir.file("table"); }
};

int64_t sums(const data::TeacherCache& cache) { return cache.shards_summed_ahead() + cache.shards_summed_on_read(); }

}  // namespace

TEST_CASE("node checks: a shard summed through one cache is summed for another sharing its table",
          "[teacher_cache]") {
  TempDir dir("node_checks");
  const std::string path = synthetic_cache(dir, 8, 2);  // 4 shards
  data::TeacherCache a(path), b(path);
  const TableFile table;
  a.share_checks_in_file(table.path());
  b.share_checks_in_file(table.path());
  CHECK(a.checks_shared());
  data::CachePrefetcher reader_a(a);
  reader_a.verify_ahead(first_windows(8));
  reader_a.wait_verified_ahead();
  CHECK(a.shards_summed_ahead() == 4);
  for (int64_t s = 0; s < 4; ++s) CHECK(b.shard_verified(s));
  data::CachePrefetcher reader_b(b);
  CHECK(reader_b.take(first_windows(8)).log_tail.size() == 8 * 6);
  CHECK(sums(b) == 0);  // every shard was summed through a
}

TEST_CASE("node checks: two caches' threads and reads racing over one table sum every shard once",
          "[teacher_cache]") {
  TempDir dir("node_checks_race");
  // 64 shards of one window, 1 MiB each: sums long enough for the threads of
  // the two caches to meet on a shard often.
  const int64_t shards = 64;
  const std::string path = synthetic_cache(dir, shards, 1, 65536);
  data::TeacherCache a(path), b(path);
  const TableFile table;
  a.share_checks_in_file(table.path());
  b.share_checks_in_file(table.path());
  data::CachePrefetcher reader_a(a, 2), reader_b(b, 2);
  std::vector<int64_t> forward = first_windows(shards), backward = forward;
  std::reverse(backward.begin(), backward.end());
  reader_a.request({shards - 1, 5});
  reader_b.request({0, 40});
  while (sums(a) + sums(b) < shards) {
    reader_a.verify_ahead(forward);
    reader_b.verify_ahead(backward);
  }
  CHECK(reader_a.take({shards - 1, 5}).log_tail.size() == 2 * 65536);
  CHECK(reader_b.take({0, 40}).log_tail.size() == 2 * 65536);
  reader_a.wait_verified_ahead();
  reader_b.wait_verified_ahead();
  for (int64_t s = 0; s < shards; ++s) CHECK((a.shard_verified(s) && b.shard_verified(s)));
  // Without the shared claim each cache would sum all 64: 128 in all.
  CHECK(sums(a) + sums(b) == shards);
}

TEST_CASE("node checks: a mismatch found through one cache stops the other's read, naming the shard and window",
          "[teacher_cache]") {
  TempDir dir("node_checks_bad");
  const std::string path = synthetic_cache(dir, 8, 2);
  tamper_record(path, 2);
  data::TeacherCache a(path), b(path);
  const TableFile table;
  a.share_checks_in_file(table.path());
  b.share_checks_in_file(table.path());
  data::CachePrefetcher reader_a(a);
  reader_a.verify_ahead({5});
  reader_a.wait_verified_ahead();  // found, not thrown: a read nothing of it
  data::CachePrefetcher reader_b(b);
  CHECK_THROWS_WITH(reader_b.take({4}), Contains("shard_00002.bin (windows 4..5)") && Contains("checksum mismatch") &&
                                            Contains("window 4"));
  CHECK(sums(b) == 0);  // b's read summed nothing: the mismatch came from the table
  CHECK(reader_b.take({0}).log_tail.size() == 6);
}

TEST_CASE("node checks: sharing is refused once a shard was summed; one rank keeps its table private",
          "[teacher_cache]") {
  TempDir dir("node_checks_late");
  const std::string path = synthetic_cache(dir, 8, 2);
  data::TeacherCache cache(path);
  CHECK_FALSE(cache.checks_shared());
  CHECK(cache.checks_private_reason() == "not shared with other ranks");
  cache.verify_shard(0, 0);
  CHECK_THROWS_WITH(cache.share_checks_in_file(TableFile().path()), Contains("shared after a shard was summed"));
  auto single = dist::make_single_communicator();
  data::TeacherCache alone(path);
  alone.share_checks_on_node(*single);
  CHECK_FALSE(alone.checks_shared());
  CHECK(alone.checks_private_reason() == "one rank on this node");
  alone.verify_shard(3, 7);
  CHECK(alone.shard_verified(3));
}

namespace {

// A process that joins `table` as a member for `cache`'s table, claims shards
// 0..3 and holds them, mid-sum, until finish(); then it exits without summing
// anything, as a rank killed mid-sum would.
HeldChild::Body claim_four(const data::TeacherCache& cache, const std::string& table) {
  const uint64_t key = cache.checks_key();
  return [key, table](const std::function<void(uint32_t)>& hold) {
    dist::NodeSharedMemory memory(table, data::ShardChecks::bytes(4), key);
    data::ShardChecks checks(4, memory.data());
    bool claimed = memory.shared();
    for (int64_t s = 0; s < 4; ++s) claimed = checks.claim(s, memory.member()) && claimed;
    hold(claimed ? memory.member() : 0);
  };
}

// Two reads of each of shards 0..3 of `cache`, on threads of their own;
// `finished` counts those done and `errors` those that threw. The cache
// outlives reads that might wait for ever: they are left behind on failure.
void read_twice_each(const std::shared_ptr<data::TeacherCache>& cache, const std::shared_ptr<std::atomic<int>>& finished,
                     const std::shared_ptr<std::atomic<int>>& errors) {
  for (int reader = 0; reader < 8; ++reader) {
    std::thread([cache, finished, errors, reader] {
      try {
        cache->verify_shard(reader % 4, 2 * (reader % 4));
      } catch (const std::exception&) {
        ++*errors;
      }
      ++*finished;
    }).detach();
  }
}

bool wait_for(const std::atomic<int>& count, int target, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (count < target && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return count >= target;
}

}  // namespace

TEST_CASE("node checks: reads wait for a live member's claims, then claim again those it left by dying",
          "[teacher_cache]") {
  TempDir dir("node_checks_dead");
  const std::string path = synthetic_cache(dir, 8, 2);
  TempDir memory_dir("node_checks_dead_table", shared_memory_base());
  auto cache = std::make_shared<data::TeacherCache>(path);
  cache->share_checks_in_file(memory_dir.file("table"));
  HeldChild child(claim_four(*cache, memory_dir.file("table")));
  REQUIRE(cache->checks_sharers() == 2);
  auto finished = std::make_shared<std::atomic<int>>(0);
  auto errors = std::make_shared<std::atomic<int>>(0);
  read_twice_each(cache, finished, errors);
  // The child lives and holds every shard: no read may take its claims.
  CHECK_FALSE(wait_for(*finished, 1, std::chrono::milliseconds(300)));
  CHECK(cache->shards_summed_on_read() == 0);
  child.finish();
  // Whichever of a shard's two reads releases the dead claim, both must find the shard good.
  REQUIRE(wait_for(*finished, 8, std::chrono::seconds(30)));  // a claim held for ever would hang them
  CHECK(*errors == 0);
  for (int64_t s = 0; s < 4; ++s) CHECK(cache->shard_verified(s));
  CHECK(cache->shards_summed_on_read() == 4);  // each shard once more, by one of its two reads
}

#if KDTRAIN_HAVE_MPI
namespace {

// Rank 0 writes a cache (tampered at `bad_shard` unless -1) of 64 one-window
// shards of 64 KiB under its temporary directory; every rank gets the path.
std::string cache_for_ranks(dist::Communicator& comm, const TempDir* dir, const std::string& name, int64_t bad_shard) {
  std::string path;
  if (comm.rank() == 0) {
    path = synthetic_cache(*dir, 64, 1, 4096, name);
    if (bad_shard >= 0) tamper_record(path, bad_shard);
  }
  path = dist::broadcast_string(comm, path, 0);
  comm.barrier();  // written before any rank opens it
  return path;
}

// The job's communicator, but rank 0 on a node of its own and the others on
// another: an uneven layout (`srun -n 3 -N 2`) on one machine.
class UnevenNodes : public dist::SingleCommunicator {
 public:
  explicit UnevenNodes(dist::Communicator& comm) : comm_(comm) {}
  int rank() const override { return comm_.rank(); }
  int world() const override { return comm_.world(); }
  int local_rank() const override { return comm_.rank() == 0 ? 0 : comm_.rank() - 1; }
  int local_world() const override { return comm_.rank() == 0 ? 1 : comm_.world() - 1; }
  bool distributed() const override { return true; }
  void barrier() override { comm_.barrier(); }
  void broadcast_host(void* data, size_t bytes, int root) override { comm_.broadcast_host(data, bytes, root); }

 private:
  dist::Communicator& comm_;
};

}  // namespace

// Runs inside `mpirun -np W kdtrain_tests "[.cache-node-worker]"`: every rank
// runs on this one node, so every rank shares one table.
TEST_CASE("cache node worker: the ranks of a node sum each shard once", "[.cache-node-worker]") {
  REQUIRE(dist::launched_by_mpi());
  dist::MpiCommunicator comm(60.0);
  const int R = comm.rank(), W = comm.world();
  REQUIRE(comm.local_world() == W);
  std::unique_ptr<TempDir> dir = R == 0 ? std::make_unique<TempDir>("node_checks_mpi") : nullptr;

  {  // the memory itself: one rank's write is every rank's read
    dist::NodeSharedMemory memory(comm, 64, "test", 1);
    INFO(memory.why_private());
    REQUIRE(memory.shared());
    CHECK(memory.sharers() == W);
    if (R == W - 1) std::memcpy(memory.data(), "from the last rank", 19);
    comm.barrier();
    CHECK(std::string(static_cast<const char*>(memory.data())) == "from the last rank");
    // Members 1..W, one each, every one alive to every rank.
    double members = memory.member();
    comm.all_reduce_sum_host(&members, 1);
    CHECK(members == W * (W + 1) / 2.0);
    for (uint32_t m = 1; m <= static_cast<uint32_t>(W); ++m) CHECK(memory.member_alive(m));
    CHECK_FALSE(memory.member_alive(W + 1));
    comm.barrier();
  }

  {  // different contents on every rank: the first rank to map keeps the file, no rank shares
    dist::NodeSharedMemory memory(comm, 64, "test", static_cast<uint64_t>(R) + 1);
    CHECK_FALSE(memory.shared());
    CHECK(memory.why_private() != "");
  }
  {  // rank 0 alone on a node of its own: every rank still takes part in the same collectives
    UnevenNodes uneven(comm);
    dist::NodeSharedMemory memory(uneven, 64, "test", 1);
    CHECK(memory.shared() == (R > 0 && W > 2));
    if (R == 0) CHECK(memory.why_private() == "one rank on this node");
    CHECK(dist::broadcast_string(comm, R == W - 1 ? "in step" : "", W - 1) == "in step");
  }

  const std::string path = cache_for_ranks(comm, dir.get(), "good", -1);
  {
    data::TeacherCache cache(path);
    cache.share_checks_on_node(comm);
    REQUIRE(cache.checks_shared());
    CHECK(cache.checks_sharers() == W);
    data::CachePrefetcher reader(cache, 2);
    std::vector<int64_t> order = first_windows(64);  // each rank starts elsewhere
    std::rotate(order.begin(), order.begin() + R * 64 / W, order.end());
    reader.verify_ahead(order);
    CHECK(reader.take(order).log_tail.size() == 64 * 4096);
    reader.wait_verified_ahead();
    double summed = static_cast<double>(sums(cache));
    comm.all_reduce_sum_host(&summed, 1);
    CHECK(summed == 64.0);  // without the node's table, W x 64
    comm.barrier();         // no rank's cache closes while another still reads
  }

  const std::string bad = cache_for_ranks(comm, dir.get(), "bad", 9);
  {
    data::TeacherCache cache(bad);
    cache.share_checks_on_node(comm);
    data::CachePrefetcher reader(cache, 1);
    if (R == W - 1) {
      reader.verify_ahead({9});
      reader.wait_verified_ahead();
    }
    comm.barrier();  // the last rank has found the mismatch
    if (R != W - 1) {
      CHECK_THROWS_WITH(reader.take({9}), Contains("shard_00009.bin (windows 9..9)") &&
                                              Contains("checksum mismatch") && Contains("window 9"));
      CHECK(sums(cache) == 0);
    }
    comm.barrier();
  }
}
#endif

TEST_CASE("node checks: 2 and 3 ranks of one node sum each shard once, and share a mismatch", "[teacher_cache][mpi]") {
  REQUIRE_MPIRUN();
  TempDir tmp("node_checks_ranks");
  require_worker_passes("[.cache-node-worker]", {2, 3}, tmp.path);
}
