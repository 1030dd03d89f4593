#include "train/run_report.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <string>

namespace kdtrain {

void add_variant_params(nlohmann::json& record, Model& student, const std::vector<double>& alpha_mean) {
  const int64_t L = student.config().num_hidden_layers, H = student.config().num_attention_heads;
  if (student.features().affine) {
    const std::vector<float> ma = student.variant().alpha_ma();
    nlohmann::json mean = nlohmann::json::array(), ma_json = nlohmann::json::array();
    for (int64_t l = 0; l < L; ++l) {
      double layer_mean = 0.0;
      nlohmann::json heads = nlohmann::json::array();
      for (int64_t h = 0; h < H; ++h) {
        if (!alpha_mean.empty()) layer_mean += alpha_mean[l * H + h] / H;
        heads.push_back(ma[l * H + h]);
      }
      mean.push_back(layer_mean);
      ma_json.push_back(heads);
    }
    record["alpha_mean"] = mean;
    record["alpha_ma"] = ma_json;
  }
  if (student.features().sink) {
    const std::vector<float> all = student.variant().sinks();  // L*H floats, not the whole arena
    nlohmann::json sinks = nlohmann::json::array();
    for (int64_t l = 0; l < L; ++l)
      sinks.push_back(std::vector<float>(all.begin() + l * H, all.begin() + (l + 1) * H));
    record["sinks"] = sinks;
  }
}

int64_t validation_batches(const Config& config, const data::TokenDataset& val) {
  return std::min<int64_t>(config.eval.batches, val.num_windows() / config.train.micro_batch);
}

void log_validation_plan(const Config& config, const data::TokenDataset* val) {
  const int64_t b = config.train.micro_batch;
  if (!val) {
    spdlog::info("validation: off (data.val is empty)");
    return;
  }
  const int64_t batches = validation_batches(config, *val);
  if (batches <= 0) {
    spdlog::warn("validation: off: data.val holds {} windows of {} tokens, fewer than one "
                 "micro-batch ({})", val->num_windows(), config.train.seq_len + 1, b);
    return;
  }
  const std::string when = config.eval.interval > 0
                               ? "every " + std::to_string(config.eval.interval) + " steps and at the end"
                               : std::string("at the end");
  spdlog::info("validation: {}, on the first {} windows of data.val (eval.interval, eval.batches; "
               "--set data.val=[] turns it off)", when, batches * b);
}

}  // namespace kdtrain
