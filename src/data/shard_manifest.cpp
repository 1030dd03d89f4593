#include "data/shard_manifest.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "data/dataset.h"
#include "io/file_util.h"

namespace kdtrain::data {

std::vector<std::string> check_manifest_vocab(const std::vector<std::string>& patterns,
                                              int64_t model_vocab, const std::string& key) {
  namespace fs = std::filesystem;
  std::set<std::string> manifests;
  for (const std::string& shard : expand_shard_patterns(patterns)) {
    const fs::path manifest = fs::path(shard).parent_path() / "manifest.json";
    if (fs::exists(manifest)) manifests.insert(manifest.string());
  }
  for (const std::string& path : manifests) {
    nlohmann::json doc;
    try {
      doc = read_json_file(path);
    } catch (const Error& e) {
      fail(key, ": ", e.what());
    }
    KD_CHECK(doc.is_object(), key, ": ", path, " is not a JSON object");
    KD_CHECK(doc.contains("vocab_size") && doc["vocab_size"].is_number_integer(), key, ": ", path,
             " has no integer vocab_size (a manifest from scripts/data/prepare_fineweb_edu.py has one)");
    const int64_t vocab = doc["vocab_size"].get<int64_t>();
    KD_CHECK(vocab <= model_vocab, key, ": ", path, " says the shards were tokenized with a ",
             vocab, "-id vocabulary, larger than the model's vocab_size ", model_vocab,
             "; use the model's own tokenizer");
    KD_CHECK(model_vocab - vocab <= kMaxVocabPadding, key, ": ", path,
             " says the shards were tokenized with a ", vocab,
             "-id vocabulary but the model has vocab_size ", model_vocab, " (", model_vocab - vocab,
             " more ids than padding allows, at most ", kMaxVocabPadding,
             "): the tokenizer does not belong to this model");
  }
  return {manifests.begin(), manifests.end()};
}

nlohmann::json shards_manifest(const std::vector<std::string>& patterns, std::string* path) {
  namespace fs = std::filesystem;
  std::set<std::string> dirs;
  for (const std::string& shard : expand_shard_patterns(patterns))
    dirs.insert(fs::absolute(fs::path(shard)).parent_path().lexically_normal().string());
  if (dirs.size() != 1) return nullptr;
  const fs::path manifest = fs::path(*dirs.begin()) / "manifest.json";
  if (!fs::exists(manifest)) return nullptr;
  if (path) *path = manifest.string();
  return read_json_file(manifest.string());
}

TokenBytes read_token_bytes(const std::string& path) {
  const nlohmann::json doc = read_json_file(path);
  KD_CHECK(doc.is_object() && doc.value("format", "") == "kdtrain.token_bytes/1", path,
           ": not a bytes-per-token table (format kdtrain.token_bytes/1, scripts/data/token_bytes.py)");
  KD_CHECK(doc.contains("bytes") && doc["bytes"].is_array(), path, ": no \"bytes\" array");
  TokenBytes t;
  t.path = path;
  t.tokenizer_sha256 = doc.value("tokenizer_sha256", "");
  t.bytes.reserve(doc["bytes"].size());
  for (const nlohmann::json& b : doc["bytes"]) {
    KD_CHECK(b.is_number_integer() && b.get<int64_t>() >= 0, path, ": token ", t.bytes.size(),
             " has byte length ", b.dump(), " (a non-negative integer is expected)");
    t.bytes.push_back(b.get<int32_t>());
  }
  return t;
}

}  // namespace kdtrain::data
