// kdtrain export: a checkpoint directory -> a Hugging Face model directory that
// transformers and lm-eval-harness load (io/hf_export.h, docs/export.md).
#include <cstdio>
#include <memory>

#include "cli/checkpoint_input.h"
#include "cli/commands.h"
#include "eval/perplexity.h"
#include "io/hf_export.h"

namespace kdtrain::cli {

namespace {
struct ExportFlags {
  std::string checkpoint, out, tokenizer, dtype = "fp32", affine_n;
  bool force = false;
};

void run_export(const ExportFlags& f) {
  io::ExportOptions o;
  // A run directory exports its latest checkpoint, as in eval and analyze.
  o.checkpoint = eval::resolve_model_dir(f.checkpoint);
  if (o.checkpoint != f.checkpoint) std::printf("exporting %s (the run's latest checkpoint)\n", o.checkpoint.c_str());
  o.out = f.out;
  o.tokenizer = f.tokenizer;
  o.dtype = io::parse_export_dtype(f.dtype);
  o.force = f.force;
  o.affine_n = parse_affine_n_option(f.affine_n);
  const io::ExportSummary s = io::export_hf_checkpoint(o);
  std::printf("wrote %s: %s, %lld tensors (%s), %.3fM parameters\n", f.out.c_str(),
              s.architecture.c_str(), static_cast<long long>(s.tensors),
              o.dtype == io::ExportDtype::bf16 ? "bf16" : "fp32", s.parameters / 1e6);
  std::printf("  files:");
  for (const std::string& name : s.files) std::printf(" %s", name.c_str());
  std::printf("\n");
  for (const std::string& note : s.notes) std::printf("  note: %s\n", note.c_str());
  if (s.architecture == "KdtrainForCausalLM")
    std::printf("  load with AutoModelForCausalLM.from_pretrained(\"%s\", trust_remote_code=True)\n",
                f.out.c_str());
}
}  // namespace

void register_export(CLI::App& app) {
  auto flags = std::make_shared<ExportFlags>();
  auto* command = app.add_subcommand(
      "export", "Write a checkpoint as a Hugging Face model directory (transformers, lm-eval)");
  command->add_option("--checkpoint", flags->checkpoint, "model checkpoint directory, or a run directory (its latest checkpoint)")
      ->required()
      ->transform(normal_path_option());
  command->add_option("--out", flags->out, "Hugging Face directory to write")->required()->transform(normal_path_option());
  command->add_option("--dtype", flags->dtype, "weights dtype: bf16 or fp32 (default fp32)");
  command->add_option("--tokenizer", flags->tokenizer,
                      "tokenizer directory (or tokenizer.json) whose files are copied into --out");
  add_affine_n_option(*command, flags->affine_n);
  command->add_flag("--force", flags->force, "replace --out when it holds an earlier `kdtrain export` output (nothing else)");
  command->callback([flags] { run_export(*flags); });
}

}  // namespace kdtrain::cli
