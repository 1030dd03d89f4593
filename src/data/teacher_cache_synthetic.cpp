#include "data/teacher_cache_synthetic.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <numeric>
#include <vector>

#include "core/rng.h"
#include "data/teacher_cache_writer.h"

namespace kdtrain::data {

namespace fs = std::filesystem;

namespace {

void synthetic_window(const CacheHeader& h, SplitMix64& rng, std::vector<int32_t>& ids, std::vector<float>& logp,
                      std::vector<float>& tail) {
  const int64_t T = h.seq_len, K = h.K;
  std::vector<double> w(K);
  for (int64_t t = 0; t < T; ++t) {
    // (x K + k) for k < K are distinct and below V for any x < V / K.
    for (int64_t k = 0; k < K; ++k) {
      ids[t * K + k] = static_cast<int32_t>((rng.next() % static_cast<uint64_t>(h.V / K)) * K + k);
      w[k] = std::exp(-4.0 * rng.uniform());
    }
    std::sort(w.begin(), w.end(), std::greater<double>());
    const double total = std::accumulate(w.begin(), w.end(), 0.0);
    for (int64_t k = 0; k < K; ++k) logp[t * K + k] = static_cast<float>(std::log(0.9 * w[k] / total));
    tail[t] = static_cast<float>(std::log(0.1));
  }
}

}  // namespace

void write_synthetic_cache(const std::string& dir, const CacheHeader& shape, int64_t shard_windows, uint64_t seed) {
  CacheManifest plan = plan_cache(shape, shard_windows);
  const CacheHeader& h = plan.header;
  SplitMix64 rng(seed);
  std::vector<int32_t> ids(h.seq_len * h.K);
  std::vector<float> logp(h.seq_len * h.K), tail(h.seq_len);
  for (size_t s = 0; s < plan.shards.size(); ++s) {
    CacheShardWriter writer(dir, plan, static_cast<int64_t>(s));
    for (int64_t w = 0; w < plan.shards[s].windows; ++w) {
      synthetic_window(h, rng, ids, logp, tail);
      writer.add_window(ids.data(), logp.data(), tail.data());
    }
    plan.shards[s].checksum = writer.commit();
  }
  write_cache_manifest(dir, plan);
}

std::string synthetic_cache_dir(const std::string& purpose) {
  const fs::path dir = fs::temp_directory_path() / ("kdtrain_" + purpose + "." + std::to_string(getpid()));
  fs::create_directories(dir);
  return dir.string();
}

}  // namespace kdtrain::data
