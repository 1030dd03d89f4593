// Bucketed gradient reduction in one process: the bucket plan, the
// reducer's launch rule (a bucket goes when all of it is final, buckets in a
// fixed order, the same buckets with overlap on and off) against a recording
// transport, and the model's "gradients final" hook (ranges tile the arena in
// backward order, and nothing is written to a range after it was reported).
// The MPI transport itself is tested under mpirun in test_dist.cpp.
#include <catch2/catch.hpp>

#include <algorithm>

#include "backend/backend.h"
#include "dist/grad_reducer.h"
#include "model/init.h"
#include "model/loss.h"
#include "model/model.h"
#include "support/model_fixtures.h"

using namespace kdtrain;
using namespace kdtrain::testing;

namespace {

// Records what the reducer asks of the transport.
struct Log {
  std::vector<dist::Range> started;
  int polls = 0, waits = 0;
};

class RecordingTransport final : public dist::BucketTransport {
 public:
  explicit RecordingTransport(Log& log) : log_(log) {}
  void start(const dist::Range& b) override { log_.started.push_back(b); }
  void poll() override { ++log_.polls; }
  void wait_all() override { ++log_.waits; }

 private:
  Log& log_;
};

class RecordingCommunicator final : public dist::SingleCommunicator {
 public:
  Log log;
  std::string name() const override { return "recording"; }
  bool distributed() const override { return true; }
  std::unique_ptr<dist::BucketTransport> make_bucket_transport(float*, int64_t, bool, void*) override {
    return std::make_unique<RecordingTransport>(log);
  }
};

}  // namespace

TEST_CASE("grad buckets: tile the arena from its end, aligned, at most the bucket size", "[dist][overlap]") {
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{64}, int64_t{1000}, int64_t{109384}, int64_t{1} << 33}) {
    for (int64_t size : {int64_t{1}, int64_t{64}, int64_t{100}, int64_t{6553600}}) {
      if (n > (int64_t{1} << 30) && size < 6553600) continue;  // 2^27 buckets: 2 GiB of ranges
      INFO("n " << n << ", bucket " << size);
      const std::vector<dist::Range> buckets = dist::plan_buckets(n, size);
      const int64_t limit = std::max<int64_t>(64, size / 64 * 64);
      int64_t end = n;
      bool tiles = true;  // one CHECK for up to 2^27 buckets
      for (const dist::Range& b : buckets) {
        tiles = tiles && b.end == end && b.begin < b.end && b.begin % 64 == 0 && b.size() <= limit;
        end = b.begin;
      }
      CHECK(tiles);
      CHECK(end == 0);
      CHECK(buckets.size() == size_t((n + limit - 1) / limit));
    }
  }
  CHECK(dist::bucket_elements_for_mib(25.0) == 25 * 262144);
  CHECK_THROWS_WITH(dist::bucket_elements_for_mib(0.0), Catch::Contains("dist.bucket_mb"));
}

TEST_CASE("grad reducer: a bucket launches once all of it is final, in a fixed order", "[dist][overlap]") {
  RecordingCommunicator comm;
  const int64_t n = 1000;
  dist::GradReduceOptions options;
  options.bucket_elements = 256;  // buckets [768,1000) [512,768) [256,512) [0,256)
  std::vector<float> grads(n);
  dist::GradReducer reducer(comm, grads.data(), n, options, nullptr);
  REQUIRE(reducer.buckets().size() == 4);
  std::vector<dist::Range> hooked;
  reducer.set_before_launch([&](const dist::Range& b) { hooked.push_back(b); });

  reducer.begin_step();
  reducer.mark_final(900, 1000);
  CHECK(comm.log.started.empty());  // [768, 1000) is not complete yet
  reducer.mark_final(600, 900);     // completes bucket 0, half of bucket 1
  REQUIRE(comm.log.started.size() == 1);
  CHECK(comm.log.started[0].begin == 768);
  reducer.mark_final(0, 300);       // bucket 3 complete, but bucket 1 and 2 go first
  CHECK(comm.log.started.size() == 1);
  reducer.mark_final(300, 600);     // 1, 2 and 3 complete: launched in order
  REQUIRE(comm.log.started.size() == 4);
  CHECK(comm.log.started[1].begin == 512);
  CHECK(comm.log.started[2].begin == 256);
  CHECK(comm.log.started[3].begin == 0);
  CHECK(comm.log.polls == 4);
  reducer.finish();
  CHECK(comm.log.started.size() == 4);
  CHECK(comm.log.waits == 1);
  REQUIRE(hooked.size() == 4);  // the hook sees every bucket just before its launch
  CHECK(hooked[3].begin == 0);

  // Marks outside a step (earlier micro-batches' backward) count for nothing;
  // finish() launches what was never marked, still in order.
  comm.log.started.clear();
  reducer.mark_final(0, 1000);
  CHECK(comm.log.started.empty());
  reducer.begin_step();
  reducer.mark_final(768, 1000);
  CHECK(comm.log.started.size() == 1);
  CHECK_THROWS_WITH(reducer.begin_step(), Catch::Contains("finish"));
  reducer.finish();
  REQUIRE(comm.log.started.size() == 4);
  for (size_t i = 0; i < 4; ++i) CHECK(comm.log.started[i].begin == reducer.buckets()[i].begin);
  CHECK_THROWS_WITH(reducer.mark_final(10, 2000), Catch::Contains("outside the arena"));
}

TEST_CASE("grad reducer: with overlap off the same buckets launch after the backward", "[dist][overlap]") {
  std::vector<std::vector<dist::Range>> launched;
  for (bool overlap : {true, false}) {
    RecordingCommunicator comm;
    std::vector<float> grads(5000);
    dist::GradReduceOptions options;
    options.bucket_elements = 700;
    options.overlap = overlap;
    dist::GradReducer reducer(comm, grads.data(), 5000, options, nullptr);
    reducer.begin_step();
    for (int64_t end = 5000; end > 0; end -= 333) reducer.mark_final(std::max<int64_t>(0, end - 333), end);
    CHECK(comm.log.started.size() == (overlap ? reducer.buckets().size() : 0));
    reducer.finish();
    launched.push_back(comm.log.started);
  }
  REQUIRE(launched[0].size() == launched[1].size());
  for (size_t i = 0; i < launched[0].size(); ++i) {
    CHECK(launched[0][i].begin == launched[1][i].begin);
    CHECK(launched[0][i].end == launched[1][i].end);
  }
}

TEST_CASE("model: gradient ranges reported final tile the arena and are never written again",
          "[dist][overlap][model]") {
  const ModelConfig configs[] = {llama_like(), qwen_like()};  // tied and untied lm_head
  for (const ModelConfig& m : configs) {
    for (AttentionVariant v : kAllVariants) {
      INFO(m.family << " " << to_string(v));
      std::unique_ptr<Backend> backend = make_backend("cpu", 1);
      AttentionConfig attention;
      attention.variant = v;
      Model model(m, attention, *backend);
      model.set_params(init_params(model.layout(), m, attention, 5));
      FusedLoss loss(*backend);
      const int64_t B = 2, T = 5;
      const std::vector<int32_t> tokens = random_tokens(B * T + 1, m.vocab_size, 3);
      const std::vector<int32_t> in(tokens.begin(), tokens.end() - 1), tg(tokens.begin() + 1, tokens.end());
      // Snapshots of each range when reported: compared with the final arena.
      std::vector<std::pair<dist::Range, std::vector<float>>> reported;
      model.set_grads_final_hook([&](int64_t begin, int64_t end) {
        const float* g = model.grads();
        reported.push_back({{begin, end}, std::vector<float>(g + begin, g + end)});
      });
      model.zero_grads();
      for (int micro = 0; micro < 2; ++micro) {  // accumulation: the second pass adds to the first
        reported.clear();
        model.forward(in.data(), B, T, false);
        LossSettings s;
        s.chunk_tokens = 4;
        loss.run(model, nullptr, tg.data(), s, 0.1f, true);
        model.backward();
      }
      const std::vector<float> final_grads = model.get_grads();
      int64_t end = model.layout().total;
      for (const auto& [range, snapshot] : reported) {
        CHECK(range.end == end);  // descending and contiguous
        end = range.begin;
        CHECK(snapshot == std::vector<float>(final_grads.begin() + range.begin, final_grads.begin() + range.end));
      }
      CHECK(end == 0);
    }
  }
}
