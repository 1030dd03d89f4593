// `kdtrain data` through CLI11 and the helpers behind it.
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/commands.h"
#include "core/error.h"
#include "data/shard.h"
#include "data/shard_tools.h"
#include "support/temp_dir.h"
#include "support/test_common.h"

using namespace kdtrain;
using namespace kdtrain::data;

namespace {

using kdtrain::testing::TempDir;

void run_cli(std::vector<std::string> args) {
  CLI::App app{"test"};
  cli::register_data(app);
  std::vector<const char*> argv = {"kdtrain"};
  for (const std::string& a : args) argv.push_back(a.c_str());
  app.parse(static_cast<int>(argv.size()), argv.data());
}

}  // namespace

TEST_CASE("data tools: text ids and bytes", "[shard][cli]") {
  TempDir tmp;
  std::ofstream(tmp.file("ids.txt")) << "1 2\n 70000\t3\n";
  REQUIRE(read_token_ids_text(tmp.file("ids.txt")) == std::vector<uint32_t>{1, 2, 70000, 3});
  std::ofstream(tmp.file("neg.txt")) << "1 -2";
  REQUIRE_THROWS_WITH(read_token_ids_text(tmp.file("neg.txt")),
                      Contains("neg.txt") && Contains("entry 1") && Contains("-2"));
  std::ofstream(tmp.file("big.txt")) << "4294967296";
  REQUIRE_THROWS_WITH(read_token_ids_text(tmp.file("big.txt")), Contains("entry 0"));
  std::ofstream(tmp.file("raw.bin"), std::ios::binary) << std::string("A\xff\0z", 4);
  REQUIRE(read_bytes_as_tokens(tmp.file("raw.bin")) == std::vector<uint32_t>{65, 255, 0, 122});
  REQUIRE(smallest_shard_version({1, 65535}) == 1);
  REQUIRE(smallest_shard_version({1, 65536}) == 7);
}

TEST_CASE("data cli: write then info", "[shard][cli]") {
  TempDir tmp;
  std::ofstream(tmp.file("ids.txt")) << "5 6 7 100000";
  run_cli({"data", "write", "--out", tmp.file("a.bin"), "--ids", tmp.file("ids.txt")});
  TokenShard a(tmp.file("a.bin"));
  REQUIRE(a.version() == 7);  // 100000 needs uint32
  REQUIRE(a.token(3) == 100000);

  std::ofstream(tmp.file("text.txt")) << "hello";
  run_cli({"data", "write", "--out", tmp.file("b.bin"), "--version", "1", "--bytes", tmp.file("text.txt")});
  TokenShard b(tmp.file("b.bin"));
  REQUIRE(b.version() == 1);
  REQUIRE(b.size() == 5);
  REQUIRE(b.token(0) == 'h');

  REQUIRE_THROWS_WITH(run_cli({"data", "write", "--out", tmp.file("c.bin"), "--version", "1", "--ids",
                               tmp.file("ids.txt")}),
                      Contains("c.bin") && Contains("100000"));
  REQUIRE_THROWS_AS(run_cli({"data", "write", "--out", tmp.file("c.bin"), "--ids", tmp.file("ids.txt"),
                             "--bytes", tmp.file("text.txt")}),
                    CLI::ParseError);
  REQUIRE_THROWS_AS(run_cli({"data", "write", "--out", tmp.file("c.bin"), "--version", "3", "--ids",
                             tmp.file("ids.txt")}),
                    CLI::ParseError);

  std::ostringstream out;
  print_shard_info({tmp.file("*.bin")}, out);
  const std::string text = out.str();
  REQUIRE_THAT(text, Contains("a.bin  version 7  width 4  tokens 4  min 5  max 100000  fingerprint "));
  REQUIRE_THAT(text, Contains("b.bin  version 1  width 2  tokens 5  min 101  max 111"));
  REQUIRE_THAT(text, Contains("total: 2 shards  tokens 9  min 5  max 100000"));
  REQUIRE_THROWS_WITH(print_shard_info({tmp.file("*.nothing")}, out), Contains("*.nothing"));
}
