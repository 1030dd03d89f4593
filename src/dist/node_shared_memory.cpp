#include "dist/node_shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>

#include "core/error.h"

namespace kdtrain::dist {
namespace {

constexpr const char* kShmDir = "/dev/shm/";

// The file's first bytes: what the memory holds, how many ranks joined, and
// the last member number drawn (never reused, so no two members share a lock).
struct Header {
  uint64_t key;
  uint64_t sharers;
  uint64_t members;
};
constexpr size_t kHeaderBytes = 64;  // a cache line, keeping data_ aligned
static_assert(sizeof(Header) <= kHeaderBytes, "header outgrew its line");

// A name no other job draws: the process id, the clock and the random device.
std::string fresh_token() {
  std::random_device device;
  const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
  char token[64];
  std::snprintf(token, sizeof token, "%d-%llx-%08x", static_cast<int>(getpid()),
                static_cast<unsigned long long>(now), device());
  return token;
}

// `call` failed on `path` with `error` (errno, saved at once).
std::string failed(const char* call, const std::string& path, int error) {
  return std::string(call) + " " + path + ": " + std::strerror(error);
}

// An exclusive lock on byte `member` of the file: the one that member holds.
struct flock member_lock(uint32_t member) {
  struct flock lock {};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;
  lock.l_start = static_cast<off_t>(member);
  lock.l_len = 1;
  return lock;
}

}  // namespace

NodeSharedMemory::NodeSharedMemory(Communicator& comm, size_t bytes, const std::string& purpose, uint64_t key)
    : bytes_(bytes == 0 ? 8 : bytes) {
  KD_CHECK(key != 0, "node shared memory: key 0 is reserved for a fresh file");
  why_private_ = "one rank on this node";
  if (comm.world() > 1) {  // every rank takes part, so the collectives pair up on any node layout
    comm.barrier();        // all here: the name lives only until the barrier below
    char token[64] = {};  // a fixed size: one broadcast, and only the Communicator interface to link
    if (comm.rank() == 0) std::snprintf(token, sizeof token, "%s", fresh_token().c_str());
    comm.broadcast_host(token, sizeof token, 0);
    const std::string path = kShmDir + ("kdtrain-" + purpose + "-" + token);
    const bool mine = comm.local_world() > 1;
    try {
      if (mine) map_file(path, key);
      comm.barrier();  // every rank of every node has mapped (or failed to map) the file
    } catch (...) {  // the destructor will not run: undo what this rank made
      if (mapping_) munmap(mapping_, mapped_bytes_);
      if (fd_ >= 0) close(fd_);
      if (mine) unlink(path.c_str());
      throw;
    }
    if (mine) unlink(path.c_str());  // ENOENT on all but one rank per node: the name goes, the pages stay
  }
  if (!mapping_) use_private();
}

NodeSharedMemory::NodeSharedMemory(const std::string& path, size_t bytes, uint64_t key)
    : bytes_(bytes == 0 ? 8 : bytes) {
  KD_CHECK(key != 0, "node shared memory: key 0 is reserved for a fresh file");
  if (!map_file(path, key)) use_private();
}

void NodeSharedMemory::use_private() {
  private_.assign((bytes_ + 7) / 8, 0);
  data_ = private_.data();
}

NodeSharedMemory::~NodeSharedMemory() {
  if (mapping_) munmap(mapping_, mapped_bytes_);
  if (fd_ >= 0) close(fd_);  // drops this member's lock
}

int NodeSharedMemory::sharers() const {
  if (!mapping_) return 1;
  return static_cast<int>(__atomic_load_n(&static_cast<const Header*>(mapping_)->sharers, __ATOMIC_ACQUIRE));
}

std::string NodeSharedMemory::why_private() const {
  if (!mapping_) return why_private_;
  return sharers() > 1 ? "" : "no other rank of this node mapped it";
}

bool NodeSharedMemory::member_alive(uint32_t member) const {
  if (member == member_ || fd_ < 0) return true;  // private: this rank is the only member
  struct flock lock = member_lock(member);
  KD_CHECK(fcntl(fd_, F_OFD_GETLK, &lock) == 0, "node shared memory: cannot ask whether member ", member,
           " holds its lock (fcntl F_OFD_GETLK: ", std::strerror(errno), ")");
  return lock.l_type != F_UNLCK;
}

bool NodeSharedMemory::map_file(const std::string& path, uint64_t key) {
  const size_t total = kHeaderBytes + bytes_;
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    why_private_ = failed("open", path, errno);
    return false;
  }
  // fallocate only ever extends, atomically: a new file reads as zeros, and a
  // rank asking for less never shrinks what another maps (ftruncate could).
  if (fallocate(fd, 0, 0, static_cast<off_t>(total)) != 0) {
    why_private_ = failed("fallocate", path, errno);
    close(fd);
    return false;
  }
  void* p = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    why_private_ = failed("mmap", path, errno);
    close(fd);
    return false;
  }
  auto* header = static_cast<Header*>(p);
  uint64_t expected = 0;  // the first rank names the contents; the others must hold the same
  if (!__atomic_compare_exchange_n(&header->key, &expected, key, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) &&
      expected != key) {
    munmap(p, total);
    close(fd);
    why_private_ = "another rank of this node shares different contents";
    return false;
  }
  const auto member = static_cast<uint32_t>(__atomic_add_fetch(&header->members, 1, __ATOMIC_ACQ_REL));
  struct flock lock = member_lock(member);
  if (fcntl(fd, F_OFD_SETLK, &lock) != 0) {  // a member whose death no one could see must not share
    why_private_ = failed("fcntl(F_OFD_SETLK)", path, errno);
    munmap(p, total);
    close(fd);
    return false;
  }
  __atomic_add_fetch(&header->sharers, 1, __ATOMIC_ACQ_REL);
  fd_ = fd;
  member_ = member;
  mapping_ = p;
  mapped_bytes_ = total;
  data_ = static_cast<char*>(p) + kHeaderBytes;
  return true;
}

}  // namespace kdtrain::dist
