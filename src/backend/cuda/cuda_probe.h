// Host-callable queries about the CUDA runtime, usable from plain C++ files.
#pragma once
#include <string>

namespace kdtrain::cuda {
// True when the CUDA runtime reports at least one device.
bool device_present();
// "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs)" or the runtime's error string.
std::string describe_device(int device = 0);
}  // namespace kdtrain::cuda
