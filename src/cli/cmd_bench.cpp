// kdtrain bench: training-step throughput, per-phase times, MFU and memory on
// random tokens (src/bench/bench.h, docs/performance.md).
#include <iostream>
#include <memory>

#include "bench/bench.h"
#include "bench/collective_bench.h"
#include "bench/scaling.h"
#include "cli/commands.h"
#include "cli/teacher_cache_bench.h"
#include "config/limits.h"

namespace kdtrain::cli {

namespace {
struct BenchCliOptions {
  CommonOptions common;
  bench::BenchOptions bench;
  bool json = false;
  std::vector<int> project_worlds;  // --project-world-size: the scaling model instead of a report
  std::string measured;             // the measured step for it ("" = run the bench first)
  bench::Interconnect links;
  bool collectives = false;         // --collectives: MPI against the communication model
  std::string teacher_load;         // --teacher-load DIR: time the host part of loading it
  bool cache_read = false;          // --teacher-cache-read: one core's cache decode rate
  int64_t cache_vocab = 0;          // --cache-vocab: the synthetic cache's V (0: the bench's default)
  std::string cache_dir;            // --cache DIR for it ("" = synthetic)
  std::string attention_forward;    // --attention-forward: train.attention_forward
};

// --peak-tflops, --nvlink-gb-s, --network-gb-s: positive, and at most a
// thousand times any device's, so no rate divides by zero or wraps a product.
constexpr double kMinRate = 1e-3, kMaxRate = 1e6;
// --gpus-per-node: more than any node holds.
constexpr int kMaxGpusPerNode = 1024;

void run_bench_command(const BenchCliOptions& o) {
  if (o.cache_read) {
    CacheReadBenchOptions c;
    c.cache = o.cache_dir;
    if (o.bench.teacher_cache > 0) c.top_k = o.bench.teacher_cache;
    if (o.cache_vocab > 0) c.vocab_size = o.cache_vocab;
    std::cout << run_cache_read_bench(c).dump() << std::endl;
    return;
  }
  if (!o.teacher_load.empty()) {
    std::cout << bench::run_teacher_load_bench(o.teacher_load).dump() << std::endl;
    return;
  }
  if (o.collectives) {
    bench::CollectiveBenchOptions c;
    c.repeats = o.bench.steps;
    const nlohmann::json j = bench::run_collective_bench(c);
    if (j["rank"].get<int>() == 0) std::cout << (o.json ? j.dump() + "\n" : bench::format_collective_report(j));
    return;
  }
  bench::BenchOptions b = o.bench;
  b.config_path = o.common.config_path;
  b.preset = o.common.preset;
  b.attention = o.common.attention;
  b.overrides = o.common.overrides;
  if (!o.attention_forward.empty()) b.overrides.push_back("train.attention_forward=" + o.attention_forward);
  if (!o.project_worlds.empty()) {
    const nlohmann::json j = bench::run_projection(b, o.measured, o.links, o.project_worlds);
    std::cout << (o.json ? j.dump() + "\n" : bench::format_projection(j));
    return;
  }
  const nlohmann::json report =
      b.attention_only ? bench::run_attention_bench(b) : bench::run_bench(b);
  if (o.json)
    std::cout << report.dump() << std::endl;
  else
    std::cout << (b.attention_only ? bench::format_attention_report(report)
                                   : bench::format_report(report));
}

}  // namespace

void register_bench(CLI::App& app) {
  auto o = std::make_shared<BenchCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "time training steps (teacher fwd, student fwd+loss, backward, optimizer) on random tokens");
  add_common_options(*cmd, o->common);
  cmd->add_option("--micro-batch", o->bench.micro_batch, "sequences per step (default train.micro_batch)")
      ->check(in_range<int64_t>(1, SizeLimits::batch));
  cmd->add_option("--seq-len", o->bench.seq_len, "tokens per sequence (default train.seq_len)")
      ->check(in_range<int64_t>(1, SizeLimits::seq_len));
  cmd->add_option("--teacher", o->bench.teacher,
                  "teacher: a preset name (random init) or a checkpoint directory");
  cmd->add_option("--teacher-cache", o->bench.teacher_cache,
                  "K: distil from a cached top-K teacher (random rows, kd.cache_tail) through the "
                  "sparse KD loss instead of an online teacher")
      ->check(in_range<int64_t>(1, SizeLimits::vocab_size));
  cmd->add_option("--steps", o->bench.steps, "timed steps (default 10)")
      ->check(in_range<int64_t>(1, SizeLimits::step_count));
  cmd->add_option("--warmup", o->bench.warmup, "untimed warmup steps (default 2)")
      ->check(in_range<int64_t>(0, SizeLimits::step_count));
  cmd->add_option("--device", o->bench.device, "cpu or cuda (default train.device)")->check(one_of<Device>());
  cmd->add_option("--peak-tflops", o->bench.peak_tflops,
                  "peak TFLOP/s for MFU (default 989 on cuda: H100/H200 dense bf16; none on cpu)")
      ->check(in_range<double>(kMinRate, kMaxRate));
  cmd->add_option("--seed", o->bench.seed, "seed of the tokens and the random init")->check(seed_value());
  cmd->add_flag("--json", o->json, "print the report as one JSON object");
  CLI::Option* attention_only = cmd->add_flag("--attention-only", o->bench.attention_only,
                "time only the attention core (and gate) forward+backward on random inputs");
  cmd->add_flag("--kernel-times", o->bench.kernel_times,
                "with --attention-only: then --steps more iterations with each GPU kernel launch timed by "
                "CUDA events, reported as kernel_ms {name: mean ms per call} (forward_ms and backward_ms "
                "come from the untouched iterations; on cpu kernel_ms is empty)")
      ->needs(attention_only);
  cmd->add_option("--head-dim", o->bench.head_dim,
                  "with --attention-only: head dim (heads rescaled to keep H*D and the GQA ratio)")
      ->check(in_range<int64_t>(1, SizeLimits::head_dim));
  cmd->add_option("--project-world-size", o->project_worlds,
                  "print the scaling model's step time, tokens/s per GPU and communication hidden at "
                  "these data-parallel world sizes (e.g. 8,64,512; docs/distributed.md)")
      ->delimiter(',')
      ->check(in_range<int>(1, SizeLimits::ranks));
  cmd->add_option("--measured", o->measured,
                  "with --project-world-size: the one-GPU step from this `kdtrain bench --json` report "
                  "instead of running the bench (scaled to --preset / --teacher where they differ)");
  cmd->add_option("--nvlink-gb-s", o->links.nvlink_gb_s, "GB/s per GPU per direction inside a node (450)")
      ->check(in_range<double>(kMinRate, kMaxRate));
  cmd->add_option("--network-gb-s", o->links.network_gb_s, "GB/s per GPU between nodes (50: InfiniBand NDR)")
      ->check(in_range<double>(kMinRate, kMaxRate));
  cmd->add_option("--gpus-per-node", o->links.gpus_per_node, "GPUs per node (8)")
      ->check(in_range<int>(1, kMaxGpusPerNode));
  cmd->add_flag("--collectives", o->collectives,
                "under mpirun -np W: time MPI's gradient reduction and all-gather against the "
                "scaling model's prediction from the measured link (--steps repetitions)");
  cmd->add_option("--attention-forward", o->attention_forward,
                  "the CUDA attention forward's kernel, auto, mma_sync, wgmma or wgmma_lockstep "
                  "(train.attention_forward), e.g. to time the kernels against each other")
      ->check(one_of<AttentionForward>());
  cmd->add_option("--teacher-load", o->teacher_load,
                  "DIR: time the host part of loading this teacher checkpoint (map, check, scan, "
                  "hash, staging copies) and print it as JSON; no training step");
  cmd->add_flag("--teacher-cache-read", o->cache_read,
                "time one core reading a teacher cache (--cache DIR, else a synthetic one with K = "
                "--teacher-cache or 64): checksum and decode tokens/s, as JSON; no training step");
  cmd->add_option("--cache", o->cache_dir, "with --teacher-cache-read: the cache directory");
  cmd->add_option("--cache-vocab", o->cache_vocab,
                  "with --teacher-cache-read and no --cache: the synthetic cache's vocabulary size "
                  "(128256: 17-bit ids; 151936: Qwen's, 18-bit)")
      ->check(in_range<int64_t>(1, SizeLimits::vocab_size));
  cmd->callback([o] { run_bench_command(*o); });
}

}  // namespace kdtrain::cli
