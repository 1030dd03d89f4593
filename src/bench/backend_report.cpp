#include "bench/backend_report.h"


#include "backend/backend_stats.h"

namespace kdtrain::bench {

nlohmann::json attention_paths_json(const Backend& backend) {
  nlohmann::json out = nlohmann::json::array();
  for (const AttentionPathUse& u : backend.attention_paths())
    out.push_back({{"B", u.shape.B}, {"T", u.shape.T}, {"H", u.shape.H}, {"Hkv", u.shape.Hkv},
                   {"D", u.shape.D}, {"features", features_label(u.features)}, {"forward", u.forward},
                   {"backward", u.backward}, {"reason", u.reason}});
  return out;
}

std::string attention_path_summary(const nlohmann::json& paths) {
  std::string one;
  for (const auto& p : paths)
    for (const char* pass : {"forward", "backward"}) {
      const std::string path = p[pass].get<std::string>();
      if (path.empty()) continue;
      if (one.empty()) one = path;
      else if (one != path) return "mixed";
    }
  return one;
}

std::string format_attention_paths(const nlohmann::json& paths) {
  std::string s;
  for (const auto& p : paths) {
    AttentionPathUse u;
    u.shape = {p["B"].get<int64_t>(), p["T"].get<int64_t>(), p["H"].get<int64_t>(),
               p["Hkv"].get<int64_t>(), p["D"].get<int64_t>()};
    u.features = features_from_label(p["features"].get<std::string>());
    u.forward = p["forward"].get<std::string>();
    u.backward = p["backward"].get<std::string>();
    u.reason = p["reason"].get<std::string>();
    s += "  attention " + describe(u) + "\n";
  }
  return s;
}

nlohmann::json measured_memory_json(const Backend& backend) {
  const MemoryStats m = backend.memory_stats();
  nlohmann::json j;
  if (m.device_total_bytes > 0) {
    j["peak_device_bytes"] = m.peak_bytes;
    j["device_used_peak_bytes"] = m.device_used_peak_bytes;
    j["device_total_bytes"] = m.device_total_bytes;
    j["peak_definition"] =
        "peak_device_bytes: high-water mark of the device memory the backend held (allocations, "
        "scratch, cuBLAS workspace), as torch.cuda.max_memory_allocated; device_used_peak_bytes: "
        "highest total-free from cudaMemGetInfo sampled at each allocation (adds the CUDA "
        "context, library memory and other processes)";
  } else {
    j["peak_host_bytes"] = m.peak_bytes;
    j["peak_definition"] =
        "peak_host_bytes: high-water mark of the memory the backend allocated; peak_rss_bytes: "
        "the process's peak resident set (VmHWM)";
  }
  return j;
}

std::string format_measured_memory(const nlohmann::json& m) {
  MemoryStats stats;
  if (m.contains("peak_device_bytes")) {
    stats.peak_bytes = m["peak_device_bytes"].get<int64_t>();
    stats.device_used_peak_bytes = m["device_used_peak_bytes"].get<int64_t>();
    stats.device_total_bytes = m["device_total_bytes"].get<int64_t>();
  } else {
    stats.peak_bytes = m.value("peak_host_bytes", int64_t{0});
  }
  return describe(stats);
}

}  // namespace kdtrain::bench
