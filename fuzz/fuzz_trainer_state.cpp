// trainer_state.json: types and ranges of every field, and a round trip.
#include <string>

#include "fuzz_util.h"
#include "core/json_parse.h"
#include "train/trainer_state.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kdtrain;
  const std::string text(reinterpret_cast<const char*>(data), size);
  fuzz::expect_only_kdtrain_errors([&] {
    TrainingState state;
    parse_trainer_state(parse_json(text, "fuzz"), "fuzz", &state);
    TrainingState again;
    parse_trainer_state(trainer_state_json(state, static_cast<int>(state.world_size)), "round trip", &again);
    if (again.step != state.step || again.skipped_steps != state.skipped_steps ||
        again.data_fingerprint != state.data_fingerprint || again.sampler != state.sampler ||
        again.pending_metrics != state.pending_metrics)
      std::abort();
  });
  return 0;
}
