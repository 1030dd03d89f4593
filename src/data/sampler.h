// Deterministic order over a dataset's windows. Each epoch is a Fisher-Yates
// shuffle of [0, num_windows) driven by our own splitmix64 generator seeded from
// (seed, epoch), so the order is identical across compilers and standard
// libraries (std:: distributions are implementation-defined). The position is
// (epoch, index into that epoch's order); it round-trips through JSON so a
// resumed run continues with exactly the same windows.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kdtrain::data {

// The permutation of [0, n) for one epoch.
std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch);

class Sampler {
 public:
  Sampler(int64_t num_windows, uint64_t seed);

  // Window ids of the next optimizer step (global_batch windows, all ranks),
  // continuing into the next epoch when this one runs out.
  std::vector<int64_t> next_global_batch(int64_t global_batch);
  // The batch next_global_batch would return, without drawing it (into the next
  // epoch's order where this one runs out); empty for a batch it would refuse.
  std::vector<int64_t> peek_global_batch(int64_t global_batch) const;

  // Up to `count` windows next_global_batch draws next, as far as the current
  // epoch's order goes.
  std::vector<int64_t> peek_in_epoch(int64_t count) const;

  int64_t epoch() const { return epoch_; }
  int64_t index() const { return index_; }
  int64_t num_windows() const { return num_windows_; }
  uint64_t seed() const { return seed_; }

  // {"seed", "epoch", "index", "num_windows"}.
  nlohmann::json to_json() const;
  // Restores a position; the seed and num_windows must match this sampler's
  // (a mismatch means different data or config), else an error naming `source`.
  void from_json(const nlohmann::json& state, const std::string& source = "sampler state");

 private:
  void start_epoch(int64_t epoch);
  int64_t num_windows_;
  uint64_t seed_;
  int64_t epoch_ = 0;
  int64_t index_ = 0;
  std::vector<int64_t> order_;
};

// Rank r's contiguous slice [r*G/W, (r+1)*G/W) of a global batch of G windows.
// Slices of all ranks are disjoint and together form the global batch.
std::vector<int64_t> rank_slice(const std::vector<int64_t>& global_batch, int rank, int world_size);

}  // namespace kdtrain::data
