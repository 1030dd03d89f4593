// Which teacher-cache shards have had their checksum summed, and what it came
// to, shared by every thread that verifies or reads the cache, and by the
// ranks of a node when the table lives in their shared memory
// (dist/node_shared_memory.h): a shard summed by any of them is summed for
// all, so a node reads each shard once for its checksum instead of once per
// rank (docs/cache_checksums.md).
//
// Each shard is a 16-byte slot: a word holding its state and the member
// (a rank's number in the node's memory, dist::NodeSharedMemory::member) that
// claimed it, then the computed checksum. Lock-free atomics on memory the
// processes map together: a claim is one compare-exchange (unsummed ->
// summing by this member), so exactly one thread of the node sums each
// shard; the sum is stored before the state that publishes it
// (release/acquire). A claim whose member has died can be released, so that
// a rank killed mid-sum leaves no shard the others wait for for ever.
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

  // unsummed -> summing by member `claimer` (not 0); false when another thread or rank has it.
  bool claim(int64_t shard, uint32_t claimer);
  void finish(int64_t shard, uint64_t computed, bool good);  // summing -> good or bad
  // summing by `claimer` -> unsummed (its member died mid-sum); false when the
  // shard has moved on meanwhile.
  bool release(int64_t shard, uint32_t claimer);
  State state(int64_t shard) const;
  uint32_t claimer(int64_t shard) const;   // the member that claimed it (0: none)
  uint64_t computed(int64_t shard) const;  // the sum, once state() is good or bad
  int64_t shards() const { return shards_; }

 private:
  struct Slot {
    uint64_t word;  // State in the low 32 bits, the claimer in the high 32
    uint64_t computed;
  };
  static uint64_t word(State state, uint32_t claimer) {
    return static_cast<uint64_t>(state) | static_cast<uint64_t>(claimer) << 32;
  }
  uint64_t load(int64_t shard) const;
  Slot& slot(int64_t shard) const;
  Slot* slots_ = nullptr;
  int64_t shards_ = 0;
};

}  // namespace kdtrain::data
