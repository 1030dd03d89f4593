// What `kdtrain eval` and `kdtrain analyze` read: a checkpoint (or a run
// directory's latest), loaded forward-only, and token shards cut into windows of
// --seq-len (default: the length the checkpoint trained at).
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "data/dataset.h"
#include "eval/perplexity.h"
#include "model/model.h"

namespace kdtrain::cli {

struct CheckpointInputOptions {
  std::string checkpoint;
  std::vector<std::string> data;
  int64_t seq_len = eval::kSeqLenNotGiven;
  std::string device = "cpu";
  std::string affine_n;  // --affine-n: "" = the checkpoint's attention.affine_inference_n
};

// --affine-n VALUE as a choice; "" = not given. Shared by eval, analyze and export.
std::optional<AffineInferenceN> parse_affine_n_option(const std::string& value);
void add_affine_n_option(CLI::App& command, std::string& value);

// --checkpoint, --data, --seq-len (`window`: what one window is called in the
// help), --device (`device_help`) and --affine-n.
void add_checkpoint_input_options(CLI::App& command, CheckpointInputOptions& options, const std::string& window,
                                  const std::string& device_help);

// A file output of such a command (eval --out) is none of its inputs: the
// checkpoint, the shards (io::claim_output_file).
void check_output_not_input(const std::string& out, const std::string& flag, const CheckpointInputOptions& in);

struct CheckpointInput {
  // Windows shorter than min_seq_len tokens are refused (eval::resolve_seq_len).
  CheckpointInput(const CheckpointInputOptions& options, int64_t min_seq_len);

  std::unique_ptr<Backend> backend;
  std::string model_dir;  // the checkpoint directory --checkpoint resolved to
  std::unique_ptr<Model> model;
  int64_t seq_len;
  data::TokenDataset dataset;
};

}  // namespace kdtrain::cli
