#include "data/sampler.h"

#include <algorithm>

#include "core/error.h"

namespace kdtrain::data {

namespace {

// splitmix64 (Steele, Lea, Flood 2014): tiny state, full period 2^64, and its
// output passes BigCrush, which is plenty for shuffling.
struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, bound) without modulo bias: Lemire's multiply-shift with rejection.
  uint64_t below(uint64_t bound) {
    unsigned __int128 m = static_cast<unsigned __int128>(next()) * bound;
    uint64_t low = static_cast<uint64_t>(m);
    if (low < bound) {
      const uint64_t threshold = (0 - bound) % bound;
      while (low < threshold) {
        m = static_cast<unsigned __int128>(next()) * bound;
        low = static_cast<uint64_t>(m);
      }
    }
    return static_cast<uint64_t>(m >> 64);
  }
};

}  // namespace

std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  // Derive the epoch stream by hashing (seed, epoch) through the generator so
  // neighbouring seeds or epochs give unrelated orders.
  SplitMix64 init{seed};
  SplitMix64 rng{init.next() ^ (static_cast<uint64_t>(epoch) * 0xd1342543de82ef95ULL)};
  rng.state = rng.next();
  for (int64_t i = n - 1; i > 0; --i) {
    const int64_t j = static_cast<int64_t>(rng.below(static_cast<uint64_t>(i) + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

Sampler::Sampler(int64_t num_windows, uint64_t seed) : num_windows_(num_windows), seed_(seed) {
  KD_CHECK(num_windows > 0, "sampler: the dataset has no windows");
  start_epoch(0);
}

void Sampler::start_epoch(int64_t epoch) {
  epoch_ = epoch;
  index_ = 0;
  order_ = epoch_permutation(num_windows_, seed_, epoch);
}

std::vector<int64_t> Sampler::next_global_batch(int64_t global_batch) {
  KD_CHECK(global_batch > 0, "sampler: global batch must be positive, got ", global_batch);
  // A batch larger than the dataset would repeat windows within one step.
  KD_CHECK(global_batch <= num_windows_, "sampler: global batch ", global_batch,
           " exceeds the ", num_windows_, " windows in the dataset");
  std::vector<int64_t> batch;
  batch.reserve(static_cast<size_t>(global_batch));
  while (static_cast<int64_t>(batch.size()) < global_batch) {
    if (index_ == num_windows_) start_epoch(epoch_ + 1);
    batch.push_back(order_[index_++]);
  }
  return batch;
}

std::vector<int64_t> Sampler::peek_global_batch(int64_t global_batch) const {
  if (global_batch <= 0 || global_batch > num_windows_) return {};
  if (index_ + global_batch <= num_windows_)
    return std::vector<int64_t>(order_.begin() + index_, order_.begin() + index_ + global_batch);
  // The batch runs into the next epoch, whose order is as deterministic as this one's.
  std::vector<int64_t> batch(order_.begin() + index_, order_.end());
  const std::vector<int64_t> next = epoch_permutation(num_windows_, seed_, epoch_ + 1);
  batch.insert(batch.end(), next.begin(), next.begin() + (global_batch - static_cast<int64_t>(batch.size())));
  return batch;
}

std::vector<int64_t> Sampler::peek_in_epoch(int64_t count) const {
  const int64_t end = index_ + std::max<int64_t>(0, std::min(count, num_windows_ - index_));
  return std::vector<int64_t>(order_.begin() + index_, order_.begin() + end);
}

nlohmann::json Sampler::to_json() const {
  return {{"seed", seed_}, {"epoch", epoch_}, {"index", index_}, {"num_windows", num_windows_}};
}

void Sampler::from_json(const nlohmann::json& state, const std::string& source) {
  KD_CHECK(state.is_object(), source, ": sampler state must be an object");
  for (const char* key : {"seed", "epoch", "index", "num_windows"})
    KD_CHECK(state.contains(key) && state[key].is_number_integer(), source, ": sampler state key '",
             key, "' missing or not an integer");
  const uint64_t seed = state["seed"].get<uint64_t>();
  const int64_t n = state["num_windows"].get<int64_t>();
  const int64_t epoch = state["epoch"].get<int64_t>();
  const int64_t index = state["index"].get<int64_t>();
  KD_CHECK(seed == seed_, source, ": sampler seed ", seed, " differs from the configured seed ", seed_);
  KD_CHECK(n == num_windows_, source, ": sampler state has ", n, " windows but the dataset has ",
           num_windows_, " (data or seq_len changed)");
  KD_CHECK(epoch >= 0 && index >= 0 && index <= num_windows_, source, ": sampler position (epoch ",
           epoch, ", index ", index, ") out of range");
  start_epoch(epoch);
  index_ = index;
}

std::vector<int64_t> rank_slice(const std::vector<int64_t>& global_batch, int rank, int world_size) {
  KD_CHECK(world_size > 0 && rank >= 0 && rank < world_size, "rank_slice: rank ", rank,
           " out of range for world size ", world_size);
  const int64_t G = static_cast<int64_t>(global_batch.size());
  const int64_t begin = rank * G / world_size;
  const int64_t end = (rank + 1) * G / world_size;
  return std::vector<int64_t>(global_batch.begin() + begin, global_batch.begin() + end);
}

}  // namespace kdtrain::data
