#include "data/shard_checks.h"

#include <cstdint>

#include "core/error.h"

namespace kdtrain::data {

// The processes share the memory, not a std::atomic object: the compiler's
// atomic built-ins act on the plain words, which are lock-free at these sizes.
static_assert(__atomic_always_lock_free(sizeof(uint32_t), 0) && __atomic_always_lock_free(sizeof(uint64_t), 0),
              "shard checks need lock-free 32- and 64-bit atomics to be shared between processes");

ShardChecks::ShardChecks(int64_t shards, void* memory) : slots_(static_cast<Slot*>(memory)), shards_(shards) {
  KD_CHECK(memory != nullptr && reinterpret_cast<uintptr_t>(memory) % alignof(Slot) == 0,
           "shard checks: memory missing or not ", alignof(Slot), "-byte aligned");
}

ShardChecks::Slot& ShardChecks::slot(int64_t shard) const {
  KD_CHECK(shard >= 0 && shard < shards_, "shard checks: shard ", shard, " out of range [0, ", shards_, ")");
  return slots_[shard];
}

bool ShardChecks::claim(int64_t shard) {
  uint32_t expected = static_cast<uint32_t>(State::unsummed);
  return __atomic_compare_exchange_n(&slot(shard).state, &expected, static_cast<uint32_t>(State::summing), false,
                                     __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

void ShardChecks::finish(int64_t shard, uint64_t computed, bool good) {
  Slot& s = slot(shard);
  __atomic_store_n(&s.computed, computed, __ATOMIC_RELAXED);
  __atomic_store_n(&s.state, static_cast<uint32_t>(good ? State::good : State::bad), __ATOMIC_RELEASE);
}

ShardChecks::State ShardChecks::state(int64_t shard) const {
  return static_cast<State>(__atomic_load_n(&slot(shard).state, __ATOMIC_ACQUIRE));
}

uint64_t ShardChecks::computed(int64_t shard) const { return __atomic_load_n(&slot(shard).computed, __ATOMIC_RELAXED); }

}  // namespace kdtrain::data
