#include <catch2/catch.hpp>
#include <algorithm>
#include <set>

#include "core/error.h"
#include "data/sampler.h"

using namespace kdtrain;
using namespace kdtrain::data;
using Catch::Matchers::Contains;

TEST_CASE("sampler: permutation is deterministic and seed dependent", "[sampler]") {
  std::vector<int64_t> a = epoch_permutation(1000, 7, 0);
  REQUIRE(a == epoch_permutation(1000, 7, 0));
  REQUIRE(a != epoch_permutation(1000, 8, 0));
  REQUIRE(a != epoch_permutation(1000, 7, 1));
  std::vector<int64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i) REQUIRE(sorted[i] == i);
  // Pinned values: the order must not change across compilers or releases,
  // or resumed runs would silently read different data.
  std::vector<int64_t> small = epoch_permutation(8, 1234, 0);
  INFO("permutation of 8 for seed 1234");
  REQUIRE(small == std::vector<int64_t>{4, 5, 3, 0, 7, 6, 1, 2});
}

TEST_CASE("sampler: every window exactly once per epoch, epochs roll over", "[sampler]") {
  const int64_t n = 103;
  Sampler s(n, 42);
  std::vector<int64_t> seen;
  while (static_cast<int64_t>(seen.size()) < 3 * n) {
    std::vector<int64_t> b = s.next_global_batch(8);
    REQUIRE(b.size() == 8);
    seen.insert(seen.end(), b.begin(), b.end());
  }
  for (int epoch = 0; epoch < 3; ++epoch) {
    std::vector<int64_t> part(seen.begin() + epoch * n, seen.begin() + (epoch + 1) * n);
    REQUIRE(part == epoch_permutation(n, 42, epoch));
  }
  REQUIRE(s.epoch() >= 3);
  REQUIRE_THROWS_WITH(s.next_global_batch(n + 1), Contains("exceeds"));
}

TEST_CASE("sampler: rank slices are disjoint and cover the global batch", "[sampler]") {
  Sampler s(500, 3);
  for (int world : {1, 2, 3, 4, 7}) {
    std::vector<int64_t> global = s.next_global_batch(24);
    std::vector<int64_t> joined;
    for (int r = 0; r < world; ++r) {
      std::vector<int64_t> part = rank_slice(global, r, world);
      joined.insert(joined.end(), part.begin(), part.end());
    }
    REQUIRE(joined == global);  // contiguous slices in rank order
    REQUIRE(std::set<int64_t>(joined.begin(), joined.end()).size() == global.size());
  }
  REQUIRE(rank_slice({1, 2, 3, 4}, 1, 2) == std::vector<int64_t>{3, 4});
  REQUIRE_THROWS_WITH(rank_slice({1, 2}, 2, 2), Contains("rank 2"));
}

TEST_CASE("sampler: state round trip resumes the same sequence", "[sampler]") {
  Sampler a(37, 99);
  for (int i = 0; i < 6; ++i) a.next_global_batch(10);  // crosses an epoch boundary
  nlohmann::json state = nlohmann::json::parse(a.to_json().dump());
  Sampler b(37, 99);
  b.from_json(state);
  REQUIRE(b.epoch() == a.epoch());
  REQUIRE(b.index() == a.index());
  for (int i = 0; i < 10; ++i) REQUIRE(a.next_global_batch(10) == b.next_global_batch(10));

  Sampler other_seed(37, 100);
  REQUIRE_THROWS_WITH(other_seed.from_json(state, "ckpt/state.json"),
                      Contains("ckpt/state.json") && Contains("seed"));
  Sampler other_size(38, 99);
  REQUIRE_THROWS_WITH(other_size.from_json(state), Contains("windows"));
  REQUIRE_THROWS_WITH(b.from_json({{"seed", 99}}), Contains("epoch"));
}

// The teacher cache's prefetch asks the sampler for the next step's windows
// without drawing them (data/teacher_cache_prefetch.h): the peek is the next
// draw, also when that draw runs into the next epoch (so the first micro-batch
// of an epoch is read ahead too).
TEST_CASE("sampler: peek_global_batch is the next draw, across an epoch too", "[sampler][teacher_cache]") {
  kdtrain::data::Sampler sampler(10, 5);
  for (int step = 0; step < 3; ++step) {
    const std::vector<int64_t> peeked = sampler.peek_global_batch(3);
    REQUIRE(peeked.size() == 3);
    CHECK(sampler.next_global_batch(3) == peeked);
  }
  // index 9 of 10: the next batch takes one window of epoch 0 and two of epoch 1
  const std::vector<int64_t> crossing = sampler.peek_global_batch(3);
  REQUIRE(crossing.size() == 3);
  CHECK(sampler.next_global_batch(3) == crossing);
  CHECK(sampler.epoch() == 1);
  CHECK(sampler.peek_global_batch(11).empty());  // more than the data set: next_global_batch refuses it
  // A whole epoch per batch (the bench's pool): every peek is the next epoch's order.
  kdtrain::data::Sampler whole(4, 9);
  for (int step = 0; step < 3; ++step) {
    const std::vector<int64_t> peeked = whole.peek_global_batch(4);
    REQUIRE(peeked.size() == 4);
    CHECK(whole.next_global_batch(4) == peeked);
  }
  const std::vector<int64_t> peeked = sampler.peek_global_batch(3);  // inside epoch 1 again
  CHECK(sampler.next_global_batch(3) == peeked);
}
