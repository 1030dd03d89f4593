// kdtrain dump: one forward (and backward) on the first B*T+1 tokens of a shard,
// written as safetensors so any other implementation can be compared with ours
// (docs/dump.md): logits (B, T, V), loss (mean next-token CE), grad.<name>.
#include <cstdio>
#include <memory>

#include "backend/backend.h"
#include "cli/commands.h"
#include "config/limits.h"
#include "core/error.h"
#include "io/output_dir.h"
#include "data/shard.h"
#include "io/checkpoint_format.h"
#include "io/safetensors.h"
#include "model/micro_step.h"

namespace kdtrain::cli {

namespace {

struct DumpFlags {
  std::string checkpoint, data, out, device = "cpu";
  int64_t batch_size = 1, seq_len = 0;
  bool grads = false;
};

void run_dump(const DumpFlags& f) {
  KD_CHECK(f.batch_size >= 1, "--batch-size must be at least 1");
  KD_CHECK(f.seq_len >= 1, "--seq-len must be at least 1");
  io::claim_output_file(f.out, "--out", {f.checkpoint, f.data});
  io::ModelCheckpoint header;  // config only; weights load straight into the arena
  io::read_hf_config(f.checkpoint + "/config.json", &header.model, &header.attention);
  auto backend = make_backend(f.device, 0);
  Model model(header.model, header.attention, *backend, f.grads ? ModelUse::train : ModelUse::frozen);
  std::vector<float> params(model.layout().total);
  io::load_model_weights(f.checkpoint, model.layout(), params.data());
  model.set_params(params);

  const int64_t B = f.batch_size, T = f.seq_len, N = B * T, V = header.model.vocab_size;
  data::TokenShard shard(f.data);
  KD_CHECK(shard.size() >= N + 1, f.data, ": holds ", shard.size(), " tokens, fewer than B*T+1 = ",
           N + 1, " (--batch-size ", B, ", --seq-len ", T, ")");
  std::vector<int32_t> tokens(N + 1);
  shard.copy_tokens(0, N + 1, tokens.data());
  for (int64_t i = 0; i <= N; ++i)
    KD_CHECK(tokens[i] >= 0 && tokens[i] < V, f.data, ": token ", tokens[i], " at position ", i,
             " is outside the model's vocabulary (", V, ")");

  std::vector<float> logits(N * V);
  if (f.grads) model.zero_grads();
  FusedLoss loss(*backend);
  MicroPass pass = f.grads ? MicroPass::training(1.f / static_cast<float>(N)) : MicroPass::eval();
  pass.logits = [&](int64_t start, int64_t n, const float* chunk) {
    std::copy(chunk, chunk + n * V, logits.begin() + start * V);
  };
  const LossSums sums =
      run_micro_batch({tokens.data(), tokens.data() + 1, B, T}, model, MicroTeacher{}, loss, LossSettings{}, pass);
  const float mean_loss = static_cast<float>(sums.ce / N);

  io::SafetensorsWriter writer;
  writer.add_f32("logits", {B, T, V}, logits.data());
  writer.add_f32("loss", {}, &mean_loss);
  std::vector<float> grads;
  if (f.grads) {
    grads = model.get_grads();
    for (const ParamSpec& spec : model.layout().specs)
      if (spec.trainable()) writer.add_f32("grad." + spec.name, spec.shape, grads.data() + spec.offset);
  }
  writer.set_metadata("checkpoint", f.checkpoint);
  writer.set_metadata("data", f.data);
  writer.write(f.out);
  std::printf("wrote %s: loss %.6f over %lld tokens%s\n", f.out.c_str(), mean_loss,
              static_cast<long long>(N), f.grads ? ", with gradients" : "");
}

}  // namespace

void register_dump(CLI::App& app) {
  auto flags = std::make_shared<DumpFlags>();
  auto* command = app.add_subcommand(
      "dump", "One forward (and backward) on a shard's first tokens, written as safetensors");
  command->add_option("--checkpoint", flags->checkpoint, "model checkpoint directory")->required()->transform(normal_path_option());
  command->add_option("--data", flags->data, "token shard (llm.c .bin)")->required();
  command->add_option("--batch-size", flags->batch_size, "B: sequences")->required()->check(in_range<int64_t>(1, SizeLimits::batch));
  command->add_option("--seq-len", flags->seq_len, "T: tokens per sequence")->required()->check(in_range<int64_t>(1, SizeLimits::seq_len));
  add_output_file_option(*command, "--out", flags->out, "output .safetensors file")->required();
  command->add_flag("--grads", flags->grads, "also write grad.<name> for every trained parameter");
  command->add_option("--device", flags->device, "cpu or cuda")->check(one_of<Device>());
  command->callback([flags] { run_dump(*flags); });
}

}  // namespace kdtrain::cli
