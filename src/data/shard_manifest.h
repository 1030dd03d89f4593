// The manifest.json that scripts/data/prepare_fineweb_edu.py writes next to its shards
// (docs/data.md) records the tokenizer's vocabulary size. A model must not train
// on shards from a tokenizer with a different vocabulary: out-of-range ids are
// already refused by TokenDataset, and this check also catches a smaller,
// foreign vocabulary whose ids happen to fit.
//
// Rule, for every directory holding one of the shards with a manifest.json:
//   manifest vocab_size <= model vocab_size <= manifest vocab_size + kMaxVocabPadding.
// Models may pad the embedding beyond the tokenizer (Qwen: 151646 or 151669 ids,
// 151936 rows; Megatron pads to a multiple of 128 x tensor-parallel size); Llama-3
// is exact (128256). Two tokenizers of the same size (e.g. two 32000-id
// vocabularies) cannot be told apart from the size: the manifest's tokenizer
// sha256 is the record for that.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kdtrain::data {

constexpr int64_t kMaxVocabPadding = 1024;

// Throws naming `key`, the manifest and both sizes on a mismatch; a directory
// without manifest.json is not checked. Returns the manifests that were checked.
std::vector<std::string> check_manifest_vocab(const std::vector<std::string>& patterns,
                                              int64_t model_vocab, const std::string& key);

// The manifest.json of the one directory that holds every shard of `patterns`
// (its path in `*path`), or null when the shards span several directories or
// theirs has no manifest.
nlohmann::json shards_manifest(const std::vector<std::string>& patterns, std::string* path);

// Bytes of text each token id stands for (scripts/data/token_bytes.py writes the file,
// format "kdtrain.token_bytes/1"): the denominator of bits per byte.
struct TokenBytes {
  std::string path, tokenizer_sha256;
  std::vector<int32_t> bytes;  // per token id
};
// Throws naming the file on a missing file, a wrong format or a negative length.
TokenBytes read_token_bytes(const std::string& path);

}  // namespace kdtrain::data
