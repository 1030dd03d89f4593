#include "train/train_step.h"

#include <cmath>
#include <memory>
#include <utility>

#include "core/error.h"
#include "data/teacher_cache_prefetch.h"
#include "model/micro_step.h"
#include "train/observer.h"
#include "train/schedule.h"

namespace kdtrain {

namespace {
// How far ahead the verifier is given the shards to sum: early in a run a
// step's windows fall in shards not yet summed, and summing is slower than the
// step, so the list only has to outlast the verifier's work until the next step.
constexpr int64_t kVerifyAheadSteps = 8;
}  // namespace

BatchSource dataset_batches(const RunParts& parts) {
  BatchSource source;
  const data::TokenDataset* train = parts.train_data.get();
  source.tokens = [train](const std::vector<int64_t>& windows, int32_t* inputs, int32_t* targets) {
    train->fill_batch(windows, inputs, targets);
  };
  source.cached_rows = cache_reader_rows(parts);
  return source;
}

CachedRowsSource cache_reader_rows(const RunParts& parts) {
  data::CachePrefetcher* reader = parts.cache_reader.get();
  if (!reader) return {};
  const RunParts* run = &parts;
  auto listed_at = std::make_shared<std::pair<int64_t, int64_t>>(-1, -1);  // the sampler's position then
  // The rows were read while the previous micro-batch computed; the next ones
  // are read while this one computes. Once per step (the sampler moved), the
  // shards of the next steps' windows go to the verifier threads.
  return [reader, run, listed_at](const std::vector<int64_t>& windows, const std::vector<int64_t>& next) {
    CachedRows rows = reader->take(windows);
    reader->request(next);
    const data::Sampler& sampler = *run->sampler;
    const std::pair<int64_t, int64_t> position(sampler.epoch(), sampler.index());
    if (position != *listed_at) {
      *listed_at = position;
      reader->verify_ahead(data::windows_ahead(sampler, run->config.train.global_batch, kVerifyAheadSteps,
                                               run->comm.rank(), run->comm.world(), next));
    }
    return rows;
  };
}

// The gradient reduction (dist/grad_reducer.h): the student's backward marks
// each range final; the reducer launches each complete bucket, in a fixed
// order, during the backward (dist.overlap) or after it.
TrainStep::TrainStep(RunParts& parts, TrainObserver* observer, BatchSource source)
    : parts_(parts), observer_(observer), source_(source.tokens ? std::move(source) : dataset_batches(parts)) {
  const DistConfig& d = parts.config.dist;
  dist::GradReduceOptions options;
  options.bucket_elements = dist::bucket_elements_for_mib(d.bucket_mb);
  options.overlap = d.overlap;
  options.bf16 = d.reduce_dtype == ReduceDtype::bf16;
  Model& student = *parts.student;
  reducer_ = std::make_unique<dist::GradReducer>(parts.comm, student.grads(), student.layout().total, options,
                                                 parts.backend->native_stream());
  student.set_grads_final_hook([this](int64_t begin, int64_t end) { reducer_->mark_final(begin, end); });
  if (observer_)
    reducer_->set_before_launch([this](const dist::Range& bucket) {
      observer_->on_grads_ready(step_, bucket.begin, bucket.end, *parts_.student);
    });
}

StepResult TrainStep::run(int64_t step) {
  const TrainConfig& t = parts_.config.train;
  step_ = step;
  // Every rank draws the same global batch and keeps its contiguous slice.
  windows_ = data::rank_slice(parts_.sampler->next_global_batch(t.global_batch), parts_.comm.rank(),
                              parts_.comm.world());
  StepResult r;
  r.sums = micro_batches(step, windows_);
  if (observer_) observer_->on_phase(step, StepPhase::optimizer);
  reduce_across_ranks(r.sums);
  r.grad_norm = global_grad_norm();
  r.lr = learning_rate(parts_.config.schedule, parts_.config.optimizer.lr, step - 1, t.steps);
  r.loss = r.sums.mixed(static_cast<float>(parts_.config.kd.weight), has_teacher());
  if (!std::isfinite(r.loss) || !std::isfinite(r.grad_norm)) {
    r.applied = false;
    skip_nonfinite(step, r.loss, r.grad_norm);
  } else {
    skips_.consecutive = 0;
    apply(r);
  }
  // The variant's end of step (alpha_ma), on every rank, applied or not.
  r.alpha_mean = parts_.student->variant().end_step(parts_.comm, r.applied);
  if (observer_) {
    StepObservation o;
    o.step = step;
    o.rank = parts_.comm.rank();
    o.world = parts_.comm.world();
    o.windows = &windows_;
    o.loss = r.loss;
    o.grad_norm = r.grad_norm;
    o.applied = r.applied;
    observer_->on_step_end(o, *parts_.student);
  }
  return r;
}

// Forward, loss and backward of each micro-batch; the gradients accumulate,
// scaled by 1/(global tokens) so that their sum over ranks is the mean.
LossSums TrainStep::micro_batches(int64_t step, const std::vector<int64_t>& windows) {
  const TrainConfig& t = parts_.config.train;
  const int64_t b = t.micro_batch, T = t.seq_len;
  const int64_t micros = parts_.accumulation_steps();
  const LossSettings settings = loss_settings(parts_.config.kd);
  MicroPass pass = MicroPass::training(1.f / static_cast<float>(t.global_batch * T));
  if (observer_) pass.on_phase = [this, step](StepPhase phase) { observer_->on_phase(step, phase); };
  Model& student = *parts_.student;
  std::vector<int32_t> inputs(b * T), targets(b * T);
  LossSums sums;
  student.zero_grads();
  for (int64_t micro = 0; micro < micros; ++micro) {
    // The last micro-batch's backward makes the gradients final, bucket by bucket.
    if (micro + 1 == micros) reducer_->begin_step();
    std::vector<int64_t> ids(windows.begin() + micro * b, windows.begin() + (micro + 1) * b);
    source_.tokens(ids, inputs.data(), targets.data());
    if (observer_) observer_->on_micro_batch(step, inputs.data(), b, T);
    MicroTeacher teacher;
    teacher.model = parts_.teacher.get();
    CachedRows rows;  // this micro-batch's cached teacher rows
    if (source_.cached_rows) {
      rows = source_.cached_rows(ids, data::next_micro_windows(*parts_.sampler, windows, micro, b, t.global_batch,
                                                               parts_.comm.rank(), parts_.comm.world()));
      teacher.cached = &rows;
      teacher.tail = parts_.config.kd.cache_tail;
    }
    sums += run_micro_batch({inputs.data(), targets.data(), b, T}, student, teacher, *parts_.loss, settings, pass);
  }
  reducer_->finish();
  return sums;
}

// Sums over ranks after the gradient buckets: under ZeRO-1 each rank holds
// the summed gradients of its shard; with dist.zero1=false they are
// all-gathered so every rank holds all of them. Loss sums are all-reduced, so
// every rank takes the same non-finite decision.
void TrainStep::reduce_across_ranks(LossSums& sums) {
  dist::Communicator& comm = parts_.comm;
  if (!comm.distributed()) return;
  Model& student = *parts_.student;
  if (!parts_.zero1()) comm.all_gather(student.grads(), student.layout().total);
  double host[] = {sums.ce, sums.kd, static_cast<double>(sums.tokens), sums.soft_ce};
  comm.all_reduce_sum_host(host, 4);
  sums.ce = host[0];
  sums.kd = host[1];
  sums.tokens = static_cast<int64_t>(host[2]);
  sums.soft_ce = host[3];
}

// The global gradient norm: per-shard sums of squares added over ranks under ZeRO-1.
double TrainStep::global_grad_norm() {
  double sum = parts_.optimizer->grad_sum_squares();
  if (parts_.zero1()) parts_.comm.all_reduce_sum_host(&sum, 1);
  return std::sqrt(sum);
}

void TrainStep::skip_nonfinite(int64_t step, double loss, double grad_norm) {
  const TrainConfig& t = parts_.config.train;
  if (t.on_nonfinite == NonFinitePolicy::stop)
    fail("step ", step, ": non-finite ", std::isfinite(loss) ? "gradient norm" : "loss", " (loss ", loss,
         ", grad norm ", grad_norm,
         "); the update was not applied and the last checkpoint is intact. Set "
         "train.on_nonfinite=skip to skip such steps.");
  ++skips_.skipped;
  ++skips_.consecutive;
  // Skipping forever is a diverged run reported as a success.
  KD_CHECK(skips_.consecutive < t.max_consecutive_skips, "step ", step, ": ", skips_.consecutive,
           " steps in a row had a non-finite loss or gradient norm (loss ", loss, ", grad norm ", grad_norm,
           ") and were skipped; stopping at train.max_consecutive_skips = ", t.max_consecutive_skips,
           ". The run is diverging: lower optimizer.lr or clip gradients (optimizer.grad_clip), then "
           "resume from the last checkpoint.");
}

// Clip and AdamW; under ZeRO-1 every rank updated its shard of the master
// weights, which are then shared.
void TrainStep::apply(const StepResult& r) {
  parts_.optimizer->step(static_cast<float>(r.lr), clip_scale(r.grad_norm, parts_.config.optimizer.grad_clip));
  if (!parts_.zero1()) return;
  Model& student = *parts_.student;
  parts_.backend->synchronize();
  parts_.comm.all_gather(student.master(), student.layout().total);
  student.refresh_compute_weights();
}

}  // namespace kdtrain
