// model.safetensors.index.json of a sharded checkpoint: the weight map, shard
// names (never a path out of the directory), and the shards it names checked
// against the model (one real shard sits in the directory to be found).
#include <filesystem>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "io/checkpoint_format.h"
#include "model/param_layout.h"

namespace {

struct Fixture {
  kdtrain::ModelConfig model = kdtrain::model_preset("tiny-llama");
  kdtrain::AttentionConfig attention;
  kdtrain::ParamLayout layout = kdtrain::make_param_layout(model, attention);
  std::filesystem::path dir = kdtrain::fuzz::scratch_dir() / "sharded";
  Fixture() {
    std::filesystem::create_directories(dir);
    std::vector<float> arena(static_cast<size_t>(layout.total), 0.25f);
    const std::filesystem::path staged = kdtrain::fuzz::scratch_dir() / "staged";
    kdtrain::io::write_model_checkpoint(staged.string(), model, attention, layout, arena.data());
    std::filesystem::copy_file(staged / "config.json", dir / "config.json");
    std::filesystem::copy_file(staged / "model.safetensors", dir / "model-00001-of-00001.safetensors");
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Fixture fixture;
  kdtrain::fuzz::write_scratch("sharded/model.safetensors.index.json", data, size);
  kdtrain::fuzz::expect_only_kdtrain_errors([&] {
    (void)kdtrain::io::check_model_weights(fixture.dir.string(), fixture.layout);
  });
  return 0;
}
