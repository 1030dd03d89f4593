// What a backend reports about a run, as JSON and as log lines, shared by
// `kdtrain bench` and the trainer's log: which attention implementation ran for
// each distinct attention call, and the peak memory (backend_stats.h defines it).
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "backend/backend.h"

namespace kdtrain::bench {

// [{"B","T","H","Hkv","D","variant","forward","backward","reason"}, ...]
nlohmann::json attention_paths_json(const Backend& backend);
// The one path name when every call of both passes took it, else "mixed" ("" for none).
std::string attention_path_summary(const nlohmann::json& paths);
// The JSON form as indented report lines, one per entry.
std::string format_attention_paths(const nlohmann::json& paths);

// Memory keys read on the backend. CUDA: peak_device_bytes (the tracked high-water
// mark, the counterpart of torch.cuda.max_memory_allocated), device_used_peak_bytes
// and device_total_bytes (cudaMemGetInfo samples). CPU: peak_host_bytes (the
// backend's allocations). Both: peak_definition.
nlohmann::json measured_memory_json(const Backend& backend);
// The JSON form as backend_stats.h's describe(MemoryStats) line.
std::string format_measured_memory(const nlohmann::json& memory);

}  // namespace kdtrain::bench
