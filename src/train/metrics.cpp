#include "train/metrics.h"

#include <cmath>
#include <fstream>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "io/file_util.h"

namespace kdtrain {

MetricsLog::MetricsLog(const std::string& path, int64_t resume_step) {
  if (resume_step > 0) {
    std::vector<std::string> kept;
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      nlohmann::json record = nlohmann::json::parse(line, nullptr, false);
      // A torn last line (kill -9 mid-write) is not valid JSON: drop it too.
      if (record.is_discarded() || !record.contains("step")) continue;
      if (record["step"].get<int64_t>() <= resume_step) kept.push_back(line);
    }
    io::AtomicFileWriter rewrite(path);
    for (const std::string& l : kept) {
      rewrite.write(l.data(), l.size());
      rewrite.write("\n", 1);
    }
    rewrite.commit();
  }
  file_ = std::fopen(path.c_str(), resume_step > 0 ? "a" : "w");
  KD_CHECK(file_ != nullptr, path, ": cannot open metrics file: ", io::errno_text());
}

MetricsLog::~MetricsLog() {
  if (file_) std::fclose(file_);
}

void MetricsLog::write(const nlohmann::json& record) {
  const std::string line = record.dump() + "\n";
  std::fwrite(line.data(), 1, line.size(), file_);
  std::fflush(file_);
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", static_cast<long long>(s / 3600),
                  static_cast<long long>((s % 3600) / 60));
  else
    std::snprintf(buf, sizeof buf, "%lldm%02llds", static_cast<long long>(s / 60),
                  static_cast<long long>(s % 60));
  return buf;
}

std::string progress_line(const nlohmann::json& r, int64_t total_steps, double eta_seconds) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "step %lld/%lld | loss %.4f | kd %.4f | ce %.4f | lr %.2e | gnorm %.3f",
                static_cast<long long>(r["step"].get<int64_t>()),
                static_cast<long long>(total_steps), r["loss"].get<double>(),
                r["kd"].get<double>(), r["ce"].get<double>(), r["lr"].get<double>(),
                r["grad_norm"].get<double>());
  std::ostringstream out;
  out << buf;
  const double tps = r["tokens_per_s"].get<double>();
  char rate[64];
  if (tps >= 1e3) std::snprintf(rate, sizeof rate, " | %.1fk tok/s", tps / 1e3);
  else std::snprintf(rate, sizeof rate, " | %.0f tok/s", tps);
  out << rate << " | eta " << format_duration(eta_seconds);
  if (r.contains("skipped_steps") && r["skipped_steps"].get<int64_t>() > 0)
    out << " | skipped " << r["skipped_steps"].get<int64_t>();
  return out.str();
}

std::string validation_line(const nlohmann::json& r, int64_t total_steps, bool has_teacher) {
  char buf[192];
  const long long step = r["step"].get<int64_t>();
  if (has_teacher)
    std::snprintf(buf, sizeof buf, "step %lld/%lld | val loss %.4f | val kd %.4f | val ce %.4f", step,
                  static_cast<long long>(total_steps), r["val_loss"].get<double>(), r["val_kd"].get<double>(),
                  r["val_ce"].get<double>());
  else
    std::snprintf(buf, sizeof buf, "step %lld/%lld | val loss %.4f (ce)", step,
                  static_cast<long long>(total_steps), r["val_loss"].get<double>());
  return buf;
}

namespace {

// "2.5000 (kd 2.0000, ce 3.0000)" with a teacher, "2.5000 (ce)" without.
std::string loss_text(double loss, double kd, double ce, bool has_teacher) {
  char buf[96];
  if (has_teacher) std::snprintf(buf, sizeof buf, "%.4f (kd %.4f, ce %.4f)", loss, kd, ce);
  else std::snprintf(buf, sizeof buf, "%.4f (ce)", loss);
  return buf;
}

}  // namespace

std::vector<std::string> summary_lines(const RunSummary& s) {
  std::vector<std::string> lines;
  char buf[256];
  const double rate = s.seconds > 0 ? s.tokens / s.seconds : 0.0;
  std::snprintf(buf, sizeof buf, "%s at step %lld/%lld: %lld steps, %.3gM tokens in %s (%.1fk tok/s)",
                s.stopped ? "run stopped" : "run finished", static_cast<long long>(s.step),
                static_cast<long long>(s.total_steps), static_cast<long long>(s.steps_run),
                s.tokens / 1e6, format_duration(s.seconds).c_str(), rate / 1e3);
  lines.emplace_back(buf);
  if (s.last.is_object())
    lines.push_back("  final train loss " +
                    loss_text(s.last["loss"].get<double>(), s.last["kd"].get<double>(),
                              s.last["ce"].get<double>(), s.has_teacher) +
                    " at step " + std::to_string(s.last["step"].get<int64_t>()));
  if (s.last_val.is_object()) {
    lines.push_back("  final val loss   " +
                    loss_text(s.last_val["val_loss"].get<double>(), s.last_val["val_kd"].get<double>(),
                              s.last_val["val_ce"].get<double>(), s.val_has_teacher) +
                    " at step " + std::to_string(s.last_val["step"].get<int64_t>()));
  } else {
    lines.emplace_back("  no validation loss (data.val is empty)");
  }
  lines.emplace_back("  checkpoint: " + (s.checkpoint.empty() ? std::string("none written") : s.checkpoint));
  return lines;
}

}  // namespace kdtrain
