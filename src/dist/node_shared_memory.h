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
  ~NodeSharedMemory();
  NodeSharedMemory(const NodeSharedMemory&) = delete;
  NodeSharedMemory& operator=(const NodeSharedMemory&) = delete;

  void* data() { return data_; }
  size_t bytes() const { return bytes_; }
  bool shared() const { return sharers_ > 1; }
  // Ranks of this node that mapped this memory by the end of the constructor (1: private).
  int sharers() const { return sharers_; }
  // Why the memory is private: "one rank on this node", or what failed; "" when shared.
  const std::string& why_private() const { return why_private_; }

 private:
  // Creates or opens `path`, maps it and joins its key; false with why_private_ set.
  bool map_file(const std::string& path, uint64_t key);
  size_t bytes_ = 0;
  void* mapping_ = nullptr;  // the file's pages: a header, then data_
  size_t mapped_bytes_ = 0;
  void* data_ = nullptr;
  int sharers_ = 1;
  std::vector<unsigned long long> private_;  // the memory when not mapped
  std::string why_private_;
};

}  // namespace kdtrain::dist
