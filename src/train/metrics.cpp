#include "train/metrics.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <sstream>

#include <spdlog/spdlog.h>

#include "core/error.h"
#include "io/file_util.h"

namespace kdtrain {

namespace {

// The records to keep when resuming at `resume_step`; true when any line was dropped.
bool keep_records(const std::string& text, int64_t resume_step, std::string* kept, int64_t* last_step) {
  bool dropped = false;
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = text.find('\n', start);
    if (end == std::string::npos) return true;  // torn last line: a kill mid-write
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    const nlohmann::json record = nlohmann::json::parse(line, nullptr, false);
    const bool has_step = record.is_object() && record.contains("step") && record["step"].is_number_integer();
    if (has_step && record["step"].get<int64_t>() > resume_step) {
      dropped = true;
      continue;
    }
    if (has_step) *last_step = record["step"].get<int64_t>();
    *kept += line + "\n";  // including lines that are not records: not ours to drop
  }
  return dropped;
}

}  // namespace

MetricsLog::MetricsLog(const std::string& path, int64_t resume_step, const nlohmann::json& pending)
    : path_(path) {
  KD_CHECK(resume_step >= 0, path, ": cannot resume metrics at step ", resume_step);
  // O_NOFOLLOW unless own_file_before_writing found a link to a device, the one link it allows.
  int flags = O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC;
  if (io::own_file_before_writing(path))
    spdlog::warn("{}: shared its inode with another file (a run copied with hard links, cp -al); this run "
                 "now writes a copy of its own, and the other copy stays as it was", path);
  if (resume_step > 0) {
    std::string text, kept;
    if (::access(path.c_str(), F_OK) == 0) text = read_text_file(path, std::string::npos);
    int64_t last_step = 0;
    bool rewrite = keep_records(text, resume_step, &kept, &last_step);
    if (pending.is_array())
      for (const nlohmann::json& record : pending)
        if (record.value("step", int64_t{0}) > last_step && record.value("step", int64_t{0}) <= resume_step) {
          kept += record.dump() + "\n";
          rewrite = true;
        }
    if (rewrite) {
      io::AtomicFileWriter out(path);
      out.write(kept.data(), kept.size());
      out.commit();
    }
  } else {
    flags |= O_TRUNC;
  }
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) flags |= O_NOFOLLOW;
  fd_ = ::open(path.c_str(), flags, 0644);
  KD_CHECK(fd_ >= 0, path, ": cannot open metrics file: ", errno_text());
  const off_t end = ::lseek(fd_, 0, SEEK_END);
  size_ = end > 0 ? static_cast<int64_t>(end) : 0;
}

MetricsLog::~MetricsLog() {
  if (fd_ >= 0) ::close(fd_);
}

void MetricsLog::write(const nlohmann::json& record) {
  KD_CHECK(fd_ >= 0, path_, ": metrics file is closed");
  const std::string line = record.dump() + "\n";
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = n == 0 ? "wrote nothing" : errno_text();
      // No torn record: cut back to the last whole one (best effort: the error below is what counts).
      const int cut = done > 0 ? ::ftruncate(fd_, static_cast<off_t>(size_)) : 0;
      (void)cut;
      fail(path_, ": cannot write the metrics record of step ", record.value("step", int64_t{-1}), ": ", why);
    }
    done += static_cast<size_t>(n);
  }
  size_ += static_cast<int64_t>(line.size());
}

void MetricsLog::sync() {
  KD_CHECK(fd_ >= 0, path_, ": metrics file is closed");
  KD_CHECK(::fsync(fd_) == 0, path_, ": fsync failed: ", errno_text());
}

void MetricsLog::close() {
  if (fd_ < 0) return;
  const int rc = ::close(fd_);
  fd_ = -1;
  KD_CHECK(rc == 0, path_, ": close failed: ", errno_text());
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

std::string progress_line(const nlohmann::json& r, int64_t total_steps, double eta_seconds,
                          bool has_teacher) {
  char buf[256];
  std::ostringstream out;
  std::snprintf(buf, sizeof buf, "step %lld/%lld | loss %.4f", static_cast<long long>(r["step"].get<int64_t>()),
                static_cast<long long>(total_steps), r["loss"].get<double>());
  out << buf;
  if (has_teacher) {
    std::snprintf(buf, sizeof buf, " | kd %.4f | ce %.4f", r["kd"].get<double>(), r["ce"].get<double>());
    out << buf;
  }
  std::snprintf(buf, sizeof buf, " | lr %.2e | gnorm %.3f", r["lr"].get<double>(), r["grad_norm"].get<double>());
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
