// Memory the ranks of one node map together, so that a fact one rank learns
// (here: which teacher-cache shards are summed, data/shard_checks.h) is
// learnt once per node instead of once per rank. Collective over every rank
// of the job: each constructs it at the same point of the run.
//
// The pages come from a file in /dev/shm whose name rank 0 draws and
// broadcasts once every rank has arrived; each rank of a node with others
// creates or opens it and maps it, and after a second barrier (every rank has
// mapped it) the name is removed, so nothing is left in /dev/shm once the
// ranks unmap it. The name exists only between the two barriers: a rank that
// dies there (it ends the job) leaves the file, the size asked for. Ranks
// that see different /dev/shm (other nodes, or containers of their own) share
// with those that see theirs. A `key` names what the memory holds: a rank
// whose key differs from the one already there keeps private memory, as does
// a rank whose file cannot be made; the contents are then that rank's alone,
// still correct for every user, only less shared (why_private() says why).
//
// Each rank that maps the file is a member with a number of its own, and
// holds a lock on that byte of the file (an open-file-description lock,
// advisory: the byte's contents are untouched) for as long as it keeps the
// memory. The kernel drops the lock when the process ends, however it ends,
// so member_alive() tells a member that died from one still at work, whatever
// pid namespace each is in and whatever process later gets its pid. A child
// forked without exec shares the lock (through its copies of the descriptor
// and of the mapping), and keeps a dead member alive while it runs; exec drops
// both.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "dist/communicator.h"

namespace kdtrain::dist {

class NodeSharedMemory {
 public:
  // `bytes` zeroed bytes, 8-byte aligned, for contents named by `key` (not 0);
  // `purpose` names the file ("kdtrain-<purpose>-<token>").
  NodeSharedMemory(Communicator& comm, size_t bytes, const std::string& purpose, uint64_t key);
  // The same over a file the caller names (tests; processes that agree on a
  // name themselves): joins it at once and leaves it in place.
  NodeSharedMemory(const std::string& path, size_t bytes, uint64_t key);
  ~NodeSharedMemory();
  NodeSharedMemory(const NodeSharedMemory&) = delete;
  NodeSharedMemory& operator=(const NodeSharedMemory&) = delete;

  void* data() { return data_; }
  bool shared() const { return sharers() > 1; }
  // Ranks of this node that have joined this memory, counting those that have
  // left it since (1: private). Once the collective constructor returns, no
  // other rank can join.
  int sharers() const;
  // Why the memory is private: "one rank on this node", or what failed; "" when shared.
  std::string why_private() const;
  // This rank's number among the members (1 when private); never 0.
  uint32_t member() const { return member_; }
  // Whether `member` still holds the memory: this rank, or a live process
  // holding its lock. Throws if the lock cannot be asked about.
  bool member_alive(uint32_t member) const;

 private:
  // Creates or opens `path`, maps it, joins its key and takes a member's
  // lock; false with why_private_ set.
  bool map_file(const std::string& path, uint64_t key);
  void use_private();
  size_t bytes_ = 0;
  int fd_ = -1;              // open while mapped: it holds this member's lock
  void* mapping_ = nullptr;  // the file's pages: a header, then data_
  size_t mapped_bytes_ = 0;
  void* data_ = nullptr;
  uint32_t member_ = 1;
  std::vector<unsigned long long> private_;  // the memory when not mapped
  std::string why_private_;
};

}  // namespace kdtrain::dist
