// Which teacher-cache shards have had their checksum summed, and what it came
// to, shared by every thread that verifies or reads the cache, and by the
// ranks of a node when the table lives in their shared memory
// (dist/node_shared_memory.h): a shard summed by any of them is summed for
// all, so a node reads each shard once for its checksum instead of once per
// rank (docs/cache_checksums.md).
//
// Each shard is a 16-byte slot, its state then the computed checksum. Lock-free
// atomics on memory the processes map together: a claim is one compare-exchange
// (unsummed -> summing), so exactly one thread of the node sums each shard; the
// sum is stored before the state that publishes it (release/acquire).
#pragma once
#include <cstddef>
#include <cstdint>

namespace kdtrain::data {

class ShardChecks {
 public:
  enum class State : uint32_t { unsummed = 0, summing = 1, good = 2, bad = 3 };  // 0: zeroed memory

  static size_t bytes(int64_t shards) { return static_cast<size_t>(shards) * sizeof(Slot); }
  // The table over `memory`: bytes(shards) zeroed (or another process's table
  // of the same cache) bytes, 8-byte aligned, that outlive this object.
  ShardChecks(int64_t shards, void* memory);

  bool claim(int64_t shard);  // unsummed -> summing; false when another thread or rank has it
  void finish(int64_t shard, uint64_t computed, bool good);  // summing -> good or bad
  State state(int64_t shard) const;
  uint64_t computed(int64_t shard) const;  // the sum, once state() is good or bad
  int64_t shards() const { return shards_; }

 private:
  struct Slot {
    uint32_t state;
    uint32_t unused;
    uint64_t computed;
  };
  Slot& slot(int64_t shard) const;
  Slot* slots_ = nullptr;
  int64_t shards_ = 0;
};

}  // namespace kdtrain::data
