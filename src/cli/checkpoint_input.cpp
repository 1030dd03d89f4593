#include "cli/checkpoint_input.h"

#include "cli/commands.h"
#include "config/choices.h"
#include "config/limits.h"
#include "io/output_dir.h"

namespace kdtrain::cli {

void add_checkpoint_input_options(CLI::App& command, CheckpointInputOptions& options, const std::string& window,
                                  const std::string& device_help) {
  command.add_option("--checkpoint", options.checkpoint,
                     "model checkpoint directory, or a run directory (its latest checkpoint)")
      ->required()
      ->transform(normal_path_option());
  command.add_option("--data", options.data, "token shards (paths or glob patterns)")->required();
  command
      .add_option("--seq-len", options.seq_len,
                  "tokens per " + window +
                      " (default: the checkpoint's train.seq_len, else 1024 clamped to "
                      "max_position_embeddings)")
      ->check(in_range<int64_t>(1, SizeLimits::seq_len));
  command.add_option("--device", options.device, device_help)->check(one_of<Device>());
  add_affine_n_option(command, options.affine_n);
}

void add_affine_n_option(CLI::App& command, std::string& value) {
  command.add_option("--affine-n", value,
                     "affine models with the sequence divisor: train_length (N fixed at the training "
                     "length) or keys (N = the keys of each call); default: the checkpoint's "
                     "attention.affine_inference_n, else train_length (docs/model.md)")
      ->check(one_of<AffineInferenceN>());
}

std::optional<AffineInferenceN> parse_affine_n_option(const std::string& value) {
  if (value.empty()) return std::nullopt;
  return parse_choice<AffineInferenceN>(value);
}

void check_output_not_input(const std::string& out, const std::string& flag, const CheckpointInputOptions& in) {
  if (out.empty()) return;
  std::vector<std::string> inputs = data::expand_shard_patterns(in.data);
  inputs.push_back(in.checkpoint);
  io::claim_output_file(out, flag, inputs);
}

CheckpointInput::CheckpointInput(const CheckpointInputOptions& options, int64_t min_seq_len)
    : backend(make_backend(options.device, 0)),
      model_dir(eval::resolve_model_dir(options.checkpoint)),
      model(eval::load_model_for_eval(model_dir, *backend, parse_affine_n_option(options.affine_n))),
      seq_len(eval::resolve_seq_len(options.seq_len, model_dir, model->config(), min_seq_len)),
      dataset(options.data, seq_len, model->config().vocab_size) {}

}  // namespace kdtrain::cli
