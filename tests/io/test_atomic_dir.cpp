#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "io/atomic_dir.h"
#include "io/file_util.h"
#include "support/temp_dir.h"
#include "support/test_common.h"

using namespace kdtrain;
using namespace kdtrain::io;

namespace {

using kdtrain::testing::TempDir;

void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

size_t entries(const fs::path& dir) {
  return static_cast<size_t>(std::distance(fs::directory_iterator(dir), fs::directory_iterator()));
}

}  // namespace

TEST_CASE("atomic dir: an uncommitted stage never appears under the final name", "[atomic]") {
  TempDir tmp;
  const std::string final_dir = tmp.file("step_1");
  {
    StagedDir stage(final_dir);
    REQUIRE(fs::is_directory(stage.staging_path()));
    write_text(stage.file("a.txt"), "partial");
  }
  REQUIRE_FALSE(fs::exists(final_dir));
  REQUIRE(entries(tmp.path) == 0);  // the staging directory was cleaned up
}

TEST_CASE("atomic dir: a process dying before commit leaves no final directory", "[atomic]") {
  TempDir tmp;
  const std::string final_dir = tmp.file("step_2");
  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // Simulates a crash mid-write: no destructor or commit runs.
    StagedDir* stage = new StagedDir(final_dir);
    write_text(stage->file("model.safetensors"), "half");
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE_FALSE(fs::exists(final_dir));
  REQUIRE(fs::exists(final_dir + ".tmp." + std::to_string(child)));
}

TEST_CASE("atomic dir: commit creates, then replaces, the final directory", "[atomic]") {
  TempDir tmp;
  const std::string final_dir = tmp.file("ckpt");
  {
    StagedDir stage(final_dir);
    write_text(stage.file("a.txt"), "one");
    fs::create_directories(stage.file("sub"));
    write_text(stage.file("sub/b.txt"), "nested");
    stage.commit();
    REQUIRE(stage.committed());
    REQUIRE_THROWS_WITH(stage.commit(), Contains("twice"));
  }
  REQUIRE(read_text(final_dir + "/a.txt") == "one");
  REQUIRE(read_text(final_dir + "/sub/b.txt") == "nested");
  {
    StagedDir stage(final_dir + "/");  // trailing slash names the same directory
    write_text(stage.file("c.txt"), "two");
    stage.commit();
  }
  REQUIRE(read_text(final_dir + "/c.txt") == "two");
  REQUIRE_FALSE(fs::exists(final_dir + "/a.txt"));  // replaced, not merged
  REQUIRE(entries(tmp.path) == 1);                 // no staging or old copies left
}

TEST_CASE("atomic dir: refuses to replace a regular file", "[atomic]") {
  TempDir tmp;
  const std::string target = tmp.file("not_a_dir");
  write_text(target, "x");
  StagedDir stage(target);
  REQUIRE_THROWS_WITH(stage.commit(), Contains(target) && Contains("not a directory"));
  REQUIRE(read_text(target) == "x");
}

TEST_CASE("atomic file: writer leaves nothing behind unless committed", "[atomic]") {
  TempDir tmp;
  const std::string path = tmp.file("f.bin");
  {
    AtomicFileWriter w(path);
    w.write("abc", 3);
  }
  REQUIRE(entries(tmp.path) == 0);
  {
    AtomicFileWriter w(path);
    w.write("abc", 3);
    w.commit();
  }
  REQUIRE(read_text(path) == "abc");
  REQUIRE(entries(tmp.path) == 1);
}
