#include "data/shard_manifest.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "data/dataset.h"

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
    std::ifstream in(path);
    KD_CHECK(in, key, ": cannot read ", path);
    nlohmann::json doc = nlohmann::json::parse(in, nullptr, false);
    KD_CHECK(!doc.is_discarded() && doc.is_object(), key, ": ", path, " is not a JSON object");
    KD_CHECK(doc.contains("vocab_size") && doc["vocab_size"].is_number_integer(), key, ": ", path,
             " has no integer vocab_size (a manifest from scripts/prepare_fineweb_edu.py has one)");
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

}  // namespace kdtrain::data
