// The GPU side of the primitive probes (tests/tc/tc_probes.h): built into kdtrain_tests from
// tests/tc/cuda/tc_probes.cu when the build has CUDA (KDTRAIN_HAVE_CUDA).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kdtrain::tcprobe {

enum class Probe;

// Runs probe `p` as one block on the GPU: `in` and `out` hold kProbeWords words (out's
// contents are uploaded first, so unwritten words keep them). False, with `error`
// saying why, when there is no device or a CUDA call fails.
bool run_probe_on_gpu(Probe p, const std::vector<uint32_t>& in, std::vector<uint32_t>& out, std::string& error);

}  // namespace kdtrain::tcprobe
