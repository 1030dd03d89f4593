// The setmaxnreg probe's __global__ wrapper and launch (registers_probe.h). Test-only:
// linked into kdtrain_tests when the build has the sm_90a target (CMake KDTRAIN_CUDA_SM90A).
#include <cuda_runtime.h>

#include <chrono>
#include <string>
#include <thread>

#include "tc/sm90a/registers_probe.h"
#include "tc/sm90a/registers_probe_body.cuh"

namespace kdtrain::regprobe {
namespace {

// The 1 makes ptxas start every thread at 168 registers (65,536 / kThreads), the count the
// body's arithmetic assumes; setmaxnreg also needs the entry count known at compile time.
__global__ void __launch_bounds__(kThreads, 1) registers_probe_kernel(const uint32_t* in, uint32_t* out) {
  registers_probe_body(in, out);
}

// The probe takes microseconds; a raise that never gets its registers never ends.
constexpr auto kDeadline = std::chrono::seconds(10);

std::string failed(const char* what, cudaError_t e) { return std::string(what) + ": " + cudaGetErrorString(e); }

std::string device_check() {
  int devices = 0, device = 0, major = 0, minor = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) return "SKIPPED: no CUDA device";
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  if (major != 9 || minor != 0)
    return "SKIPPED: setmaxnreg (sm_90a) needs compute capability 9.0, this device has " + std::to_string(major) + "." +
           std::to_string(minor);
  return "";
}

std::string wait_with_deadline(cudaEvent_t done) {
  const auto start = std::chrono::steady_clock::now();
  cudaError_t e;
  while ((e = cudaEventQuery(done)) == cudaErrorNotReady) {
    if (std::chrono::steady_clock::now() - start > kDeadline) {
      cudaDeviceReset();  // ends the waiting kernel, so the cases after do not queue behind it
      return "setmaxnreg probe still running after 10 s: a raise waiting for registers no lowering freed";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return e == cudaSuccess ? "" : failed("setmaxnreg probe kernel", e);
}

}  // namespace

std::string run_registers_probe_on_device(const std::vector<uint32_t>& in, std::vector<uint32_t>& out) {
  if (std::string skip = device_check(); !skip.empty()) return skip;
  const size_t bytes = sizeof(uint32_t) * kWords;
  uint32_t *d_in = nullptr, *d_out = nullptr;
  cudaEvent_t done = nullptr;
  cudaError_t e = cudaMalloc(&d_in, bytes);
  if (e == cudaSuccess) e = cudaMalloc(&d_out, bytes);
  if (e == cudaSuccess) e = cudaMemcpy(d_in, in.data(), bytes, cudaMemcpyHostToDevice);
  if (e == cudaSuccess) e = cudaMemcpy(d_out, out.data(), bytes, cudaMemcpyHostToDevice);
  if (e == cudaSuccess) e = cudaEventCreate(&done);
  if (e != cudaSuccess) return failed("setmaxnreg probe setup", e);
  registers_probe_kernel<<<1, kThreads>>>(d_in, d_out);
  if ((e = cudaGetLastError()) != cudaSuccess) return failed("setmaxnreg probe launch", e);
  cudaEventRecord(done);
  if (std::string error = wait_with_deadline(done); !error.empty()) return error;
  e = cudaMemcpy(out.data(), d_out, bytes, cudaMemcpyDeviceToHost);
  cudaEventDestroy(done);
  cudaFree(d_in);
  cudaFree(d_out);
  return e == cudaSuccess ? "" : failed("setmaxnreg probe download", e);
}

}  // namespace kdtrain::regprobe
