// `kdtrain data`: inspect and create token shards.
//   kdtrain data info SHARDS...                      per-shard summary and totals
//   kdtrain data write --out F [--version 1|7] (--ids F.txt | --bytes F)
//                      [--val-out V [--val-tokens N]]   the first N tokens (default: a
//                                                       tenth) go to V, the rest to F
#include <filesystem>
#include <iostream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "core/paths.h"
#include "io/output_dir.h"
#include "data/shard.h"
#include "data/shard_tools.h"

namespace kdtrain::cli {

namespace {

struct DataWriteOptions {
  std::string out;
  int version = 0;  // 0: smallest that fits the ids
  std::string ids_path;
  std::string bytes_path;
  std::string val_out;
  int64_t val_tokens = -1;  // -1: a tenth of the tokens
};

// Writes `tokens` to `path` (creating its directory) and says so.
void write_and_report(const std::string& path, const std::vector<uint32_t>& tokens, int version,
                      const std::string& what) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  data::write_shard(path, tokens, version);
  std::cout << "wrote " << path << ": " << tokens.size() << " tokens" << what << ", version " << version
            << "\n";
}

}  // namespace

void register_data(CLI::App& app) {
  auto* data = app.add_subcommand("data", "Inspect and write token shards (llm.c .bin format)");
  data->require_subcommand(1);

  auto patterns = std::make_shared<std::vector<std::string>>();
  auto* info = data->add_subcommand("info", "Print version, width, token count, id range and fingerprint per shard");
  info->add_option("shards", *patterns, "Shard paths or glob patterns")->required();
  info->callback([patterns] { data::print_shard_info(*patterns, std::cout); });

  auto options = std::make_shared<DataWriteOptions>();
  auto* write = data->add_subcommand("write", "Write a shard from token ids (text) or from raw bytes");
  add_output_file_option(*write, "--out", options->out, "Shard file to write (atomically)")->required();
  write->add_option("--version", options->version,
                    "1: uint16 tokens, 7: uint32 tokens (default: the smallest that fits)")
      ->check(CLI::IsMember({1, 7}));
  auto* ids = write->add_option("--ids", options->ids_path, "Text file of whitespace-separated token ids")
                  ->check(CLI::ExistingFile);
  auto* bytes = write->add_option("--bytes", options->bytes_path, "Any file; each byte becomes a token 0..255")
                    ->check(CLI::ExistingFile);
  ids->excludes(bytes);
  add_output_file_option(*write, "--val-out", options->val_out,
                         "also write a validation shard: the first --val-tokens tokens go here, the rest to --out");
  write->add_option("--val-tokens", options->val_tokens,
                    "tokens held out for --val-out (default: a tenth of the input)")
      ->check(in_range<int64_t>(1, std::numeric_limits<int64_t>::max()));
  write->callback([options] {
    KD_CHECK(!options->ids_path.empty() || !options->bytes_path.empty(),
             "kdtrain data write: give --ids FILE or --bytes FILE");
    // Every output names its own file, none of them the input: checked before anything is written.
    const std::string input = options->ids_path.empty() ? options->bytes_path : options->ids_path;
    for (const auto& [flag, path] : {std::pair<std::string, std::string>{"--out", options->out}, {"--val-out", options->val_out}}) {
      if (path.empty()) continue;
      io::claim_output_file(path, flag, {input});
    }
    KD_CHECK(options->val_out.empty() || !same_file(options->out, options->val_out), "--out ", options->out,
             " and --val-out ", options->val_out, " name the same file; the training tokens would overwrite "
             "the validation split. Give two files");
    std::vector<uint32_t> tokens = options->ids_path.empty()
                                       ? data::read_bytes_as_tokens(options->bytes_path)
                                       : data::read_token_ids_text(options->ids_path);
    const int version = options->version ? options->version : data::smallest_shard_version(tokens);
    if (options->val_out.empty()) {
      KD_CHECK(options->val_tokens < 0, "--val-tokens needs --val-out (the file for the held-out tokens)");
      write_and_report(options->out, tokens, version, "");
      return;
    }
    const int64_t n = static_cast<int64_t>(tokens.size());
    const int64_t held = options->val_tokens >= 0 ? options->val_tokens : n / 10;
    KD_CHECK(held >= 1 && held < n, "--val-tokens ", held, ": the input has ", n,
             " tokens; validation needs at least 1 and training at least 1");
    write_and_report(options->val_out, std::vector<uint32_t>(tokens.begin(), tokens.begin() + held), version,
                     " (validation: the first " + std::to_string(held) + ")");
    write_and_report(options->out, std::vector<uint32_t>(tokens.begin() + held, tokens.end()), version,
                     " (training: the rest)");
  });
}

}  // namespace kdtrain::cli
