// Memory the ranks of one node map together, so that a fact one rank learns
// (here: which teacher-cache shards are summed, data/shard_checks.h) is
// learnt once per node instead of once per rank. Collective: every rank
// constructs it at the same point of the run.
//
// The pages come from a file in /dev/shm whose name rank 0 draws and
// broadcasts; each rank creates or opens it, maps it, and after a barrier
// (every rank has mapped it) removes the name, so nothing is left behind once
// the ranks unmap it, even if they die. Ranks that see different /dev/shm
// (another node, or a container of their own) simply share with those that
// see theirs. Where the file cannot be made the rank keeps private memory and
// says why (shared() false, why_private()): the contents are then only this
// rank's, which is still correct for every user, only less shared.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "dist/communicator.h"

namespace kdtrain::dist {

class NodeSharedMemory {
 public:
  // `bytes` zeroed bytes, 8-byte aligned; `purpose` names the file
  // ("kdtrain-<purpose>-<token>").
  NodeSharedMemory(Communicator& comm, size_t bytes, const std::string& purpose);
  ~NodeSharedMemory();
  NodeSharedMemory(const NodeSharedMemory&) = delete;
  NodeSharedMemory& operator=(const NodeSharedMemory&) = delete;

  void* data() { return data_; }
  size_t bytes() const { return bytes_; }
  // Mapped from the node's file: other ranks of this node may see it.
  bool shared() const { return mapped_; }
  // Why the memory is private: "one rank on this node", or the failed call.
  const std::string& why_private() const { return why_private_; }

 private:
  // Creates or opens `path` at bytes_ and maps it; false with why_private_ set.
  bool map_file(const std::string& path);
  size_t bytes_ = 0;
  void* data_ = nullptr;
  bool mapped_ = false;
  std::vector<unsigned long long> private_;  // the memory when not mapped
  std::string why_private_;
};

}  // namespace kdtrain::dist
