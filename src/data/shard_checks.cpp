#include "data/shard_checks.h"

#include <cstdint>

#include "core/error.h"

namespace kdtrain::data {

// The processes share the memory, not a std::atomic object: the compiler's
// atomic built-ins act on the plain words, which are lock-free at this size.
static_assert(__atomic_always_lock_free(sizeof(uint64_t), 0),
              "shard checks need lock-free 64-bit atomics to be shared between processes");

ShardChecks::ShardChecks(int64_t shards, void* memory) : slots_(static_cast<Slot*>(memory)), shards_(shards) {
  KD_CHECK(memory != nullptr && reinterpret_cast<uintptr_t>(memory) % alignof(Slot) == 0,
           "shard checks: memory missing or not ", alignof(Slot), "-byte aligned");
}

ShardChecks::Slot& ShardChecks::slot(int64_t shard) const {
  KD_CHECK(shard >= 0 && shard < shards_, "shard checks: shard ", shard, " out of range [0, ", shards_, ")");
  return slots_[shard];
}

uint64_t ShardChecks::load(int64_t shard) const { return __atomic_load_n(&slot(shard).word, __ATOMIC_ACQUIRE); }

bool ShardChecks::claim(int64_t shard, uint32_t claimer) {
  KD_CHECK(claimer != 0, "shard checks: claimer 0 means none");
  uint64_t expected = word(State::unsummed, 0);
  return __atomic_compare_exchange_n(&slot(shard).word, &expected, word(State::summing, claimer), false,
                                     __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

void ShardChecks::finish(int64_t shard, uint64_t computed, bool good) {
  Slot& s = slot(shard);
  __atomic_store_n(&s.computed, computed, __ATOMIC_RELAXED);
  const uint32_t claimer = static_cast<uint32_t>(__atomic_load_n(&s.word, __ATOMIC_RELAXED) >> 32);
  __atomic_store_n(&s.word, word(good ? State::good : State::bad, claimer), __ATOMIC_RELEASE);
}

bool ShardChecks::release(int64_t shard, uint32_t claimer) {
  uint64_t expected = word(State::summing, claimer);
  return __atomic_compare_exchange_n(&slot(shard).word, &expected, word(State::unsummed, 0), false,
                                     __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

ShardChecks::State ShardChecks::state(int64_t shard) const {
  return static_cast<State>(static_cast<uint32_t>(load(shard)));
}

uint32_t ShardChecks::claimer(int64_t shard) const { return static_cast<uint32_t>(load(shard) >> 32); }

uint64_t ShardChecks::computed(int64_t shard) const { return __atomic_load_n(&slot(shard).computed, __ATOMIC_RELAXED); }

}  // namespace kdtrain::data
