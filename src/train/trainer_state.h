// trainer_state.json, the part of a training checkpoint that is neither weights
// nor moments:
//   {"step": 120, "skipped_steps": 0, "consecutive_skips": 0, "world_size": 1,
//    "sampler": {...}, "data_fingerprint": "<uint64 as decimal>",
//    "teacher_fingerprint": "model:<hex>" | "cache:<hex>" | "",
//    "pending_metrics": [records]   (only when a metrics write failed)}
// Reading checks every field's type and range on its own (a "step": -1 once
// made a resume write a NaN checkpoint and move `latest` onto it); what needs
// more context (the directory name, the config, the data) is checked by the
// resume (train/resume_checks.h).
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "io/run_layout.h"
#include "train/training_checkpoint.h"

namespace kdtrain {

nlohmann::json trainer_state_json(const TrainingState& state, int world_size);
// Fills the fields above (not the moments); throws naming `source` and the key.
void parse_trainer_state(const nlohmann::json& doc, const std::string& source, TrainingState* state);

}  // namespace kdtrain
