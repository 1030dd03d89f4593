#include "train/teacher_load.h"

#include <condition_variable>
#include <deque>
#include <filesystem>
#include <mutex>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>

#include "core/error.h"
#include "data/teacher_cache.h"
#include "io/checkpoint_format.h"

namespace kdtrain {

namespace {

// data::TeacherHasher on a thread of its own, fed tensors in order. bf16
// tensors are read from the mapping (alive until finish()); fp32 ones, which
// the reader converted into a temporary, are copied.
class HashThread {
 public:
  HashThread(const ModelConfig& model, const AttentionConfig& attention)
      : hasher_(model, attention), thread_([this] { run(); }) {}
  ~HashThread() { finish(); }
  void push(const void* values, int64_t n, bool bf16) {
    Item item{values, n, bf16, {}};
    if (!bf16) item.owned.assign(static_cast<const float*>(values), static_cast<const float*>(values) + n);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(std::move(item));
    }
    ready_.notify_one();
  }
  void finish() {  // waits for every pushed tensor
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    ready_.notify_one();
    if (thread_.joinable()) thread_.join();
  }
  uint64_t value() {
    finish();
    return hasher_.value();
  }

 private:
  struct Item {
    const void* values;
    int64_t n;
    bool bf16;
    std::vector<float> owned;
  };
  void run() {
    for (;;) {
      Item item{nullptr, 0, false, {}};
      {
        std::unique_lock<std::mutex> lock(mutex_);
        ready_.wait(lock, [&] { return !queue_.empty() || done_; });
        if (queue_.empty()) return;
        item = std::move(queue_.front());
        queue_.pop_front();
      }
      if (item.bf16) {
        hasher_.add_bf16(item.values, item.n);
      } else {
        hasher_.add(item.owned.data(), item.n);
      }
    }
  }
  data::TeacherHasher hasher_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<Item> queue_;
  bool done_ = false;
  std::thread thread_;  // last: starts once the rest exists
};

}  // namespace

uint64_t stream_teacher(const std::string& dir, const ModelConfig& model,
                        const AttentionConfig& attention, const ParamLayout& layout,
                        const TensorUpload& upload) {
  // The fingerprint is a serial chain over the parameters in arena order: it
  // runs on its own thread beside the finite scan and the uploads, reading the
  // mapped tensors, and is joined before the files are unmapped.
  HashThread hash(model, attention);
  int64_t next = 0;
  const io::WeightsSummary summary = io::stream_model_weights(
      dir, layout,
      [&](const ParamSpec& spec, const void* values, bool bf16) {
        KD_CHECK(spec.offset == next, "load_teacher: tensor '", spec.name, "' at ", spec.offset,
                 " does not follow the previous one (", next, ")");
        hash.push(values, spec.numel(), bf16);
        upload(spec, values, bf16);
        next += spec.numel();
      },
      [&] { hash.finish(); });
  KD_CHECK(next == layout.total, "load_teacher: the tensors of ", dir, " fill ", next, " of ",
           layout.total, " parameters");
  if (summary.tied_head_in_file)
    spdlog::info("{}: tie_word_embeddings is true, so the stored 'lm_head.weight' is ignored", dir);
  return hash.value();
}

LoadedTeacher load_teacher(const std::string& dir, Backend& backend, int64_t vocab_size,
                           const std::string& key) {
  ModelConfig model;
  AttentionConfig attention;
  io::read_hf_config((std::filesystem::path(dir) / "config.json").string(), &model, &attention);
  KD_CHECK(model.vocab_size == vocab_size, key, ": ", dir, " has vocab_size ", model.vocab_size,
           " but the student has ", vocab_size, "; student and teacher must share the vocabulary");
  // The sizes config.json claims are checked against the files' headers before
  // the device arena is reserved (as load_model_dir does).
  io::check_model_weights(dir, make_param_layout(model, attention));
  LoadedTeacher t;
  t.model = std::make_unique<Model>(model, attention, backend, ModelUse::teacher);
  Model& m = *t.model;
  t.hash = stream_teacher(dir, model, attention, m.layout(),
                          [&](const ParamSpec& spec, const void* values, bool bf16) {
                            m.set_param_tensor(spec.offset, values, spec.numel(), bf16);
                          });
  m.finish_param_tensors();
  return t;
}

}  // namespace kdtrain
