// Shards verified ahead of their first read (data/teacher_cache_verifier.h):
// the verifier thread sums the shards of the windows the run reads later, so
// the read that needs them finds them summed; a shard summed ahead is never
// summed again; a mismatch found ahead is thrown by the read that needs the
// shard, naming the shard and that window; in training, the steps after the
// first read no shard the verifier was given. Deterministic: the tests wait for
// the verifier to be idle (wait_verified_ahead) instead of timing it.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli/teacher_cache_builder.h"
#include "data/teacher_cache.h"
#include "data/teacher_cache_prefetch.h"
#include "data/teacher_cache_synthetic.h"
#include "dist/communicator.h"
#include "model/init.h"
#include "support/run_parts_fixture.h"
#include "support/teacher_cache_fixture.h"
#include "support/temp_dir.h"
#include "train/run_parts.h"
#include "train/train_step.h"

using namespace kdtrain;
using Catch::Matchers::Contains;
using kdtrain::testing::CacheFixture;
using kdtrain::testing::TempDir;

namespace {

// 8 windows of T 6, K 4, V 64 in 4 shards of 2 windows.
std::string four_shard_cache(const TempDir& dir) {
  data::CacheHeader shape;
  shape.K = 4;
  shape.V = 64;
  shape.seq_len = 6;
  shape.windows = 8;
  const std::string path = dir.file("cache");
  std::filesystem::create_directories(path);
  data::write_synthetic_cache(path, shape, 2, 11);
  return path;
}

// Flips one bit of a record of shard `shard` (its trailer and the manifest
// keep the old checksum: the cache opens, the checksum fails).
void tamper_record(const std::string& dir, int64_t shard) {
  std::fstream f(dir + "/" + data::cache_shard_file(shard), std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(256 + 40);
  char c = 0;
  f.read(&c, 1);
  c ^= 0x10;
  f.seekp(256 + 40);
  f.write(&c, 1);
}

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

// Training gives the verifier the next steps' windows once per step: after the
// first step (whose reads sum their own shards) every later read finds its
// shard summed, so no step sums a checksum on its reading thread any more.
TEST_CASE("verify ahead: training's later steps read shards the verifier summed", "[teacher_cache][train]") {
  CacheFixture f(400);
  Config c = testing::cached_run_config(f);
  validate(c);
  dist::SingleCommunicator comm;
  RunParts parts(c, comm, f.dir.file("run"));
  parts.build();
  parts.student->set_params(init_params(parts.student->layout(), c.model, c.attention, 1));
  REQUIRE(parts.cache->manifest().shards.size() > 4);
  TrainStep step(parts, nullptr);
  step.run(1);
  parts.cache_reader->wait_verified_ahead();
  const int64_t on_read = parts.cache->shards_summed_on_read();
  CHECK(parts.cache->shards_summed_ahead() > 0);
  for (int64_t s = 2; s <= 3; ++s) {
    // Summed ahead, or by a read before: every shard the next step reads.
    for (int64_t w : parts.sampler->peek_global_batch(c.train.global_batch))
      CHECK(parts.cache->shard_verified(parts.cache->shard_of(w)));
    step.run(s);
    parts.cache_reader->wait_verified_ahead();
  }
  CHECK(parts.cache->shards_summed_on_read() == on_read);
}
