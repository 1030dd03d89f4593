// `kdtrain data`: inspect and create token shards.
//   kdtrain data info SHARDS...                      per-shard summary and totals
//   kdtrain data write --out F [--version 1|7] (--ids F.txt | --bytes F)
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "data/shard.h"
#include "data/shard_tools.h"

namespace kdtrain::cli {

namespace {

struct DataWriteOptions {
  std::string out;
  int version = 0;  // 0: smallest that fits the ids
  std::string ids_path;
  std::string bytes_path;
};

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
  write->add_option("--out", options->out, "Shard file to write (atomically)")->required();
  write->add_option("--version", options->version,
                    "1: uint16 tokens, 7: uint32 tokens (default: the smallest that fits)")
      ->check(CLI::IsMember({1, 7}));
  auto* ids = write->add_option("--ids", options->ids_path, "Text file of whitespace-separated token ids")
                  ->check(CLI::ExistingFile);
  auto* bytes = write->add_option("--bytes", options->bytes_path, "Any file; each byte becomes a token 0..255")
                    ->check(CLI::ExistingFile);
  ids->excludes(bytes);
  write->callback([options] {
    KD_CHECK(!options->ids_path.empty() || !options->bytes_path.empty(),
             "kdtrain data write: give --ids FILE or --bytes FILE");
    std::vector<uint32_t> tokens = options->ids_path.empty()
                                       ? data::read_bytes_as_tokens(options->bytes_path)
                                       : data::read_token_ids_text(options->ids_path);
    const int version = options->version ? options->version : data::smallest_shard_version(tokens);
    data::write_shard(options->out, tokens, version);
    std::cout << "wrote " << options->out << ": " << tokens.size() << " tokens, version " << version << "\n";
  });
}

}  // namespace kdtrain::cli
