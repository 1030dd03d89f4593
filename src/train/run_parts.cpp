#include "train/run_parts.h"

#include <algorithm>
#include <thread>

#include "core/error.h"
#include "data/shard_manifest.h"
#include "io/checksums.h"
#include "io/model_dir.h"
#include "model/cached_teacher_loss.h"
#include "train/teacher_load.h"

namespace kdtrain {

void check_training_path(const Config& config) {
  const ModelConfig& m = config.model;
  const TrainConfig& t = config.train;
  const std::string why = training_path_refusal(
      t.device, AttentionShape{t.micro_batch, t.seq_len, m.num_attention_heads, m.num_key_value_heads, m.head_dim});
  KD_CHECK(why.empty(), "model.head_dim = ", m.head_dim, ", model.num_attention_heads (", m.num_attention_heads,
           ") and train.micro_batch (", t.micro_batch, ") on train.device=", choice_name(t.device), ": ", why,
           " (training on CUDA runs the fused attention kernels, which take head dims 64 and 128 and batch and "
           "heads up to 65535; train.device=cpu takes any)");
}

void RunParts::build() {
  const TrainConfig& t = config.train;
  // train.threads = 0 means all cores; ranks sharing a node share them out,
  // else their thread pools oversubscribe the cores and every step crawls.
  int64_t threads = t.threads;
  if (threads == 0 && comm.local_world() > 1)
    threads = std::max<int64_t>(1, std::thread::hardware_concurrency() / comm.local_world());
  backend = make_backend(t.device, threads, t.attention_forward, t.attention_backward);
  student = std::make_unique<Model>(config.model, config.attention, *backend, ModelUse::train);
  student->set_recompute(recompute_plan(t));
  loss = std::make_unique<FusedLoss>(*backend);
  // Optimizer range: this rank's shard under ZeRO-1, else the whole arena.
  const int64_t total_params = student->layout().total;
  opt_range = zero1() ? dist::shard_range(total_params, comm.rank(), comm.world()) : dist::Range{0, total_params};
  load_data();
  load_teacher();
  optimizer = std::make_unique<AdamW>(*student, config.optimizer, opt_range.begin, opt_range.end);
}

MemoryPlanInput RunParts::memory_plan_input() const {
  MemoryPlanInput in = kdtrain::memory_plan_input(config);
  in.act_dtype = backend->act_dtype();
  in.world_size = comm.world();
  in.device_bytes = backend->memory_stats().device_total_bytes;  // -1 on the host
  if (teacher) {
    in.teacher = teacher->config();
    in.teacher_attention = teacher->attention();
  }
  if (cache) in.cache_top_k = cache->header().K;
  return in;
}

void RunParts::load_data() {
  const TrainConfig& t = config.train;
  const int64_t vocab = config.model.vocab_size;
  KD_CHECK(!config.data.train.empty(), "data.train: no training shards given");
  data::check_manifest_vocab(config.data.train, vocab, "data.train");
  train_data = std::make_unique<data::TokenDataset>(config.data.train, t.seq_len, vocab);
  if (!config.data.val.empty()) {
    data::check_manifest_vocab(config.data.val, vocab, "data.val");
    val_data = std::make_unique<data::TokenDataset>(config.data.val, t.seq_len, vocab);
  }
  const int64_t windows = train_data->num_windows();
  KD_CHECK(windows >= t.global_batch, "data.train: only ", windows, " windows of train.seq_len+1 = ",
           t.seq_len + 1, " tokens, fewer than one global batch (", t.global_batch, " sequences)");
  sampler = std::make_unique<data::Sampler>(windows, t.seed);
}

// On CUDA the reader thread also uploads each micro-batch's rows.
void RunParts::start_cache_reader() {
  const int verify_threads =
      data::verify_threads(config.kd.cache_verify_threads, std::thread::hardware_concurrency(), comm.local_world());
  cache_reader = std::make_unique<data::CachePrefetcher>(*cache, *backend, config.train.micro_batch, verify_threads);
}

// kd.teacher (a model run online) or kd.teacher_cache (its stored top-k rows,
// which replace it), and the fingerprint a resume compares.
void RunParts::load_teacher() {
  const KdConfig& kd = config.kd;
  const int64_t vocab = config.model.vocab_size;
  if (!kd.teacher.empty()) {
    LoadedTeacher loaded = kdtrain::load_teacher(kd.teacher, *backend, vocab, "kd.teacher");
    const ModelConfig& tm = loaded.model->config();
    // Checked here, before the run directory exists, not at the first forward.
    KD_CHECK(tm.max_position_embeddings >= config.train.seq_len, "kd.teacher: ", kd.teacher,
             " has max_position_embeddings ", tm.max_position_embeddings, ", fewer than train.seq_len ",
             config.train.seq_len, ": the teacher cannot score windows that long");
    teacher = std::move(loaded.model);
    teacher_fingerprint = "model:" + io::hex64(loaded.hash);
  }
  if (!kd.teacher_cache.empty()) {
    cache = std::make_unique<data::TeacherCache>(kd.teacher_cache);
    cache->require_match(*train_data, vocab, "kd.teacher_cache");
    cache->share_checks_on_node(comm);  // collective: every rank opens the cache here
    start_cache_reader();
    const data::CacheHeader& h = cache->header();
    teacher_fingerprint = "cache:" + io::hex64(h.teacher_hash) + ",top_k=" + std::to_string(h.K) +
                          (h.value_type == data::CacheValueType::bf16 ? ",bf16" : ",f32");
    check_cached_loss_kind(kd.loss, kd.cache_tail);
  }
}

}  // namespace kdtrain
