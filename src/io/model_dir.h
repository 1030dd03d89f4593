// A model checkpoint directory (io/checkpoint_format.h) read whole, and the
// check that it fits a configured model: what initialising from a checkpoint,
// loading a teacher, evaluating and resuming share.
#pragma once
#include <string>
#include <vector>

#include "config/config.h"
#include "io/run_layout.h"
#include "model/model.h"

namespace kdtrain {

// A model checkpoint read into its own layout's arena.
struct LoadedModel {
  ModelConfig model;
  AttentionConfig attention;
  std::vector<float> params;
};
LoadedModel load_model_dir(const std::string& dir);

// The arena for `target` from a loaded model: the architectures and variants must
// agree tensor for tensor, else an error naming the key or tensor and `source`.
std::vector<float> params_for(const LoadedModel& loaded, const Model& target,
                              const std::string& source);

// The checkpoint directory <run>/checkpoints/latest names; throws unless it is a
// step_<N> directory of this run (no path, no link out) holding a model.
std::string latest_checkpoint(const std::string& run_dir);
// The step <run>/checkpoints/latest names, whether or not that checkpoint still
// exists; 0 when there is no `latest`. Throws when it names no step_<N>.
int64_t latest_named_step(const std::string& run_dir);
// The step of a checkpoint directory name "step_<at least 8 digits>"; false for
// any other name (staging and moved-aside leftovers, links, paths).
bool parse_step_name(const std::string& name, int64_t* step);

// Compares the architecture keys of two configs (as config.json spells them);
// throws naming the first difference and `source`.
void check_same_architecture(const ModelConfig& a, const AttentionConfig& aa, const ModelConfig& b,
                             const AttentionConfig& ba, const std::string& source);

}  // namespace kdtrain
