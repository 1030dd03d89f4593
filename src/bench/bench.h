// kdtrain bench: times the training step itself (train/train_step.h: its
// learning-rate schedule, non-finite guard and the variant's end of step) on one
// micro-batch of random tokens, and reports throughput, per-phase times, MFU,
// and the memory plan beside the measured arenas (docs/performance.md).
//
// FLOP convention (the same in scripts/peers/bench_pytorch.py, checked by a test):
//   matmul params N  = every trainable parameter except the input embedding
//                      table, plus the LM head (V*C) counted once whether tied
//                      or not. For a tied model N equals the trainable total.
//                      Norm gains, biases and sinks are included (negligible).
//   student, per token trained:  6*N + 12*L*H*D*T
//   teacher, per token (forward): 2*N_t + 4*L_t*H_t*D_t*T
// The attention term counts the full T x T score matrix (no causal halving),
// as PaLM / torchtitan do, so MFU is comparable with their numbers; the
// affine prefix sum and the gate's elementwise work are not counted.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/config.h"
#include "model/param_layout.h"

namespace kdtrain::bench {

struct BenchOptions {
  std::string config_path, preset, attention;
  std::vector<std::string> overrides;
  std::string teacher;        // "" = none; a preset name (random init) or a checkpoint dir
  int64_t teacher_cache = 0;  // > 0: a cached top-K teacher of random rows (kd.cache_tail), not --teacher
  std::string device;         // "" = train.device
  int64_t micro_batch = 0;    // 0 = train.micro_batch
  int64_t seq_len = 0;        // 0 = train.seq_len
  int64_t steps = 10;
  int64_t warmup = 2;
  double peak_tflops = 0.0;   // 0 = 989 on cuda, none on cpu
  uint64_t seed = 1234;
  // --attention-only: time the backend's attention core (and the gate op for the
  // gated variants) forward and backward on random inputs, nothing else.
  bool attention_only = false;
  int64_t head_dim = 0;       // 0 = the preset's; else H = H0*D0/D, Hkv keeps the GQA ratio
  // --kernel-times (with --attention-only): after the timed iterations, --steps more with
  // each kernel launch bracketed by CUDA events (core/kernel_timer.h); "kernel_ms" in the
  // report. Separate iterations, so the events never touch forward_ms and backward_ms.
  bool kernel_times = false;
};

// What every bench resolves first: the command line's config, B and T (the
// flags over train.*), and the device (the flag over train.device); checks the
// step counts.
struct BenchShape {
  Config config;
  int64_t B = 0, T = 0;
  Device device = Device::cpu;
};
BenchShape resolve_bench(const BenchOptions& options);

// Causal attention FLOPs of one forward+backward (bench_attention.py's convention):
// forward 4*B*H*T^2*D/2 (causal half), forward+backward 3.5 x forward.
double attention_fwd_bwd_flops(int64_t B, int64_t H, int64_t T, int64_t D);
// Runs the attention-only benchmark; the report as JSON.
nlohmann::json run_attention_bench(const BenchOptions& options);

// Parameters that count in the 6N term (see above).
int64_t flop_params(const ParamLayout& layout, const ModelConfig& model);
// Training FLOPs per token of the student (6N + 12 L H D T).
double student_train_flops_per_token(const ModelConfig& model, const AttentionConfig& attention,
                                     int64_t T);
// Forward FLOPs per token of a teacher (2N + 4 L H D T).
double teacher_forward_flops_per_token(const ModelConfig& model, const AttentionConfig& attention,
                                       int64_t T);

// The host part of loading a teacher checkpoint without a device: what
// load_teacher does (train/teacher_load.h: map and check the files, scan for
// non-finite values, hash on a thread beside), each tensor copied through a
// 64 MiB buffer as the driver stages a pageable upload.
// Seconds, as JSON (docs/performance.md, "The teacher ready").
nlohmann::json run_teacher_load_bench(const std::string& dir);

// Runs warmup + steps training steps; returns the report as JSON (keys in docs/performance.md).
nlohmann::json run_bench(const BenchOptions& options);
// The human-readable form of the report.
std::string format_report(const nlohmann::json& report);
std::string format_attention_report(const nlohmann::json& report);

// Median of the values (0 for none).
double median(std::vector<double> values);
// Peak resident set size of this process in bytes (VmHWM), 0 when unavailable.
int64_t peak_rss_bytes();

}  // namespace kdtrain::bench
