// The cache reader's upload path (data/teacher_cache_prefetch.h over
// backend/upload_lane.h): on a fake device here, the slot protocol and the rows
// that arrive; on CUDA, the same rows and the same step loss with and without
// the reader ahead of the step.
#include <catch2/catch.hpp>

#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "cli/teacher_cache_builder.h"
#include "data/teacher_cache_prefetch.h"
#include "dist/communicator.h"
#include "model/init.h"
#include "support/run_parts_fixture.h"
#include "support/teacher_cache_fixture.h"
#include "train/run_parts.h"
#include "train/train_step.h"

using namespace kdtrain;
using namespace kdtrain::testing;
using Catch::Matchers::Contains;

namespace {

// A device in host memory that checks the protocol of backend/upload_lane.h: a
// slot is filled only while the step does not hold it, acquired only after its
// upload, released only while held, and the step holds one slot at a time.
class FakeLane final : public UploadLane {
 public:
  explicit FakeLane(size_t bytes) : bytes_(bytes) {
    for (int s = 0; s < kSlots; ++s) host_[s].resize(bytes), device_[s].resize(bytes);
  }
  size_t slot_bytes() const override { return bytes_; }
  void* host(int s) const override { return const_cast<char*>(host_[s].data()); }
  void* device(int s) const override { return const_cast<char*>(device_[s].data()); }
  void begin_fill(int s) override { move(s, {State::free, State::uploaded}, State::filling, "begin_fill"); }
  void upload(int s, size_t bytes) override {
    move(s, {State::filling}, State::uploaded, "upload");
    std::lock_guard<std::mutex> lock(mutex_);
    if (bytes > bytes_) violations_.push_back("upload past the slot");
    std::memcpy(device_[s].data(), host_[s].data(), bytes);
    ++uploads_;
  }
  void acquire(int s) override {
    move(s, {State::uploaded}, State::held, "acquire");
    std::lock_guard<std::mutex> lock(mutex_);
    if (state_[1 - s] == State::held) violations_.push_back("acquire while the other slot is held");
  }
  void release(int s) override { move(s, {State::held}, State::free, "release"); }

  std::vector<std::string> violations() {
    std::lock_guard<std::mutex> lock(mutex_);
    return violations_;
  }
  int uploads() {
    std::lock_guard<std::mutex> lock(mutex_);
    return uploads_;
  }

 private:
  enum class State { free, filling, uploaded, held };
  void move(int s, std::initializer_list<State> from, State to, const char* call) {
    std::lock_guard<std::mutex> lock(mutex_);
    bool ok = false;
    for (State f : from) ok |= state_[s] == f;
    if (!ok) violations_.push_back(std::string(call) + " of slot " + std::to_string(s) + " in state " +
                                   std::to_string(static_cast<int>(state_[s])));
    state_[s] = to;
  }
  size_t bytes_;
  std::vector<char> host_[kSlots], device_[kSlots];
  std::mutex mutex_;
  State state_[kSlots] = {State::free, State::free};
  std::vector<std::string> violations_;
  int uploads_ = 0;
};

// The rows of `windows` as the cache decodes them on the calling thread.
CachedRows direct(const data::TeacherCache& cache, const std::vector<int64_t>& windows) {
  CachedRows rows;
  for (int64_t w : windows) cache.append_window(w, rows);
  return rows;
}

// `got` holds device rows (a fake device's host memory) equal to `want`'s host rows.
void check_device_rows(const CachedRows& got, const CachedRows& want) {
  REQUIRE(got.device.ids != nullptr);
  CHECK(got.ids.empty());
  const int64_t n = want.rows(), K = want.K;
  REQUIRE(got.rows() == n);
  CHECK(got.K == K);
  CHECK(std::memcmp(got.device.ids, want.ids.data(), n * K * 4) == 0);
  CHECK(std::memcmp(got.device.logp, want.logp.data(), n * K * 4) == 0);
  CHECK(std::memcmp(got.device.log_tail, want.log_tail.data(), n * 4) == 0);
}

}  // namespace

TEST_CASE("teacher cache reader: uploads through a lane hand each slot over in order", "[teacher_cache]") {
  CacheFixture f(160);  // 17 windows of T = 9
  cli::build_teacher_cache(f.options(8, data::CacheValueType::bf16));
  const data::TeacherCache cache(f.dir.file("cache"));
  auto owned = std::make_unique<FakeLane>(data::CachePrefetcher::slot_bytes(cache.header(), 2));
  FakeLane& lane = *owned;
  data::CachePrefetcher reader(cache, std::move(owned), 2);
  auto take = [&](const std::vector<int64_t>& w) { check_device_rows(reader.take(w), direct(cache, w)); };

  take({0, 1});  // nothing requested: read on the spot
  reader.request({2, 3});
  take({2, 3});
  reader.request({4, 5});
  reader.request({6, 7});  // replaces the request, which may be in flight
  take({6, 7});
  CHECK(reader.hits() == 2);
  reader.request({8, 9});
  take({1, 2});  // not what was asked: read on the spot, the request dropped
  take({8, 9});
  CHECK(reader.misses() == 3);
  for (int64_t m = 0; m < 6; ++m) {  // the step's hook: take this micro-batch, request the next
    take({m, m + 7});
    reader.request({m + 1, m + 8});
  }
  CHECK(reader.hits() == 2 + 5);
  CHECK_THROWS_WITH(reader.take({0, 1, 2}), Contains("3 windows asked for at once") && Contains("hold 2"));
  CHECK(lane.uploads() >= 11);
  const std::vector<std::string> violations = lane.violations();
  for (const std::string& v : violations) UNSCOPED_INFO(v);
  CHECK(violations.empty());
}

namespace {

// The losses of three training steps from a top-8 bf16 cache of the fixture's
// data on `device`: the rows read ahead by the run's reader (on CUDA decoded,
// checked and uploaded by its thread), or read on the step's own thread by the
// cache and uploaded by the loss.
std::vector<double> step_losses(CacheFixture& f, Device device, bool reader_ahead) {
  Config c = tiny_run_config(f.shard);
  c.model = f.student_cfg;
  c.train.seq_len = f.T;
  c.train.device = device;
  c.kd.teacher_cache = f.dir.file("cache");
  c.kd.cache_tail = CacheTail::bucket;
  if (device == Device::cuda) {  // the fused attention kernels take head dims 64 and 128
    c.model.num_attention_heads = c.model.num_key_value_heads = 2;
    c.model.head_dim = 64;
    c.model.hidden_size = 128;
  }
  validate(c);
  dist::SingleCommunicator comm;
  RunParts parts(c, comm, f.dir.file(reader_ahead ? "run_ahead" : "run_direct"));
  parts.build();
  parts.student->set_params(init_params(parts.student->layout(), c.model, c.attention, 1));
  BatchSource source;  // empty: the run's own, its reader ahead
  if (!reader_ahead) {
    const data::TokenDataset* train = parts.train_data.get();
    const data::TeacherCache* cache = parts.cache.get();
    source.tokens = [train](const std::vector<int64_t>& w, int32_t* inputs, int32_t* targets) {
      train->fill_batch(w, inputs, targets);
    };
    source.cached_rows = [cache](const std::vector<int64_t>& w, const std::vector<int64_t>&) {
      return direct(*cache, w);
    };
  }
  TrainStep step(parts, nullptr, std::move(source));
  std::vector<double> losses;
  for (int64_t s = 1; s <= 3; ++s) losses.push_back(step.run(s).loss);
  if (reader_ahead) CHECK(parts.cache_reader->hits() == 5);  // 6 micro-batches, the first read on the spot
  return losses;
}

}  // namespace

// The same rows reach the same kernels either way, so the losses are equal bit
// for bit (every backend op is deterministic, backend.h).
TEST_CASE("teacher cache reader: a step's loss is the same with the reader ahead or not", "[teacher_cache][train]") {
  CacheFixture f(400);
  cli::build_teacher_cache(f.options(8, data::CacheValueType::bf16));
  CHECK(step_losses(f, Device::cpu, true) == step_losses(f, Device::cpu, false));
}

TEST_CASE("cuda: the cache reader uploads the rows; a step's loss is the same with the reader ahead or not",
          "[cuda][teacher_cache]") {
  if (!cuda_available()) {
    WARN("SKIPPED: no CUDA device (the cache reader's upload and its step loss are checked on a GPU)");
    return;
  }
  CacheFixture f(400);
  cli::build_teacher_cache(f.options(8, data::CacheValueType::bf16));
  {
    const data::TeacherCache cache(f.dir.file("cache"));
    auto backend = make_backend(Device::cuda);
    data::CachePrefetcher reader(cache, *backend, 2);
    reader.request({3, 0});
    const CachedRows got = reader.take({3, 0});
    const CachedRows want = direct(cache, {3, 0});
    REQUIRE(got.device.ids != nullptr);
    REQUIRE(got.rows() == want.rows());
    const int64_t n = want.rows(), K = want.K;
    std::vector<int32_t> ids(n * K);
    std::vector<float> logp(n * K), tail(n);
    backend->to_host(ids.data(), got.device.ids, ids.size() * 4);  // on the compute stream: after the upload
    backend->to_host(logp.data(), got.device.logp, logp.size() * 4);
    backend->to_host(tail.data(), got.device.log_tail, tail.size() * 4);
    CHECK(ids == want.ids);
    CHECK(logp == want.logp);
    CHECK(std::memcmp(tail.data(), want.log_tail.data(), n * 4) == 0);
  }
  const std::vector<double> ahead = step_losses(f, Device::cuda, true), direct_reads = step_losses(f, Device::cuda, false);
  CHECK(ahead == direct_reads);
}
