#include "dist/node_shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>

namespace kdtrain::dist {
namespace {

constexpr const char* kShmDir = "/dev/shm/";

// A name no other job draws: the process id, the clock and the random device.
std::string fresh_token() {
  std::random_device device;
  const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
  char token[64];
  std::snprintf(token, sizeof token, "%d-%llx-%08x", static_cast<int>(getpid()),
                static_cast<unsigned long long>(now), device());
  return token;
}

std::string failed(const char* call, const std::string& path) {
  return std::string(call) + " " + path + ": " + std::strerror(errno);
}

}  // namespace

NodeSharedMemory::NodeSharedMemory(Communicator& comm, size_t bytes, const std::string& purpose)
    : bytes_(bytes == 0 ? 8 : bytes) {
  if (comm.local_world() > 1) {
    const std::string token = broadcast_string(comm, comm.rank() == 0 ? fresh_token() : "", 0);
    const std::string path = kShmDir + ("kdtrain-" + purpose + "-" + token);
    map_file(path);
    comm.barrier();  // every rank of every node has mapped (or failed to map) the file
    unlink(path.c_str());  // ENOENT on all but one rank per node: the name goes, the pages stay
  } else {
    why_private_ = "one rank on this node";
  }
  if (!mapped_) {
    private_.assign((bytes_ + 7) / 8, 0);
    data_ = private_.data();
  }
}

NodeSharedMemory::~NodeSharedMemory() {
  if (mapped_) munmap(data_, bytes_);
}

bool NodeSharedMemory::map_file(const std::string& path) {
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    why_private_ = failed("open", path);
    return false;
  }
  // Every rank sets the same size: a new file reads as zeros, and a second
  // ftruncate to the same size changes nothing another rank wrote.
  if (ftruncate(fd, static_cast<off_t>(bytes_)) != 0) {
    why_private_ = failed("ftruncate", path);
    close(fd);
    return false;
  }
  void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    why_private_ = failed("mmap", path);
    return false;
  }
  data_ = p;
  mapped_ = true;
  return true;
}

}  // namespace kdtrain::dist
