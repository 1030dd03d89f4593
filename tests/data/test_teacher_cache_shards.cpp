// The sharded teacher cache (data/teacher_cache.h): compact records, the
// manifest and shards a build writes, opening in O(shards) (a 100 GB sparse
// cache), bad caches refused naming the shard and the window (missing,
// truncated, tampered, another cache's shard, wrong manifest, bad values),
// `kdtrain verify`, and version-1 caches refused then converted.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>

#include "cli/teacher_cache_builder.h"
#include "cli/teacher_cache_verify.h"
#include "core/bf16.h"
#include "data/teacher_cache.h"
#include "data/teacher_cache_prefetch.h"
#include "data/teacher_cache_v1.h"
#include "data/teacher_cache_writer.h"
#include "support/teacher_cache_fixture.h"

using namespace kdtrain;
using Catch::Matchers::Contains;
using kdtrain::testing::CacheFixture;
using kdtrain::testing::TempDir;
namespace fs = std::filesystem;

namespace {

std::vector<char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// K ids per position of windows of seq_len tokens, over a vocabulary of V.
data::CacheHeader cache_header(int64_t K, int64_t V, int64_t seq_len, int64_t windows = 0) {
  data::CacheHeader h;
  h.K = K;
  h.V = V;
  h.seq_len = seq_len;
  h.windows = windows;
  return h;
}

// Rows that pass the value checks (io/teacher_cache_values.h): distinct ids, log-probs descending, the tail
// holding what they leave.
struct Rows {
  std::vector<int32_t> ids;
  std::vector<float> logp, tail;
};
Rows valid_rows(const data::CacheHeader& h, uint32_t seed) {
  std::mt19937 rng(seed);
  Rows r;
  const int64_t T = h.seq_len, K = h.K;
  r.ids.resize(T * K);
  r.logp.resize(T * K);
  r.tail.resize(T);
  std::vector<int32_t> perm(h.V);
  for (int64_t t = 0; t < T; ++t) {
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    double kept = 0.0;
    for (int64_t k = 0; k < K; ++k) {
      r.ids[t * K + k] = perm[k];
      const double p = (K == h.V ? 1.0 : 0.9) / K * (k == 0 ? 1.5 : k == 1 ? 0.5 : 1.0);
      r.logp[t * K + k] = static_cast<float>(std::log(p));
      kept += p;
    }
    std::sort(r.logp.begin() + t * K, r.logp.begin() + (t + 1) * K, std::greater<float>());
    r.tail[t] = K == h.V ? -INFINITY : static_cast<float>(std::log(1.0 - kept));
  }
  return r;
}

}  // namespace

TEST_CASE("teacher cache: records pack ids in ceil(log2 V) bits and round-trip", "[teacher_cache][cache_format]") {
  data::CacheHeader h;
  h.K = 64;
  h.seq_len = 2048;
  for (const auto& [V, bits] : std::vector<std::pair<int64_t, int>>{{128256, 17}, {151936, 18}}) {
    h.V = V;
    CHECK(h.id_bits() == bits);
    // Version 1: 6K + 4 bytes per token (32-bit ids, bf16 log-probs, f32 tail).
    const double v1 = static_cast<double>((h.seq_len * h.K * 6 + h.seq_len * 4 + 7) / 8 * 8);
    INFO("V " << V << ": " << h.record_bytes() << " bytes per window against " << v1);
    CHECK(h.record_bytes() <= 0.75 * v1);
  }
  for (const int64_t V : {int64_t(1), int64_t(2), int64_t(61), int64_t(1) << 17, (int64_t(1) << 17) + 1})
    for (const auto vt : {data::CacheValueType::bf16, data::CacheValueType::f32}) {
      h.V = V;
      h.K = std::min<int64_t>(V, 5);
      h.seq_len = 7;
      h.value_type = vt;
      Rows rows = valid_rows(h, 3);
      rows.ids[0] = static_cast<int32_t>(V - 1);  // the largest id
      std::vector<uint8_t> record(h.record_bytes());
      data::encode_record(h, rows.ids.data(), rows.logp.data(), rows.tail.data(), record.data());
      std::vector<int32_t> ids(h.seq_len * h.K);
      std::vector<float> logp(ids.size()), tail(h.seq_len);
      data::decode_record(h, record.data(), ids.data(), logp.data(), tail.data());
      INFO("V " << V << " " << data::to_string(vt));
      CHECK(ids == rows.ids);
      for (size_t i = 0; i < logp.size(); ++i)
        CHECK(logp[i] == (vt == data::CacheValueType::f32 ? rows.logp[i] : bf16_bits_to_float(float_to_bf16_bits(rows.logp[i]))));
      CHECK(std::memcmp(tail.data(), rows.tail.data(), tail.size() * 4) == 0);
    }
}

TEST_CASE("teacher cache: a build writes shards and a manifest; bad caches are refused naming shard and window",
          "[teacher_cache][cache_format]") {
  CacheFixture f;
  const data::CacheManifest m = cli::build_teacher_cache(f.options(5, data::CacheValueType::bf16));
  const std::string dir = f.dir.file("cache");
  REQUIRE(m.shards.size() == 2);  // 4 windows, 3 per shard
  CHECK(m.shards[1].first_window == 3);
  CHECK(m.shards[1].windows == 1);
  const std::string shard0 = dir + "/shard_00000.bin", shard1 = dir + "/shard_00001.bin";
  CHECK(fs::file_size(shard0) == 256 + 16 + 3 * static_cast<uint64_t>(m.header.record_bytes()));
  const data::TokenDataset dataset({f.shard}, f.T, f.teacher_cfg.vocab_size);
  const std::vector<char> good0 = read_bytes(shard0), good1 = read_bytes(shard1);
  {
    const data::TeacherCache cache(dir);
    CHECK_NOTHROW(cache.require_match(dataset, f.teacher_cfg.vocab_size, "kd.teacher_cache"));
    CachedRows rows;
    for (int64_t w = 0; w < 4; ++w) cache.append_window(w, rows);
    CHECK(rows.log_tail.size() == 4 * 9);
    CHECK_NOTHROW(cli::verify_teacher_cache(dir));
  }
  SECTION("a tampered record: opening succeeds, the first read of that shard names it and the window") {
    std::vector<char> bad = good0;
    bad[256 + 17] ^= 0x04;
    write_bytes(shard0, bad);
    const data::TeacherCache cache(dir);
    CachedRows rows;
    CHECK_NOTHROW(cache.append_window(3, rows));  // the other shard
    CHECK_THROWS_WITH(cache.append_window(1, rows),
                      Contains("shard_00000.bin (windows 0..2)") && Contains("checksum mismatch") &&
                          Contains("window 1"));
    CHECK_THROWS_WITH(cli::verify_teacher_cache(dir), Contains("shard_00000.bin") && Contains("checksum"));
  }
  SECTION("tampered values behind a matching checksum: the row checks name the window and position") {
    data::CacheHeader h = m.header;
    std::vector<char> bad = good1;
    // Window 3's first log-prob (after the packed ids) set to +0.5.
    const int64_t ids_bytes = (h.seq_len * h.K * h.id_bits() + 63) / 64 * 8;
    const uint16_t half = float_to_bf16_bits(0.5f);
    std::memcpy(bad.data() + 256 + ids_bytes, &half, 2);
    data::CacheChecksum sum;
    sum.update(bad.data(), bad.size() - 16);
    const uint64_t c = sum.value();
    std::memcpy(bad.data() + bad.size() - 16, &c, 8);
    write_bytes(shard1, bad);
    data::CacheManifest patched = data::read_cache_manifest(dir);
    patched.shards[1].checksum = c;
    data::write_cache_manifest(dir, patched);
    const data::TeacherCache cache(dir);
    CachedRows rows;
    CHECK_THROWS_WITH(cache.append_window(3, rows), Contains("shard_00001.bin") && Contains("window 3") &&
                                                        Contains("position 0") && Contains("log-probability"));
  }
  SECTION("a missing shard") {
    fs::remove(shard1);
    CHECK_THROWS_WITH(data::TeacherCache(dir), Contains("shard_00001.bin (windows 3..3)") && Contains("missing"));
  }
  SECTION("a truncated shard") {
    write_bytes(shard0, std::vector<char>(good0.begin(), good0.end() - 100));
    CHECK_THROWS_WITH(data::TeacherCache(dir), Contains("shard_00000.bin") && Contains("truncated"));
  }
  SECTION("a shard of another cache (other K)") {
    CacheFixture g;
    cli::TeacherCacheOptions o = g.options(4, data::CacheValueType::bf16);
    cli::build_teacher_cache(o);
    fs::copy_file(g.dir.file("cache") + "/shard_00001.bin", shard1, fs::copy_options::overwrite_existing);
    CHECK_THROWS_WITH(data::TeacherCache(dir), Contains("shard_00001.bin") && Contains("does not match"));
  }
  SECTION("a manifest that does not match its shards (K), or lists other shards") {
    const std::string path = dir + "/manifest.json";
    nlohmann::json doc = nlohmann::json::parse(std::ifstream(path));
    nlohmann::json wrong_k = doc;
    wrong_k["top_k"] = 4;
    std::ofstream(path, std::ios::trunc) << wrong_k.dump();
    CHECK_THROWS_WITH(data::TeacherCache(dir), Contains("shard_00000.bin") && Contains("does not match manifest.json"));
    nlohmann::json wrong_range = doc;
    wrong_range["shards"][1]["first_window"] = 2;
    std::ofstream(path, std::ios::trunc) << wrong_range.dump();
    CHECK_THROWS_WITH(data::TeacherCache(dir), Contains("manifest.json shards[1]") && Contains("expected"));
    fs::remove(path);
    CHECK_THROWS_WITH(data::TeacherCache(dir), Contains("no manifest.json") && Contains("rerunning its command"));
  }
  SECTION("the prefetcher serves what it was asked for, and rethrows a read's error at take") {
    const data::TeacherCache cache(dir);
    data::CachePrefetcher prefetch(cache);
    prefetch.request({3, 0});
    const CachedRows got = prefetch.take({3, 0});
    CachedRows want;
    cache.append_window(3, want);
    cache.append_window(0, want);
    CHECK(got.ids == want.ids);
    CHECK(got.logp == want.logp);
    CHECK(prefetch.hits() == 1);
    prefetch.request({2});
    CHECK(prefetch.take({1}).log_tail.size() == 9);  // not what was asked: read on the spot
    CHECK(prefetch.misses() == 1);
    std::vector<char> bad = good1;
    bad[300] ^= 1;
    write_bytes(shard1, bad);
    const data::TeacherCache tampered(dir);
    data::CachePrefetcher reader(tampered);
    reader.request({3});
    CHECK_THROWS_WITH(reader.take({3}), Contains("shard_00001.bin") && Contains("window 3"));
  }
  SECTION("K or V against the student") {
    const data::TeacherCache cache(dir);
    CHECK_THROWS_WITH(cache.require_match(dataset, 64, "kd.teacher_cache"), Contains("vocab_size is 64"));
  }
}

// Opening reads the manifest and each shard's header, size and trailer, never the
// records: a 100 GB cache of sparse shards (holes where the records are) opens in
// well under a second. Its checksums are never computed here (that would read
// 100 GB); the headers and trailers are real, so every open-time check runs.
TEST_CASE("teacher cache: a 100 GB cache opens in under a second (sparse shards)", "[teacher_cache][cache_format]") {
  TempDir dir("sparse_cache");
  data::CacheHeader h = cache_header(64, 128256, 2048);
  const int64_t shard_windows = cli::cache_shard_windows(h, 0);  // about 1 GiB each
  h.windows = static_cast<int64_t>(100e9 / h.record_bytes()) + 1;
  data::CacheManifest m = data::plan_cache(h, shard_windows);
  for (size_t s = 0; s < m.shards.size(); ++s) {
    data::ShardHeader sh;
    sh.cache = h;
    sh.shard = static_cast<int64_t>(s);
    sh.shards = static_cast<int64_t>(m.shards.size());
    sh.first_window = m.shards[s].first_window;
    sh.windows = m.shards[s].windows;
    const std::string path = dir.file(m.shards[s].file);
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    REQUIRE(fd >= 0);
    const std::vector<uint8_t> header = data::encode_shard_header(sh);
    uint8_t trailer[16];
    m.shards[s].checksum = 1000 + s;
    data::encode_trailer(m.shards[s].checksum, trailer);
    REQUIRE(::pwrite(fd, header.data(), header.size(), 0) == 256);
    REQUIRE(::pwrite(fd, trailer, 16, static_cast<off_t>(sh.file_bytes() - 16)) == 16);
    ::close(fd);
  }
  data::write_cache_manifest(dir.path.string(), m);
  double bytes = 0;
  for (const auto& e : fs::directory_iterator(dir.path)) bytes += static_cast<double>(fs::file_size(e.path()));
  REQUIRE(bytes >= 100e9);
  const auto t0 = std::chrono::steady_clock::now();
  const data::TeacherCache cache(dir.path.string());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(m.shards.size() << " shards, " << bytes / 1e9 << " GB opened in " << seconds << " s");
  CHECK(seconds < 1.0);
  CHECK(cache.header().windows == h.windows);
}

namespace {

// A version-1 cache file (data/teacher_cache_v1.h's layout) of `rows` per window.
void write_v1(const std::string& dir, const data::CacheHeader& h, const std::vector<Rows>& windows) {
  fs::create_directories(dir);
  const int64_t TK = h.seq_len * h.K;
  const int64_t record = (TK * 6 + h.seq_len * 4 + 7) / 8 * 8;
  std::vector<uint8_t> bytes(256, 0);
  std::memcpy(bytes.data(), "KDTCACHE", 8);
  const uint32_t version = 1, vt = 0;
  std::memcpy(bytes.data() + 8, &version, 4);
  std::memcpy(bytes.data() + 12, &vt, 4);
  const int64_t fields[] = {h.K, h.V, h.seq_len, h.windows, static_cast<int64_t>(h.data_fingerprint),
                            static_cast<int64_t>(h.teacher_hash), record};
  std::memcpy(bytes.data() + 16, fields, sizeof fields);
  for (const Rows& r : windows) {
    std::vector<uint8_t> rec(record, 0);
    std::memcpy(rec.data(), r.ids.data(), TK * 4);
    for (int64_t i = 0; i < TK; ++i) {
      const uint16_t b = float_to_bf16_bits(r.logp[i]);
      std::memcpy(rec.data() + TK * 4 + 2 * i, &b, 2);
    }
    std::memcpy(rec.data() + TK * 6, r.tail.data(), h.seq_len * 4);
    bytes.insert(bytes.end(), rec.begin(), rec.end());
  }
  data::CacheChecksum sum;
  sum.update(bytes.data(), bytes.size());
  uint8_t trailer[16];
  data::encode_trailer(sum.value(), trailer);
  bytes.insert(bytes.end(), trailer, trailer + 16);
  std::ofstream(dir + "/teacher_cache.bin", std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                                                      static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

TEST_CASE("teacher cache: a version-1 cache is refused naming --convert, and converts", "[teacher_cache][cache_format]") {
  TempDir dir("v1_cache");
  data::CacheHeader h = cache_header(3, 50, 4, 5);
  h.data_fingerprint = 77;
  h.teacher_hash = 88;
  std::vector<Rows> windows;
  for (int64_t w = 0; w < h.windows; ++w) windows.push_back(valid_rows(h, 10 + static_cast<uint32_t>(w)));
  const std::string v1 = dir.file("v1"), v2 = dir.file("v2");
  write_v1(v1, h, windows);
  CHECK_THROWS_WITH(data::TeacherCache(v1), Contains("version-1") && Contains("kdtrain teacher-cache --convert " + v1));
  // Two shards of 2 and one of 1; then one shard of all 5 windows, a window a batch, so
  // the writer's two row buffers are each filled again while the other is written.
  for (const auto& [shard_windows, shards] : {std::pair<int64_t, size_t>{2, 3}, {5, 1}}) {
    INFO("shard_windows " << shard_windows);
    cli::TeacherCacheOptions o;
    o.out = v2 + "_" + std::to_string(shard_windows);
    o.shard_windows = shard_windows;
    o.progress = false;
    cli::convert_teacher_cache(v1, o);
    const data::TeacherCache cache(o.out);
    CHECK(cache.header().data_fingerprint == 77);
    CHECK(cache.header().teacher_hash == 88);
    CHECK(cache.manifest().shards.size() == shards);
    for (int64_t w = 0; w < h.windows; ++w) {
      CachedRows rows;
      cache.append_window(w, rows);
      CHECK(rows.ids == windows[w].ids);
      for (size_t i = 0; i < rows.logp.size(); ++i)
        CHECK(rows.logp[i] == bf16_bits_to_float(float_to_bf16_bits(windows[w].logp[i])));
      CHECK(std::memcmp(rows.log_tail.data(), windows[w].tail.data(), rows.log_tail.size() * 4) == 0);
    }
    CHECK_NOTHROW(cli::verify_teacher_cache(o.out));
  }
}

// io::check_teacher_cache_rows, the one value check every reader and the writer
// run: each kind of bad value is refused naming the window and the position, and
// rows a teacher writes pass (bf16-rounded and exact).
TEST_CASE("teacher cache: the value checks refuse each bad value", "[teacher_cache][cache_format]") {
  const data::CacheHeader h = cache_header(4, 100, 3);
  const Rows good = valid_rows(h, 21);
  auto check = [&](const Rows& r) { data::check_values(h, r.ids.data(), r.logp.data(), r.tail.data(), "where", 7); };
  CHECK_NOTHROW(check(good));
  Rows rounded = good;
  for (float& l : rounded.logp) l = bf16_bits_to_float(float_to_bf16_bits(l));
  CHECK_NOTHROW(check(rounded));
  const std::vector<std::pair<std::function<void(Rows&)>, std::string>> bad = {
      {[](Rows& r) { r.ids[5] = r.ids[4]; }, "listed twice"},
      {[](Rows& r) { r.ids[6] = 100; }, "outside the vocabulary"},
      {[](Rows& r) { r.ids[6] = -1; }, "outside the vocabulary"},
      {[](Rows& r) { r.logp[7] = NAN; }, "not a finite value"},
      {[](Rows& r) { r.logp[7] = INFINITY; }, "not a finite value"},
      {[](Rows& r) { r.logp[7] = -INFINITY; }, "not a finite value"},
      {[](Rows& r) { r.logp[4] = 0.5f; }, "not a finite value"},
      {[](Rows& r) { r.tail[1] = NAN; }, "log tail mass"},
      {[](Rows& r) { r.tail[1] = 0.f; }, "sum to"},
  };
  for (const auto& [spoil, message] : bad) {
    Rows r = good;
    spoil(r);
    INFO(message);
    CHECK_THROWS_WITH(check(r), Contains("where") && Contains("window 7, position 1") && Contains(message));
  }
}

TEST_CASE("teacher cache: a shard header whose window range overflows is corrupt, not undefined behaviour",
          "[teacher_cache][cache_format]") {
  // fuzz_teacher_cache found first_window + windows overflowing int64 in the range check.
  data::ShardHeader sh;
  sh.cache = cache_header(3, 50, 4, 5);
  sh.shards = 1;
  sh.first_window = int64_t{7022344801102069760};
  sh.windows = int64_t{8102650174501381727};
  const std::vector<uint8_t> header = data::encode_shard_header(sh);
  CHECK_THROWS_WITH(data::decode_shard_header(header.data(), "shard_x.bin"), Contains("corrupt header"));
}
