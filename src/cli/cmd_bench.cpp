// kdtrain bench: training-step throughput, per-phase times, MFU and memory on
// random tokens (src/bench/bench.h, docs/performance.md).
#include <iostream>
#include <memory>

#include "bench/bench.h"
#include "cli/commands.h"

namespace kdtrain::cli {

namespace {
struct BenchCliOptions {
  CommonOptions common;
  bench::BenchOptions bench;
  bool json = false;
};
}  // namespace

void register_bench(CLI::App& app) {
  auto o = std::make_shared<BenchCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "time training steps (teacher fwd, student fwd+loss, backward, optimizer) on random tokens");
  add_common_options(*cmd, o->common);
  cmd->add_option("--micro-batch", o->bench.micro_batch, "sequences per step (default train.micro_batch)");
  cmd->add_option("--seq-len", o->bench.seq_len, "tokens per sequence (default train.seq_len)");
  cmd->add_option("--teacher", o->bench.teacher,
                  "teacher: a preset name (random init) or a checkpoint directory");
  cmd->add_option("--steps", o->bench.steps, "timed steps (default 10)");
  cmd->add_option("--warmup", o->bench.warmup, "untimed warmup steps (default 2)");
  cmd->add_option("--device", o->bench.device, "cpu or cuda (default train.device)");
  cmd->add_option("--peak-tflops", o->bench.peak_tflops,
                  "peak TFLOP/s for MFU (default 989 on cuda: H100/H200 dense bf16; none on cpu)");
  cmd->add_option("--seed", o->bench.seed, "seed of the tokens and the random init");
  cmd->add_flag("--json", o->json, "print the report as one JSON object");
  cmd->add_flag("--attention-only", o->bench.attention_only,
                "time only the attention core (and gate) forward+backward on random inputs");
  cmd->add_option("--head-dim", o->bench.head_dim,
                  "with --attention-only: head dim (heads rescaled to keep H*D and the GQA ratio)");
  cmd->callback([o] {
    bench::BenchOptions b = o->bench;
    b.config_path = o->common.config_path;
    b.preset = o->common.preset;
    b.attention = o->common.attention;
    b.overrides = o->common.overrides;
    const nlohmann::json report =
        b.attention_only ? bench::run_attention_bench(b) : bench::run_bench(b);
    if (o->json)
      std::cout << report.dump() << std::endl;
    else
      std::cout << (b.attention_only ? bench::format_attention_report(report)
                                     : bench::format_report(report));
  });
}

}  // namespace kdtrain::cli
