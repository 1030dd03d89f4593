#include "train/teacher_load.h"

#include <filesystem>

#include <spdlog/spdlog.h>

#include "core/error.h"
#include "data/teacher_cache.h"
#include "io/checkpoint_format.h"

namespace kdtrain {

LoadedTeacher load_teacher(const std::string& dir, Backend& backend, int64_t vocab_size,
                           const std::string& key) {
  ModelConfig model;
  AttentionConfig attention;
  io::read_hf_config((std::filesystem::path(dir) / "config.json").string(), &model, &attention);
  KD_CHECK(model.vocab_size == vocab_size, key, ": ", dir, " has vocab_size ", model.vocab_size,
           " but the student has ", vocab_size, "; student and teacher must share the vocabulary");
  LoadedTeacher t;
  t.model = std::make_unique<Model>(model, attention, backend, ModelUse::teacher);
  data::TeacherHasher hash(model, attention);
  int64_t next = 0;  // the hash reads the parameters in arena order
  const io::WeightsSummary summary = io::stream_model_weights(
      dir, t.model->layout(), [&](const ParamSpec& spec, const void* values, bool bf16) {
        KD_CHECK(spec.offset == next, "load_teacher: tensor '", spec.name, "' at ", spec.offset,
                 " does not follow the previous one (", next, ")");
        const int64_t n = spec.numel();
        t.model->set_param_tensor(spec.offset, values, n, bf16);
        if (bf16) {
          hash.add_bf16(values, n);
        } else {
          hash.add(static_cast<const float*>(values), n);
        }
        next += n;
      });
  KD_CHECK(next == t.model->layout().total, "load_teacher: the tensors of ", dir, " fill ", next,
           " of ", t.model->layout().total, " parameters");
  t.model->finish_param_tensors();
  if (summary.tied_head_in_file)
    spdlog::info("{}: tie_word_embeddings is true, so the stored 'lm_head.weight' is ignored", dir);
  t.hash = hash.value();
  return t;
}

}  // namespace kdtrain
