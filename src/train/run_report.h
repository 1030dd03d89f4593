// What the trainer reports beside the losses: the variant's per-(layer, head)
// parameters in each metrics record, and the start-up line saying when and on
// what validation runs.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "config/config.h"
#include "data/dataset.h"
#include "model/model.h"

namespace kdtrain {

// Adds alpha_mean (L lists of the step's mean alpha per layer) and alpha_ma (L x H)
// for affine variants, and sinks (L x H) for sink variants, to `record`.
// `alpha_mean` holds the step's mean alpha per (layer, head), or is empty.
void add_variant_params(nlohmann::json& record, Model& student, const std::vector<double>& alpha_mean);

// Micro-batches one validation pass reads: eval.batches, capped by data.val's size.
int64_t validation_batches(const Config& config, const data::TokenDataset& val);

// The "validation: ..." line (or why validation is off) for data.val = `val`.
void log_validation_plan(const Config& config, const data::TokenDataset* val);

}  // namespace kdtrain
