// Shards verified ahead of their first read (data/teacher_cache_verifier.h):
// the verifier's threads sum the shards of the windows the run reads later, so
// the read that needs them finds them summed; a shard summed ahead is never
// summed again, however many threads race for it; a mismatch found ahead is
// thrown by the read that needs the shard, naming the shard and that window;
// stopping mid-way leaves no shard half-summed; in training, the steps after the
// first read no shard the verifier was given, and the losses do not depend on
// the number of threads. The tests wait for the verifier to be idle
// (wait_verified_ahead) instead of timing it: what they check holds in every
// interleaving of the threads.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "cli/teacher_cache_builder.h"
#include "data/teacher_cache.h"
#include "data/teacher_cache_prefetch.h"
#include "dist/communicator.h"
#include "model/init.h"
#include "support/run_parts_fixture.h"
#include "support/synthetic_cache_fixture.h"
#include "support/teacher_cache_fixture.h"
#include "support/temp_dir.h"
#include "train/run_parts.h"
#include "train/train_step.h"

using namespace kdtrain;
using Catch::Matchers::Contains;
using kdtrain::testing::CacheFixture;
using kdtrain::testing::TempDir;
using kdtrain::testing::first_windows;
using kdtrain::testing::synthetic_cache;
using kdtrain::testing::tamper_record;

namespace {

std::string four_shard_cache(const TempDir& dir) { return synthetic_cache(dir, 8, 2); }

}  // namespace

TEST_CASE("verify ahead: the shards of later windows are summed before their first read, once",
          "[teacher_cache]") {
  TempDir dir("verify_ahead");
  const data::TeacherCache cache(four_shard_cache(dir));
  data::CachePrefetcher reader(cache);
  reader.request({0, 1});               // shard 0: the reader's
  reader.verify_ahead({4, 2, 5, 6, 3});  // shards 2, 1 and 3, in that order
  reader.wait_verified_ahead();
  CHECK(cache.shard_verified(1));
  CHECK(cache.shard_verified(2));
  CHECK(cache.shard_verified(3));
  CHECK(cache.shards_summed_ahead() == 3);
  CHECK(reader.take({0, 1}).log_tail.size() == 12);
  CHECK(cache.shard_verified(0));
  CHECK(cache.shards_summed_on_read() == 1);  // shard 0 only
  // Reading the shards summed ahead sums nothing more.
  CHECK(reader.take({4, 2, 7}).log_tail.size() == 18);
  CHECK(cache.shards_summed_on_read() == 1);
  CHECK(cache.shards_summed_ahead() == 3);
  // A list of shards all summed gives the verifier nothing to do.
  reader.verify_ahead({0, 7});
  reader.wait_verified_ahead();
  CHECK(cache.shards_summed_ahead() == 3);
}

TEST_CASE("verify ahead: a mismatch found ahead stops the read that needs the shard, naming it and the window",
          "[teacher_cache]") {
  TempDir dir("verify_ahead_bad");
  const std::string path = four_shard_cache(dir);
  tamper_record(path, 2);
  const data::TeacherCache cache(path);  // opening reads headers and trailers only
  data::CachePrefetcher reader(cache);
  reader.verify_ahead({5});
  reader.wait_verified_ahead();  // found, not thrown: no read needed the shard yet
  CHECK(cache.shards_summed_ahead() == 1);
  CHECK_FALSE(cache.shard_verified(2));
  CHECK(reader.take({0}).log_tail.size() == 6);  // another shard reads fine
  reader.request({4});
  CHECK_THROWS_WITH(reader.take({4}), Contains("shard_00002.bin (windows 4..5)") && Contains("checksum mismatch") &&
                                          Contains("window 4"));
  CHECK_THROWS_WITH(reader.take({5}), Contains("shard_00002.bin") && Contains("window 5"));
  CHECK(cache.shards_summed_ahead() == 1);  // the mismatch was kept, not summed again
  CHECK(cache.shards_summed_on_read() == 1);
}

TEST_CASE("verify ahead: windows_ahead lists this rank's windows of the next steps, less those requested",
          "[teacher_cache][sampler]") {
  data::Sampler sampler(10, 3);
  const std::vector<int64_t> order = sampler.peek_in_epoch(10);
  REQUIRE(order.size() == 10);
  // Steps of 4 windows on 2 ranks: rank 1 reads the last 2 of each step.
  const std::vector<int64_t> requested = {order[2]};
  CHECK(data::windows_ahead(sampler, 4, 5, 1, 2, requested) ==
        std::vector<int64_t>{order[3], order[6], order[7]});  // two whole steps left in the epoch
  sampler.next_global_batch(8);
  CHECK(data::windows_ahead(sampler, 4, 5, 0, 1, {}).empty());  // 2 windows left: no whole step
}

TEST_CASE("verify threads: threads race for the shards and every shard is summed exactly once", "[teacher_cache]") {
  TempDir dir("verify_threads_race");
  // 64 shards of one window, 1 MiB each: each sum outlasts the scheduler's time
  // slices on a loaded machine often enough that threads meet on one shard.
  const int64_t shards = 64;
  const data::TeacherCache cache(synthetic_cache(dir, shards, 1, 65536));
  data::CachePrefetcher reader(cache, 4);
  REQUIRE(reader.verify_threads() == 4);
  // The list is given again and again while the threads sum, each time naming
  // again the shards being summed (not verified yet), until every shard is
  // summed; meanwhile the reader reads two windows of it.
  const std::vector<int64_t> all = first_windows(shards);
  reader.request({shards - 1, 5});
  while (cache.shards_summed_ahead() + cache.shards_summed_on_read() < shards) reader.verify_ahead(all);
  CHECK(reader.take({shards - 1, 5}).log_tail.size() == 2 * 65536);
  reader.verify_ahead(all);
  reader.wait_verified_ahead();
  for (int64_t s = 0; s < shards; ++s) CHECK(cache.shard_verified(s));
  // A shard summed twice would count twice: as many sums as shards is once each.
  CHECK(cache.shards_summed_ahead() + cache.shards_summed_on_read() == shards);
}

TEST_CASE("verify threads: a mismatch found by one of several threads stops the read that needs the shard",
          "[teacher_cache]") {
  TempDir dir("verify_threads_bad");
  const std::string path = synthetic_cache(dir, 16, 2);  // 8 shards of 2 windows
  tamper_record(path, 2);
  tamper_record(path, 5);
  const data::TeacherCache cache(path);
  data::CachePrefetcher reader(cache, 3);
  reader.verify_ahead(first_windows(16));
  reader.wait_verified_ahead();  // found, not thrown: no read needed the shards yet
  CHECK(cache.shards_summed_ahead() == 8);
  CHECK_FALSE(cache.shard_verified(2));
  CHECK_FALSE(cache.shard_verified(5));
  CHECK(reader.take({0, 15}).log_tail.size() == 12);  // other shards read fine
  reader.request({11});
  CHECK_THROWS_WITH(reader.take({11}), Contains("shard_00005.bin (windows 10..11)") &&
                                           Contains("checksum mismatch") && Contains("window 11"));
  CHECK_THROWS_WITH(reader.take({4}), Contains("shard_00002.bin (windows 4..5)") && Contains("window 4"));
  CHECK(cache.shards_summed_ahead() == 8);  // the mismatches were kept, not summed again
  CHECK(cache.shards_summed_on_read() == 0);
}

TEST_CASE("verify threads: stopping mid-verification leaves no shard half-summed", "[teacher_cache]") {
  TempDir dir("verify_threads_stop");
  const data::TeacherCache cache(synthetic_cache(dir, 256, 1));
  {
    data::CachePrefetcher reader(cache, 4);
    reader.verify_ahead(first_windows(256));
    reader.request({0});
  }  // destroyed at once: each thread finishes the shard in hand, the rest stay unsummed
  const int64_t ahead = cache.shards_summed_ahead(), on_read = cache.shards_summed_on_read();
  CHECK(ahead + on_read <= 256);
  // A shard left claimed would make its read wait for ever; each shard not summed
  // is summed by its read, once (this reader is given no list to verify ahead).
  data::CachePrefetcher again(cache, 1);
  for (int64_t w = 0; w < 256; ++w) CHECK(again.take({w}).log_tail.size() == 6);
  CHECK(cache.shards_summed_ahead() == ahead);
  CHECK(cache.shards_summed_on_read() == 256 - ahead);  // every shard summed once in all
}

TEST_CASE("verify threads: kd.cache_verify_threads, or 0 for the rank's cores less 2, 1 to 4", "[teacher_cache]") {
  CHECK(data::verify_threads(3, 2, 1) == 3);     // as configured, whatever the machine
  CHECK(data::verify_threads(0, 2, 1) == 1);     // 2 cores: at least one
  CHECK(data::verify_threads(0, 0, 1) == 1);     // cores unknown
  CHECK(data::verify_threads(0, 5, 1) == 3);
  CHECK(data::verify_threads(0, 64, 1) == 4);    // at most 4
  CHECK(data::verify_threads(0, 48, 8) == 4);    // 6 cores per rank
  CHECK(data::verify_threads(0, 16, 8) == 1);    // 2 cores per rank
}

namespace {

// Trains steps 1 to 3 from the fixture's cache with `threads` verifier threads:
// after the first step (whose reads sum their own shards) every later read finds
// its shard summed. Returns the losses.
std::vector<double> train_three_steps(CacheFixture& f, Config c, int64_t threads, const std::string& run) {
  c.kd.cache_verify_threads = threads;
  validate(c);
  dist::SingleCommunicator comm;
  RunParts parts(c, comm, f.dir.file(run));
  parts.build();
  parts.student->set_params(init_params(parts.student->layout(), c.model, c.attention, 1));
  REQUIRE(parts.cache->manifest().shards.size() > 4);
  CHECK(parts.cache_reader->verify_threads() == threads);
  TrainStep step(parts, nullptr);
  std::vector<double> losses = {step.run(1).loss};
  parts.cache_reader->wait_verified_ahead();
  const int64_t on_read = parts.cache->shards_summed_on_read();
  CHECK(parts.cache->shards_summed_ahead() > 0);
  for (int64_t s = 2; s <= 3; ++s) {
    // Summed ahead, or by a read before: every shard the next step reads.
    for (int64_t w : parts.sampler->peek_global_batch(c.train.global_batch))
      CHECK(parts.cache->shard_verified(parts.cache->shard_of(w)));
    losses.push_back(step.run(s).loss);
    parts.cache_reader->wait_verified_ahead();
  }
  CHECK(parts.cache->shards_summed_on_read() == on_read);
  return losses;
}

}  // namespace

// Training gives the verifier the next steps' windows once per step, so no
// later step sums a checksum on its reading thread; the checksums only gate the
// reads, so the losses are the same, bit for bit, with one thread or three.
TEST_CASE("verify ahead: training's later steps read shards the verifier summed", "[teacher_cache][train]") {
  CacheFixture f(400);
  const Config c = testing::cached_run_config(f);
  CHECK(train_three_steps(f, c, 1, "run1") == train_three_steps(f, c, 3, "run3"));
}
