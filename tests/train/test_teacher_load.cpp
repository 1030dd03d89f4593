// The online teacher loaded from its checkpoint without an fp32 copy
// (train/teacher_load.h) against the fp32 path it replaces (load_model_dir +
// Model::set_params + data::teacher_hash): the same parameters bit for bit, the
// same sinks and alpha_ma, the same fingerprint, for bf16, fp32 and mixed files
// and every variant; and a vocabulary mismatch refused naming the key.
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>

#include "backend/backend.h"
#include "data/teacher_cache.h"
#include "io/checkpoint_format.h"
#include "io/model_dir.h"
#include "io/safetensors.h"
#include "model/init.h"
#include "model/model.h"
#include "support/model_fixtures.h"
#include "support/temp_dir.h"
#include "train/teacher_load.h"

using namespace kdtrain;
using namespace kdtrain::testing;

namespace {

// config.json and one safetensors file: every tensor bf16, fp32, or alternating.
enum class Dtypes { bf16, f32, mixed };
void write_checkpoint(const std::string& dir, const ModelConfig& m, const AttentionConfig& a,
                      const std::vector<float>& params, Dtypes dtypes) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << io::hf_config_json(m, a).dump(2);
  io::SafetensorsWriter w;
  int i = 0;
  for (const io::TensorRef& t : io::layout_tensors(make_param_layout(m, a), params.data())) {
    const bool bf16 = dtypes == Dtypes::bf16 || (dtypes == Dtypes::mixed && i++ % 2 == 0);
    if (bf16) w.add_f32_as_bf16(t.name, t.shape, t.data);
    else w.add_f32(t.name, t.shape, t.data);
  }
  w.write(dir + "/model.safetensors");
}

}  // namespace

TEST_CASE("teacher load: bf16 tensors from the mapping equal the fp32 path", "[teacher_load]") {
  testing::TempDir tmp("teacher_load");
  auto backend = make_backend("cpu", 0);
  for (const AttentionVariant variant : kAllVariants) {
    for (const Dtypes dtypes : {Dtypes::bf16, Dtypes::f32, Dtypes::mixed}) {
      INFO(variant << " dtypes " << int(dtypes));
      const ModelConfig m = llama_like();
      AttentionConfig a;
      a.variant = variant;
      a.sink_init_std = 1.0;
      std::vector<float> params = init_params(make_param_layout(m, a), m, a, 3);
      for (size_t i = 0; i < params.size(); ++i) params[i] += 0.01f * float(i % 5);  // non-zero alpha_ma
      const std::string dir = tmp.file(std::string(to_string(variant)) + std::to_string(int(dtypes)));
      write_checkpoint(dir, m, a, params, dtypes);

      const LoadedModel loaded = load_model_dir(dir);
      Model reference(loaded.model, loaded.attention, *backend, ModelUse::teacher);
      reference.set_params(loaded.params);
      const LoadedTeacher teacher = load_teacher(dir, *backend, m.vocab_size, "kd.teacher");
      CHECK(teacher.model->get_params() == reference.get_params());
      CHECK(teacher.model->variant().alpha_ma() == reference.variant().alpha_ma());
      CHECK(teacher.model->variant().sinks() == reference.variant().sinks());
      CHECK(teacher.hash == data::teacher_hash(loaded));
    }
  }
}

TEST_CASE("teacher load: another vocabulary is refused naming the key", "[teacher_load]") {
  testing::TempDir tmp("teacher_load_vocab");
  auto backend = make_backend("cpu", 0);
  const ModelConfig m = llama_like();
  const AttentionConfig a;
  write_checkpoint(tmp.file("t"), m, a, init_params(make_param_layout(m, a), m, a, 3), Dtypes::bf16);
  CHECK_THROWS_WITH(load_teacher(tmp.file("t"), *backend, m.vocab_size + 1, "kd.teacher"),
                    Catch::Contains("kd.teacher") && Catch::Contains("vocab_size"));
}
