// The setmaxnreg probe on the device (registers_probe_sm90a.cu, built for sm_90a into the
// test binary only): runs registers_probe_body as one block of kThreads threads.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kdtrain::regprobe {

// Runs the probe on `in` (kWords words) and writes `out` (kWords words). Returns "" when
// it ran; "SKIPPED: ..." without a device of compute capability 9.0; otherwise the
// failure, e.g. a kernel still running past its deadline (a raise waiting for registers).
std::string run_registers_probe_on_device(const std::vector<uint32_t>& in, std::vector<uint32_t>& out);

}  // namespace kdtrain::regprobe
