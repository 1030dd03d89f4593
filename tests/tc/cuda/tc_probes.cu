// The probes of tests/tc/tc_probes.h built by nvcc, for tests/tc/test_tc_primitives_cuda.cpp.
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "tc/tc_probes.h"
#include "tc/tc_probes_gpu.h"

namespace kdtrain::tcprobe {
namespace {

__global__ void probe_kernel(Probe p, const uint32_t* in, uint32_t* out, int* counter) {
  __shared__ __align__(128) unsigned char smem[kProbeSmemBytes];
  run_probe(p, in, out, counter, smem);
}

bool ok(cudaError_t e, std::string& error, const char* what) {
  if (e == cudaSuccess) return true;
  error = std::string(what) + ": " + cudaGetErrorString(e);
  return false;
}

}  // namespace

bool run_probe_on_gpu(Probe p, const std::vector<uint32_t>& in, std::vector<uint32_t>& out, std::string& error) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    error = "no CUDA device";
    return false;
  }
  uint32_t *d_in = nullptr, *d_out = nullptr;
  int* d_counter = nullptr;
  const size_t bytes = sizeof(uint32_t) * kProbeWords;
  bool good = ok(cudaMalloc(&d_in, bytes), error, "cudaMalloc") && ok(cudaMalloc(&d_out, bytes), error, "cudaMalloc") &&
              ok(cudaMalloc(&d_counter, 2 * sizeof(int)), error, "cudaMalloc") &&
              ok(cudaMemcpy(d_in, in.data(), bytes, cudaMemcpyHostToDevice), error, "upload") &&
              ok(cudaMemcpy(d_out, out.data(), bytes, cudaMemcpyHostToDevice), error, "upload") &&
              ok(cudaMemset(d_counter, 0, 2 * sizeof(int)), error, "cudaMemset");
  if (good) {
    probe_kernel<<<1, kProbeThreads>>>(p, d_in, d_out, d_counter);
    good = ok(cudaGetLastError(), error, "launch") && ok(cudaDeviceSynchronize(), error, "probe kernel") &&
           ok(cudaMemcpy(out.data(), d_out, bytes, cudaMemcpyDeviceToHost), error, "download");
  }
  cudaFree(d_in);
  cudaFree(d_out);
  cudaFree(d_counter);
  return good;
}

}  // namespace kdtrain::tcprobe
