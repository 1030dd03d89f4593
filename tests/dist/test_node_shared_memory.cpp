// dist::NodeSharedMemory over a file the test names, without mpirun: the
// joins of one file share its bytes, each is a member with a number never
// drawn twice, and a member is alive exactly while its process holds the
// memory, which the kernel's lock tells whatever the process's pid is (the
// collective constructor, under mpirun, is in test_teacher_cache_node_checks).
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>

#include "dist/node_shared_memory.h"
#include "support/held_child.h"
#include "support/temp_dir.h"

using namespace kdtrain;
using namespace kdtrain::testing;
using Catch::Matchers::Contains;

namespace {

// A process that joins `file` and holds on as a member; its number() is the member's.
HeldChild::Body join(const std::string& file) {
  return [file](const std::function<void(uint32_t)>& hold) {
    dist::NodeSharedMemory memory(file, 64, 7);
    hold(memory.shared() ? memory.member() : 0);
  };
}

}  // namespace

TEST_CASE("node shared memory: joins of one file share its bytes and are members of their own", "[dist]") {
  TempDir dir("node_memory", shared_memory_base());
  const std::string file = dir.file("memory");
  dist::NodeSharedMemory a(file, 64, 7);
  CHECK_FALSE(a.shared());
  CHECK(a.why_private() == "no other rank of this node mapped it");
  auto b = std::make_unique<dist::NodeSharedMemory>(file, 64, 7);
  INFO(b->why_private());
  REQUIRE((a.shared() && b->shared() && a.sharers() == 2 && a.why_private().empty()));
  std::memcpy(b->data(), "written by b", 13);
  CHECK(std::string(static_cast<const char*>(a.data())) == "written by b");
  CHECK((a.member() == 1 && b->member() == 2));
  CHECK((a.member_alive(2) && b->member_alive(1) && a.member_alive(1)));
  CHECK_FALSE(a.member_alive(3));  // never drawn
  b.reset();
  CHECK_FALSE(a.member_alive(2));  // gone with its memory
  dist::NodeSharedMemory c(file, 64, 7);
  CHECK(c.member() == 3);  // a number is never drawn twice
}

TEST_CASE("node shared memory: other contents, a lock it cannot take, or a file it cannot make stay private",
          "[dist]") {
  TempDir dir("node_memory_private", shared_memory_base());
  dist::NodeSharedMemory a(dir.file("memory"), 64, 7);
  dist::NodeSharedMemory other(dir.file("memory"), 64, 8);
  CHECK_FALSE(other.shared());
  CHECK(other.why_private() == "another rank of this node shares different contents");
  CHECK(other.member() == 1);
  CHECK(other.member_alive(5));  // private: the only member there is, is this one
  // Someone else holds the lock of the next number: a member no one could see die must not share.
  const int fd = open(dir.file("memory").c_str(), O_RDWR | O_CLOEXEC);
  REQUIRE(fd >= 0);
  struct flock lock {};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;
  lock.l_start = 2;
  lock.l_len = 1;
  REQUIRE(fcntl(fd, F_OFD_SETLK, &lock) == 0);
  dist::NodeSharedMemory blocked(dir.file("memory"), 64, 7);
  close(fd);
  CHECK_FALSE(blocked.shared());
  CHECK_THAT(blocked.why_private(), Contains("fcntl(F_OFD_SETLK)"));
  CHECK(a.sharers() == 1);  // the refused join is not counted
  dist::NodeSharedMemory nowhere(dir.file("no/such/dir/memory"), 64, 7);
  CHECK_FALSE(nowhere.shared());
  CHECK_THAT(nowhere.why_private(), Contains("open ") && Contains("no/such/dir"));
}

TEST_CASE("node shared memory: another process's member is alive while it runs and dead once it ends", "[dist]") {
  TempDir dir("node_memory_process", shared_memory_base());
  const std::string file = dir.file("memory");
  dist::NodeSharedMemory here(file, 64, 7);
  HeldChild child(join(file));
  CHECK(child.number() == 2);
  CHECK(here.sharers() == 2);
  CHECK(here.member_alive(2));
  child.finish();
  CHECK_FALSE(here.member_alive(2));
  HeldChild next(join(file));  // whatever pid it gets, its number is new
  CHECK(next.number() == 3);
  CHECK(here.member_alive(3));
  CHECK_FALSE(here.member_alive(2));
}
