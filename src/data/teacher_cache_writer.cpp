// The teacher cache writer (data/teacher_cache_writer.h).
#include "data/teacher_cache_writer.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "core/error.h"
#include "io/file_util.h"

namespace kdtrain::data {

namespace fs = std::filesystem;

namespace {

ShardHeader shard_header(const CacheManifest& plan, int64_t shard) {
  ShardHeader h;
  h.cache = plan.header;
  h.shard = shard;
  h.shards = static_cast<int64_t>(plan.shards.size());
  h.first_window = plan.shards[shard].first_window;
  h.windows = plan.shards[shard].windows;
  return h;
}

std::string shard_path(const std::string& dir, const CacheManifest& plan, int64_t shard) {
  return (fs::path(dir) / plan.shards[shard].file).string();
}

}  // namespace

struct CacheShardWriter::Impl {
  ShardHeader header;
  std::string where;
  io::AtomicFileWriter out;
  CacheChecksum sum;
  int64_t written = 0;
  std::vector<uint8_t> record;
  Impl(const std::string& dir, const CacheManifest& plan, int64_t shard)
      : header(shard_header(plan, shard)), where(shard_path(dir, plan, shard)), out(where) {}
};

CacheShardWriter::CacheShardWriter(const std::string& dir, const CacheManifest& plan, int64_t shard) {
  KD_CHECK(shard >= 0 && shard < static_cast<int64_t>(plan.shards.size()), "teacher cache ", dir, ": shard ", shard,
           " is not in the plan");
  impl_ = std::make_unique<Impl>(dir, plan, shard);
  const std::vector<uint8_t> h = encode_shard_header(impl_->header);
  impl_->out.write(h.data(), h.size());
  impl_->sum.update(h.data(), h.size());
  impl_->record.assign(plan.header.record_bytes(), 0);
}

CacheShardWriter::~CacheShardWriter() = default;

void CacheShardWriter::add_window(const int32_t* ids, const float* logp, const float* log_tail) {
  const ShardHeader& h = impl_->header;
  KD_CHECK(impl_->written < h.windows, impl_->where, ": more windows than the shard's ", h.windows);
  const int64_t window = h.first_window + impl_->written;
  check_values(h.cache, ids, logp, log_tail, impl_->where + " (being written)", window);
  encode_record(h.cache, ids, logp, log_tail, impl_->record.data());
  impl_->out.write(impl_->record.data(), impl_->record.size());
  impl_->sum.update(impl_->record.data(), impl_->record.size());
  ++impl_->written;
}

uint64_t CacheShardWriter::commit() {
  KD_CHECK(impl_->written == impl_->header.windows, impl_->where, ": wrote ", impl_->written, " windows of ",
           impl_->header.windows);
  uint8_t trailer[kCacheTrailerBytes];
  const uint64_t checksum = impl_->sum.value();
  encode_trailer(checksum, trailer);
  impl_->out.write(trailer, sizeof trailer);
  impl_->out.commit();
  return checksum;
}

bool shard_complete(const std::string& dir, const CacheManifest& plan, int64_t shard, uint64_t* checksum) {
  const std::string path = shard_path(dir, plan, shard);
  const ShardHeader want = shard_header(plan, shard);
  std::error_code ec;
  const uintmax_t size = fs::file_size(path, ec);
  if (ec || size != want.file_bytes()) return false;
  std::ifstream in(path, std::ios::binary);
  std::vector<char> header(kCacheHeaderBytes), trailer(kCacheTrailerBytes);
  if (!in.read(header.data(), header.size())) return false;
  in.seekg(static_cast<std::streamoff>(size - kCacheTrailerBytes));
  if (!in.read(trailer.data(), trailer.size())) return false;
  const std::vector<uint8_t> expected = encode_shard_header(want);
  if (std::memcmp(header.data(), expected.data(), expected.size()) != 0) return false;
  try {
    *checksum = decode_trailer(reinterpret_cast<const uint8_t*>(trailer.data()), path);
  } catch (const Error&) {
    return false;
  }
  return true;
}

void remove_shard_temporaries(const std::string& dir, const CacheManifest& plan, int64_t shard) {
  const std::string prefix = plan.shards[shard].file + ".tmp.";
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.compare(0, prefix.size(), prefix) == 0) fs::remove(e.path(), ec);
  }
}

}  // namespace kdtrain::data
