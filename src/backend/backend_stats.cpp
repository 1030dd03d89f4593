#include "backend/backend_stats.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace kdtrain {

void MemoryTracker::on_alloc(const void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
  auto [it, inserted] = sizes_.emplace(ptr, bytes);
  if (!inserted) {  // the allocator reused an address we missed the release of
    current_ -= static_cast<int64_t>(it->second);
    it->second = bytes;
  }
  current_ += static_cast<int64_t>(bytes);
  peak_ = std::max(peak_, current_);
}

void MemoryTracker::on_release(const void* ptr) {
  const auto it = sizes_.find(ptr);
  if (it == sizes_.end()) return;
  current_ -= static_cast<int64_t>(it->second);
  sizes_.erase(it);
}

void AttentionPathLog::record(const AttentionShape& shape, AttentionFeatures features, bool backward,
                              const std::string& path, const std::string& reason) {
  auto same = [&](const AttentionPathUse& u) {
    return u.features == features && u.shape.B == shape.B && u.shape.T == shape.T &&
           u.shape.H == shape.H && u.shape.Hkv == shape.Hkv && u.shape.D == shape.D;
  };
  auto it = std::find_if(uses_.begin(), uses_.end(), same);
  if (it == uses_.end()) {
    uses_.push_back(AttentionPathUse{shape, features, "", "", ""});
    it = uses_.end() - 1;
  }
  (backward ? it->backward : it->forward) = path;
  it->reason = reason;
}

std::string describe(const AttentionPathUse& u) {
  std::ostringstream s;
  s << "B=" << u.shape.B << " T=" << u.shape.T << " H=" << u.shape.H << " Hkv=" << u.shape.Hkv
    << " D=" << u.shape.D << " " << features_label(u.features) << ": forward "
    << (u.forward.empty() ? "not run" : u.forward) << ", backward "
    << (u.backward.empty() ? "not run" : u.backward);
  if (!u.reason.empty()) s << " (" << u.reason << ")";
  return s.str();
}

namespace {
// "12.34 GiB", or "3.2 MiB" below a GiB.
std::string bytes_text(int64_t bytes) {
  const double MiB = 1024.0 * 1024.0, GiB = 1024.0 * MiB;
  char buf[32];
  if (double(bytes) >= GiB)
    std::snprintf(buf, sizeof buf, "%.2f GiB", double(bytes) / GiB);
  else
    std::snprintf(buf, sizeof buf, "%.1f MiB", double(bytes) / MiB);
  return buf;
}
}  // namespace

std::string describe(const MemoryStats& m) {
  if (m.device_total_bytes > 0)
    return "peak device memory " + bytes_text(m.peak_bytes) + " (device used " +
           bytes_text(m.device_used_peak_bytes) + " of " + bytes_text(m.device_total_bytes) + ")";
  return "peak backend memory " + bytes_text(m.peak_bytes) + " (host)";
}

}  // namespace kdtrain
