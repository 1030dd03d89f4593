#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "data/dataset.h"
#include "data/shard.h"
#include "support/temp_dir.h"
#include "support/test_common.h"

using namespace kdtrain;
using namespace kdtrain::data;

namespace {

using kdtrain::testing::TempDir;

// A shard with an arbitrary header and payload, for corruption fixtures.
void write_raw_shard(const std::string& path, int32_t magic, int32_t version, int32_t count,
                     const std::vector<uint8_t>& payload) {
  int32_t header[256] = {};
  header[0] = magic;
  header[1] = version;
  header[2] = count;
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header), sizeof(header));
  out.write(reinterpret_cast<const char*>(payload.data()), static_cast<std::streamsize>(payload.size()));
}

std::vector<uint32_t> iota_tokens(size_t n, uint32_t start = 0) {
  std::vector<uint32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = start + static_cast<uint32_t>(i);
  return t;
}

std::string open_error(const std::string& path) {
  return testing::error_message([&] { TokenShard s(path); });
}

}  // namespace

TEST_CASE("shard: write and read both versions", "[shard]") {
  TempDir dir;
  std::vector<uint32_t> tokens = {0, 1, 255, 65535, 7, 42, 3};
  write_shard(dir.file("a.bin"), tokens, 1);
  TokenShard a(dir.file("a.bin"));
  REQUIRE(a.version() == 1);
  REQUIRE(a.width() == 2);
  REQUIRE(a.size() == 7);
  REQUIRE(fs::file_size(dir.file("a.bin")) == 1024 + 7 * 2);
  for (size_t i = 0; i < tokens.size(); ++i) REQUIRE(a.token(i) == tokens[i]);

  tokens.push_back(151935);
  write_shard(dir.file("b.bin"), tokens, 7);
  TokenShard b(dir.file("b.bin"));
  REQUIRE(b.version() == 7);
  REQUIRE(b.width() == 4);
  REQUIRE(b.size() == 8);
  std::vector<int32_t> copy(3);
  b.copy_tokens(5, 3, copy.data());
  REQUIRE(copy == std::vector<int32_t>{42, 3, 151935});
  ShardStats s = b.stats();
  REQUIRE(s.min_id == 0);
  REQUIRE(s.max_id == 151935);
  REQUIRE(s.fingerprint == b.fingerprint());
  REQUIRE_THROWS_WITH(b.token(8), Contains("b.bin") && Contains("out of range"));
  REQUIRE_THROWS_WITH(b.copy_tokens(6, 3, copy.data()), Contains("b.bin"));
}

TEST_CASE("shard: version 1 refuses ids above uint16", "[shard]") {
  TempDir dir;
  REQUIRE_THROWS_WITH(write_shard(dir.file("x.bin"), {1, 65536}, 1),
                      Contains("x.bin") && Contains("65536") && Contains("position 1"));
  REQUIRE_FALSE(fs::exists(dir.file("x.bin")));
  REQUIRE_THROWS_WITH(write_shard(dir.file("x.bin"), {1}, 3), Contains("version 3"));
}

TEST_CASE("shard: fingerprint depends on content and width", "[shard]") {
  TempDir dir;
  std::vector<uint32_t> t = iota_tokens(1001);
  write_shard(dir.file("a.bin"), t, 1);
  write_shard(dir.file("b.bin"), t, 7);
  t[500] += 1;
  write_shard(dir.file("c.bin"), t, 1);
  uint64_t fa = TokenShard(dir.file("a.bin")).fingerprint();
  REQUIRE(fa == TokenShard(dir.file("a.bin")).fingerprint());
  REQUIRE(fa != TokenShard(dir.file("b.bin")).fingerprint());
  REQUIRE(fa != TokenShard(dir.file("c.bin")).fingerprint());
  // The tail (not a multiple of 8 bytes) counts too.
  uint8_t x[3] = {1, 2, 3}, y[3] = {1, 2, 4};
  REQUIRE(token_fingerprint(x, 3, 1) != token_fingerprint(y, 3, 1));
  REQUIRE(token_fingerprint(x, 2, 1) != token_fingerprint(x, 3, 1));
  // Pinned against an independent Python transcription of docs/formats.md, so the
  // definition cannot drift (checkpoints store it to detect changed data).
  const uint32_t five[5] = {1, 2, 3, 4, 5};
  REQUIRE(token_fingerprint(reinterpret_cast<const uint8_t*>(five), 20, 4) == 0x72bc2007e2f9f435ULL);
  REQUIRE(token_fingerprint(nullptr, 0, 4) == 0x111f075d047568a4ULL);
}

TEST_CASE("shard: corrupt files are rejected naming the file", "[shard]") {
  TempDir dir;
  const std::string p = dir.file("bad.bin");
  SECTION("shorter than the header") {
    std::ofstream(p, std::ios::binary) << "tiny";
    REQUIRE_THAT(open_error(p), Contains(p) && Contains("shorter than the 1024-byte header"));
  }
  SECTION("bad magic") {
    write_raw_shard(p, 12345, 1, 0, {});
    REQUIRE_THAT(open_error(p), Contains(p) && Contains("bad magic 12345"));
  }
  SECTION("bad version") {
    write_raw_shard(p, kShardMagicU16, 2, 0, {});
    REQUIRE_THAT(open_error(p), Contains(p) && Contains("version 2"));
  }
  SECTION("magic/version mismatch") {
    write_raw_shard(p, kShardMagicU32, 1, 0, {});
    REQUIRE_THAT(open_error(p), Contains(p) && Contains("requires version 7"));
  }
  SECTION("truncated") {
    write_raw_shard(p, kShardMagicU16, 1, 10, std::vector<uint8_t>(15));
    REQUIRE_THAT(open_error(p), Contains(p) && Contains("truncated"));
  }
  SECTION("trailing bytes") {
    write_raw_shard(p, kShardMagicU32, 7, 2, std::vector<uint8_t>(9));
    REQUIRE_THAT(open_error(p), Contains(p) && Contains("trailing bytes"));
  }
  SECTION("negative count") {
    write_raw_shard(p, kShardMagicU32, 7, -1, {});
    REQUIRE_THAT(open_error(p), Contains(p) && Contains("negative"));
  }
  SECTION("missing file") {
    REQUIRE_THAT(open_error(dir.file("nope.bin")), Contains("nope.bin"));
  }
}

TEST_CASE("shard: validate_vocab names the first offending position", "[shard]") {
  TempDir dir;
  std::vector<uint32_t> t(10000, 5);
  t[7777] = 300;
  t[9000] = 400;
  for (int version : {1, 7}) {
    const std::string p = dir.file("v" + std::to_string(version) + ".bin");
    write_shard(p, t, version);
    TokenShard s(p);
    REQUIRE_NOTHROW(s.validate_vocab(401));
    REQUIRE_THROWS_WITH(s.validate_vocab(256),
                        Contains(p) && Contains("token id 300") && Contains("position 7777") &&
                            Contains("vocabulary size 256"));
  }
}

TEST_CASE("dataset: windows, globs and batches", "[shard][dataset]") {
  TempDir dir;
  write_shard(dir.file("train_000.bin"), iota_tokens(10, 0), 1);    // T=4: (10-1)/4 = 2 windows
  write_shard(dir.file("train_001.bin"), iota_tokens(13, 100), 7);  // (13-1)/4 = 3 windows
  TokenDataset ds({dir.file("train_*.bin")}, 4, 256);
  REQUIRE(ds.shards().size() == 2);
  REQUIRE(ds.shards()[0].path() == dir.file("train_000.bin"));
  REQUIRE(ds.num_windows() == 5);
  std::vector<int32_t> w(5);
  ds.read_window(1, w.data());
  REQUIRE(w == std::vector<int32_t>{4, 5, 6, 7, 8});
  ds.read_window(4, w.data());
  REQUIRE(w == std::vector<int32_t>{108, 109, 110, 111, 112});
  REQUIRE_THROWS_WITH(ds.read_window(5, w.data()), Contains("window 5"));

  std::vector<int32_t> inputs(8), targets(8);
  ds.fill_batch({2, 0}, inputs.data(), targets.data());
  REQUIRE(inputs == std::vector<int32_t>{100, 101, 102, 103, 0, 1, 2, 3});
  REQUIRE(targets == std::vector<int32_t>{101, 102, 103, 104, 1, 2, 3, 4});

  // The dataset fingerprint changes with seq_len.
  TokenDataset ds3({dir.file("train_*.bin")}, 3, 0);
  REQUIRE(ds3.fingerprint() != ds.fingerprint());
  // Listing a file twice (path and glob) opens it once.
  TokenDataset dup({dir.file("train_000.bin"), dir.file("train_00*.bin")}, 4, 0);
  REQUIRE(dup.shards().size() == 2);
}

TEST_CASE("dataset: errors name the pattern or the file", "[shard][dataset]") {
  TempDir dir;
  write_shard(dir.file("short.bin"), iota_tokens(4), 1);
  write_shard(dir.file("big.bin"), iota_tokens(300), 7);
  REQUIRE_THROWS_WITH(TokenDataset({dir.file("none_*.bin")}, 4, 0),
                      Contains("none_*.bin") && Contains("matches no files"));
  REQUIRE_THROWS_WITH(TokenDataset({dir.file("short.bin")}, 4, 0),
                      Contains("short.bin") && Contains("fewer than one window"));
  REQUIRE_THROWS_WITH(TokenDataset({dir.file("big.bin")}, 4, 256),
                      Contains("big.bin") && Contains("token id 256"));
}
