// kdtrain eval: mean cross-entropy, token perplexity and bits per byte of a
// checkpoint over every window of held-out shards (docs/evaluation.md, "C4
// perplexity"). Deterministic: the same number for any --batch-size and thread
// count up to fp32 summation order inside a batch.
#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "cli/checkpoint_input.h"
#include "cli/commands.h"
#include "config/limits.h"
#include "core/error.h"
#include "data/dataset.h"
#include "data/shard_manifest.h"
#include "eval/affine_n.h"
#include "eval/perplexity.h"

namespace kdtrain::cli {

namespace {

struct EvalFlags {
  CheckpointInputOptions input;
  std::string out, token_bytes;
  int64_t batch_size = 4, max_windows = 0, chunk_tokens = 1024;
  bool json = false;
};

// The bytes-per-token table for bits per byte: --token-bytes, or the one the
// shards' manifest names; checked against the manifest's tokenizer. Returns its
// path ("" for none).
std::string load_token_bytes(const EvalFlags& f, const nlohmann::json& manifest, const std::string& manifest_path,
                             data::TokenBytes* table) {
  std::string table_path = f.token_bytes;
  if (table_path.empty() && manifest.is_object() && manifest.value("token_bytes", nlohmann::json()).is_string())
    table_path =
        (std::filesystem::path(manifest_path).parent_path() / manifest["token_bytes"].get<std::string>()).string();
  if (table_path.empty()) return table_path;
  *table = data::read_token_bytes(table_path);
  const std::string tokenizer =
      manifest.is_object() ? manifest.value("tokenizer", nlohmann::json::object()).value("sha256", "") : "";
  KD_CHECK(tokenizer.empty() || table->tokenizer_sha256.empty() || tokenizer == table->tokenizer_sha256,
           "--token-bytes ", table_path, " belongs to tokenizer ", table->tokenizer_sha256,
           " but the shards (", manifest_path, ") were tokenized with ", tokenizer);
  return table_path;
}

// lm-eval's word perplexity, exp(CE / words) with words = len(re.split(r"\s+", doc)):
// the scored bytes times the documents' words per byte (the manifest's counts).
// Returns the words (0 when the manifest or the table lacks the counts).
double add_word_perplexity(nlohmann::json& j, const eval::PerplexityResult& r, const nlohmann::json& manifest) {
  const double doc_words = manifest.is_object() ? manifest.value("words", 0.0) : 0.0;
  const double doc_bytes = manifest.is_object() ? manifest.value("text_bytes", 0.0) : 0.0;
  if (r.bytes <= 0 || doc_words <= 0 || doc_bytes <= 0) return 0.0;
  const double words = static_cast<double>(r.bytes) * doc_words / doc_bytes;
  j["words"] = words;
  j["word_perplexity"] = std::exp(r.ce_sum / words);
  j["words_definition"] =
      "lm-eval's count, len(re.split(r'\\s+', doc)) summed over the documents (manifest words), "
      "scaled to the scored text: words = bytes * words / text_bytes of the documents";
  return words;
}

// The report's numbers: the perplexity and what it was computed over.
nlohmann::json eval_record(const CheckpointInput& in, const EvalFlags& f, const eval::PerplexityResult& r) {
  nlohmann::json j;
  j["checkpoint"] = in.model_dir;
  j["data"] = f.input.data;
  j["attention"] = to_string(in.model->attention().variant);
  if (in.model->features().affine) {
    j["affine_bias_divisor"] = to_string(in.model->features().bias_divisor);
    j["affine_bias_n"] = eval::affine_bias_n_json(in.model->features(), in.seq_len);
  }
  j["seq_len"] = in.seq_len;
  j["windows"] = r.windows;
  j["windows_available"] = in.dataset.num_windows();
  j["tokens"] = r.tokens;
  j["ce_sum"] = r.ce_sum;
  j["mean_ce"] = r.mean_ce();
  j["perplexity"] = r.perplexity();
  j["bits_per_token"] = r.bits_per_token();
  j["definition"] =
      "token-level: perplexity = exp(ce_sum / tokens); non-overlapping windows of seq_len + 1 "
      "tokens (stride seq_len, none crosses a shard, a shard's tail is dropped), every "
      "prediction of a window counted; bits_per_byte = ce_sum / ln 2 / bytes of the predicted "
      "tokens' text";
  return j;
}

void run_eval(const EvalFlags& f) {
  KD_CHECK(f.batch_size >= 1, "--batch-size must be at least 1, got ", f.batch_size);
  check_output_not_input(f.out, "--out", f.input);
  const CheckpointInput in(f.input, 1);
  // Provenance from the shards' manifest, and the bytes-per-token table it names
  // (or --token-bytes) for bits per byte.
  std::string manifest_path;
  const nlohmann::json manifest = data::shards_manifest(f.input.data, &manifest_path);
  data::TokenBytes table;
  const std::string table_path = load_token_bytes(f, manifest, manifest_path, &table);

  const auto start = std::chrono::steady_clock::now();
  auto last_report = start;
  const eval::PerplexityResult r = eval::evaluate_perplexity(
      *in.model, in.dataset, f.batch_size, f.max_windows, f.chunk_tokens,
      [&](int64_t done, int64_t total) {
        const auto now = std::chrono::steady_clock::now();
        if (now - last_report > std::chrono::seconds(10) && done < total) {
          spdlog::info("eval: {}/{} windows", done, total);
          last_report = now;
        }
      },
      table_path.empty() ? nullptr : &table.bytes);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  nlohmann::json j = eval_record(in, f, r);
  if (!table_path.empty()) {
    j["bytes"] = r.bytes;
    j["bits_per_byte"] = r.bits_per_byte();
    j["tokens_per_byte"] = static_cast<double>(r.tokens) / static_cast<double>(r.bytes);
    j["token_bytes"] = table_path;
  }
  const double words = add_word_perplexity(j, r, manifest);
  if (manifest.is_object()) {
    nlohmann::json d;
    d["path"] = manifest_path;
    for (const char* key : {"documents", "tokens", "text_bytes", "words", "inputs", "separator", "tokenizer"})
      if (manifest.contains(key)) d[key] = manifest[key];
    j["data_manifest"] = d;
  }
  j["seconds"] = seconds;
  if (!f.out.empty()) eval::write_text_file(f.out, j.dump(2) + "\n");
  if (f.json) return (void)std::printf("%s\n", j.dump(2).c_str());
  std::printf("eval %s: %lld windows x %lld tokens = %lld tokens, mean CE %.6f nats, token perplexity %.4f",
              in.model_dir.c_str(), static_cast<long long>(r.windows), static_cast<long long>(in.seq_len),
              static_cast<long long>(r.tokens), r.mean_ce(), r.perplexity());
  if (r.bytes) std::printf(", %.4f bits per byte", r.bits_per_byte());
  if (words > 0) std::printf(", word perplexity %.4f", std::exp(r.ce_sum / words));
  std::printf(" (%.1f s)\n", seconds);
}

}  // namespace

void register_eval(CLI::App& app) {
  auto flags = std::make_shared<EvalFlags>();
  auto* command = app.add_subcommand(
      "eval", "Mean cross-entropy and token perplexity of a checkpoint on held-out shards");
  add_checkpoint_input_options(*command, flags->input, "window", "cpu or cuda");
  command->add_option("--batch-size", flags->batch_size, "windows per forward (default 4)")
      ->check(in_range<int64_t>(1, SizeLimits::batch));
  command->add_option("--max-windows", flags->max_windows,
                      "score only the first N windows (default: all)")
      ->check(in_range<int64_t>(1, SizeLimits::windows));
  command->add_option("--chunk-tokens", flags->chunk_tokens, "rows of logits at once (default 1024)")
      ->check(in_range<int64_t>(1, SizeLimits::chunk_tokens));
  command->add_option("--token-bytes", flags->token_bytes,
                      "bytes-per-token table for bits per byte (default: the token_bytes.json "
                      "named by the shards' manifest.json)");
  add_output_file_option(*command, "--out", flags->out, "also write the JSON result to this file");
  command->add_flag("--json", flags->json, "print the result as JSON");
  command->callback([flags] { run_eval(*flags); });
}

}  // namespace kdtrain::cli
