// Step metrics: one JSON object per line in <run>/metrics.jsonl (flushed every
// line so a killed run keeps what it logged) and a plain progress line on the
// console that stays readable in a log file (no carriage returns).
#pragma once
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace kdtrain {

class MetricsLog {
 public:
  // Steps are 1-based: record "step" S is the S-th optimizer step. When resuming
  // from a checkpoint taken after `resume_step` steps, lines with step > resume_step
  // (written by the interrupted run after that checkpoint) are dropped first, so
  // the file reads as one uninterrupted run.
  MetricsLog(const std::string& path, int64_t resume_step);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;
  void write(const nlohmann::json& record);

 private:
  std::FILE* file_ = nullptr;
};

// "step 120/9000 | loss 3.2145 | kd 2.9012 | ce 3.5120 | lr 1.00e-03 | gnorm 0.812 | 41.2k tok/s | eta 1h02m"
std::string progress_line(const nlohmann::json& record, int64_t total_steps, double eta_seconds);
std::string format_duration(double seconds);

}  // namespace kdtrain
