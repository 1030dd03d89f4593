// An online teacher (kd.teacher) ready on the backend straight from its
// checkpoint: the safetensors files are mapped, and each BF16 tensor goes from
// the mapping to the backend as it is (Model::set_param_tensor) — no fp32 copy
// of the model on the host, where load_model_dir + set_params held 4 bytes per
// parameter (12.8 GB for a 3B teacher) and rounded them back to bf16. The
// fingerprint (data::teacher_hash) is computed from the same mapped tensors.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "model/model.h"

namespace kdtrain {

struct LoadedTeacher {
  std::unique_ptr<Model> model;  // ModelUse::teacher
  uint64_t hash = 0;             // data::teacher_hash of the checkpoint
};

// The tensors of checkpoint `dir` in arena order, each checked and handed to
// `upload` straight from the mapping (bf16: the file's bytes; else fp32), with
// the fingerprint computed beside them on a thread of its own; returns it.
using TensorUpload = std::function<void(const ParamSpec& spec, const void* values, bool bf16)>;
uint64_t stream_teacher(const std::string& dir, const ModelConfig& model,
                        const AttentionConfig& attention, const ParamLayout& layout,
                        const TensorUpload& upload);

// `vocab_size` is the student's: a teacher with another vocabulary is refused,
// naming `key` (kd.teacher, --teacher) and the directory.
LoadedTeacher load_teacher(const std::string& dir, Backend& backend, int64_t vocab_size,
                           const std::string& key);

}  // namespace kdtrain
