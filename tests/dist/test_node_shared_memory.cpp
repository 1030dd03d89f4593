// dist::NodeSharedMemory over a file the test names, without mpirun: the
// joins of one file share its bytes, each is a member with a number never
// drawn twice, and a member is alive exactly while its process holds the
// memory, which the kernel's lock tells whatever the process's pid is (the
// collective constructor, under mpirun, is in test_teacher_cache_node_checks).
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>

#include "dist/node_shared_memory.h"
#include "support/temp_dir.h"

using namespace kdtrain;
using namespace kdtrain::testing;

namespace {

// A process that joins `file` and stays a member until finish(); it reports its
// member number through a pipe.
struct MemberProcess {
  pid_t pid = -1;
  int release_fd = -1;
  uint32_t member = 0;
  explicit MemberProcess(const std::string& file) {
    int ready[2], release[2];
    REQUIRE(pipe(ready) == 0);
    REQUIRE(pipe(release) == 0);
    pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      close(ready[0]);
      close(release[1]);  // or its read of release[0] never sees the end
      dist::NodeSharedMemory memory(file, 64, 7);
      const uint32_t number = memory.shared() ? memory.member() : 0;
      char unused;
      if (write(ready[1], &number, sizeof number) != sizeof number || read(release[0], &unused, 1) < 0) _exit(2);
      _exit(0);
    }
    close(ready[1]);
    close(release[0]);
    release_fd = release[1];
    const bool told = read(ready[0], &member, sizeof member) == sizeof member;
    close(ready[0]);
    REQUIRE((told && member != 0));
  }
  ~MemberProcess() { finish(); }
  void finish() {
    if (pid < 0) return;
    close(release_fd);
    int status = 0;
    const bool reaped = waitpid(pid, &status, 0) == pid;
    pid = -1;
    CHECK((reaped && WIFEXITED(status) && WEXITSTATUS(status) == 0));
  }
};

}  // namespace

TEST_CASE("node shared memory: joins of one file share its bytes and are members of their own", "[dist]") {
  TempDir dir("node_memory");
  const std::string file = dir.file("memory");
  dist::NodeSharedMemory a(file, 64, 7);
  CHECK_FALSE(a.shared());
  CHECK(a.why_private() == "no other rank of this node mapped it");
  auto b = std::make_unique<dist::NodeSharedMemory>(file, 64, 7);
  CHECK((a.shared() && b->shared() && a.sharers() == 2 && a.why_private().empty()));
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

TEST_CASE("node shared memory: other contents, or a file that cannot be made, stay private", "[dist]") {
  TempDir dir("node_memory_private");
  dist::NodeSharedMemory a(dir.file("memory"), 64, 7);
  dist::NodeSharedMemory other(dir.file("memory"), 64, 8);
  CHECK_FALSE(other.shared());
  CHECK(other.why_private() == "another rank of this node shares different contents");
  CHECK(other.member() == 1);
  CHECK(other.member_alive(5));  // private: the only member there is, is this one
  dist::NodeSharedMemory nowhere(dir.file("no/such/dir/memory"), 64, 7);
  CHECK_FALSE(nowhere.shared());
  CHECK_THAT(nowhere.why_private(), Catch::Matchers::Contains("open ") && Catch::Matchers::Contains("no/such/dir"));
}

TEST_CASE("node shared memory: another process's member is alive while it runs and dead once it ends", "[dist]") {
  TempDir dir("node_memory_process");
  const std::string file = dir.file("memory");
  dist::NodeSharedMemory here(file, 64, 7);
  MemberProcess child(file);
  CHECK(child.member == 2);
  CHECK(here.sharers() == 2);
  CHECK(here.member_alive(child.member));
  child.finish();
  CHECK_FALSE(here.member_alive(2));
  MemberProcess next(file);  // whatever pid it gets, its number is new
  CHECK(next.member == 3);
  CHECK(here.member_alive(3));
  CHECK_FALSE(here.member_alive(2));
}
