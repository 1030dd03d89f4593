// Step metrics: one JSON object per line in <run>/metrics.jsonl (flushed every
// line so a killed run keeps what it logged) and a plain progress line on the
// console that stays readable in a log file (no carriage returns).
#pragma once
#include <cstdint>
#include <exception>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kdtrain {

// The logs when a checkpoint is due: the records metrics.jsonl lacks (the
// checkpoint carries them; a resume writes them back) and, when writing them or
// syncing the file failed, that error.
struct LogsAtCheckpoint {
  nlohmann::json pending = nlohmann::json::array();
  std::exception_ptr failure;  // null: every record is durable in metrics.jsonl
};

class MetricsLog {
 public:
  // Steps are 1-based: record "step" S is the S-th optimizer step. When resuming
  // from a checkpoint taken after `resume_step` steps, records with step >
  // resume_step (written by the interrupted run after that checkpoint) and a torn
  // last line (a kill mid-write) are dropped, so the file reads as one
  // uninterrupted run; nothing else is ever removed. `pending` are records the
  // checkpoint carries because writing them failed (see write()); those of steps
  // <= resume_step missing from the file are appended.
  MetricsLog(const std::string& path, int64_t resume_step, const nlohmann::json& pending = nullptr);
  ~MetricsLog();  // closes; errors there go unreported, so call close()
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  // Appends one record with one write(2). Any failure (a full disk, EIO) throws
  // naming the file, after cutting the file back to its last whole record.
  void write(const nlohmann::json& record);
  // fsync: called before each checkpoint, so a checkpoint is never durable
  // ahead of the metrics it follows.
  void sync();
  void close();  // checked
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  int64_t size_ = 0;  // bytes of whole records
};

// The last lines of a run: where it stopped, what it cost, the final losses and
// the checkpoint it left.
struct RunSummary {
  int64_t step = 0, total_steps = 0;  // where the run stands, of train.steps
  int64_t steps_run = 0;              // optimizer steps taken by this process
  double tokens = 0.0;                // training tokens of those steps
  double seconds = 0.0;               // wall time of those steps (validation, checkpoints included)
  nlohmann::json last;                // the last metrics record (null when no step ran)
  nlohmann::json last_val;            // the last record holding val_loss (null: none)
  std::string checkpoint;             // the last checkpoint written ("" = none)
  bool stopped = false;               // ended by a signal before train.steps
  bool has_teacher = false;           // KD terms are shown only with a teacher (cached or online)
  bool val_has_teacher = false;       // validation has KD only with an online teacher
};
std::vector<std::string> summary_lines(const RunSummary& s);
// "step 1200/9000 | val loss 3.1022 | val kd 2.8000 | val ce 3.4000" (kd only with a teacher)
std::string validation_line(const nlohmann::json& record, int64_t total_steps, bool has_teacher);

// "step 120/9000 | loss 3.2145 | kd 2.9012 | ce 3.5120 | lr 1.00e-03 | gnorm 0.812 | 41.2k tok/s | eta 1h02m"
// (kd and ce only with a teacher: without one the loss is the CE)
std::string progress_line(const nlohmann::json& record, int64_t total_steps, double eta_seconds,
                          bool has_teacher);
std::string format_duration(double seconds);

}  // namespace kdtrain
