// The data-parallel scaling model: the step
// time on W GPUs predicted from one GPU's measured step (the phase split of
// `kdtrain bench`), the gradient arena and its bucket plan, and the
// interconnect, as `kdtrain bench --project-world-size` prints it.
//
// A step on W GPUs, with m = global_batch / (W x b) micro-batches of b
// sequences per GPU (b = train.micro_batch, or global_batch / W when that is
// smaller; the measured phase times scale with b per sequence):
//   compute  = m x (teacher + forward+loss + backward) + optimizer
//   the gradient buckets are reduced one after another on the communication
//   stream, each from the moment the last micro-batch's backward has made it
//   final (the backward is taken to finish its layers at an even pace, the
//   untied lm_head and final norm at its start, the embedding at its end);
//   what runs past the end of that backward is exposed;
//   then the ZeRO-1 all-gather of the fp32 master weights (exposed: the next
//   forward needs them) and three small host all-reduces.
//   step = compute + exposed reduction + all-gather + host reductions.
//
// Collective costs, on NCCL's ring over W GPUs, nodes of gpus_per_node GPUs:
//   a bucket of S bytes is an ncclReduce to its owner: every link carries S
//   once, pipelined: S / bandwidth + hops x hop latency;
//   the all-gather of A bytes (grouped ncclBroadcast of every shard): A /
//   bandwidth + hops x hop latency;
//   bandwidth is NVLink's inside one node and the network's per GPU across
//   nodes (each GPU's ring traffic leaves the node through its own NIC).
// Not modelled: NCCL's kernels slowing the overlapped backward (a few SMs),
// stragglers, and the data loader.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/config.h"
#include "dist/communicator.h"

namespace kdtrain::bench {

struct BenchOptions;  // bench/bench.h

struct Interconnect {
  double nvlink_gb_s = 450.0;   // per GPU per direction inside a node (NVLink 4, H100 SXM)
  double network_gb_s = 50.0;   // per GPU across nodes (InfiniBand NDR, 400 Gb/s per GPU)
  int gpus_per_node = 8;
  double nvlink_hop_us = 3.0;   // per ring hop inside a node
  double network_hop_us = 8.0;  // per ring hop between nodes
};

// One GPU's measured step, per micro-batch of `micro_batch` sequences of
// `seq_len` tokens, in seconds.
struct MeasuredStep {
  std::string preset, source;
  int64_t micro_batch = 0, seq_len = 0;
  double teacher_s = 0, forward_loss_s = 0, backward_s = 0, optimizer_s = 0;
};

// From a `kdtrain bench --json` report (keys preset, micro_batch, seq_len, phase_ms).
MeasuredStep measured_step_from_report(const nlohmann::json& report, const std::string& source);

// The measured step carried over to another student (and teacher) at the
// measured student's achieved FLOP rate: forward+loss and backward scale with
// the student's training FLOPs per token, the optimizer with its parameter
// count, the teacher forward with the teacher's FLOPs (0 without a teacher).
MeasuredStep scale_measured_step(const MeasuredStep& measured, const ModelConfig& from,
                                 const ModelConfig& to, const AttentionConfig& attention,
                                 const ModelConfig* teacher);

double ring_hop_latency_s(int world, const Interconnect& links);  // all hops of one ring pass
double ring_bandwidth_bytes_s(int world, const Interconnect& links);
double bucket_reduce_s(double bytes, int world, const Interconnect& links);
double all_gather_s(double bytes, int world, const Interconnect& links);

// When each gradient range becomes final, in backward order, as a fraction of
// the backward pass (see above).
struct ReadyRange {
  dist::Range range;
  double at = 0.0;
};
std::vector<ReadyRange> backward_ready_profile(const ModelConfig& model, const AttentionConfig& attention);

struct ScalingSetup {
  MeasuredStep step;
  ModelConfig model;
  AttentionConfig attention;
  int64_t global_batch = 1024;
  int64_t micro_batch = 0;  // sequences per micro-batch (0: the measured one)
  int64_t bucket_elements = 0;
  bool bf16_reduce = false;
  Interconnect links;
};

struct Projection {
  int world = 1;
  int64_t micro_batch = 0, micro_batches = 0;  // per GPU per step
  double compute_s = 0, last_backward_s = 0;
  double reduce_s = 0;          // every bucket, back to back
  double reduce_exposed_s = 0;  // the part after the last backward
  double all_gather_s = 0, host_s = 0;
  double step_s = 0;
  double tokens_per_s_per_gpu = 0;
  double hidden_fraction = 0;   // of all communication time
};

Projection project(const ScalingSetup& setup, int world);

// `kdtrain bench --project-world-size W...`: the student, global batch,
// micro-batch (--micro-batch, else train.micro_batch), sequence length and
// dist.bucket_mb / dist.reduce_dtype of `options`' config; the measured step
// from `measured_path` (a `kdtrain bench --json` report), carried over to the
// config's student and to options.teacher (a preset) where they differ from
// what was measured (scale_measured_step); with no `measured_path`, the
// benchmark runs first, here. Returns projection_json(...).
nlohmann::json run_projection(const BenchOptions& options, const std::string& measured_path,
                              const Interconnect& links, const std::vector<int>& worlds);

nlohmann::json projection_json(const ScalingSetup& setup, const std::vector<Projection>& rows);
// The table of a run_projection report.
std::string format_projection(const nlohmann::json& report);

}  // namespace kdtrain::bench
