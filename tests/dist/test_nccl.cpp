// The NCCL communicator on GPUs. Hidden cases, run by
// scripts/gpu/gpu_check_nccl.sh on one GPU without a launcher (world size 1:
// every NCCL call of eight GPUs, on one), and on a multi-GPU machine under
//   mpirun -np 8 build/kdtrain_tests "[.nccl]"
// ("[.nccl-watchdog]" must end the process with the watchdog's exit code 124).
// Without a CUDA device or NCCL they skip with a visible message.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <thread>

#include "backend/backend.h"
#include "dist/communicator.h"
#include "dist/grad_reducer.h"
#include "dist/nccl_communicator.h"
#include "io/safetensors.h"

#if KDTRAIN_HAVE_CUDA
#include <cuda_runtime.h>
#endif

using namespace kdtrain;

namespace {

#define KD_REQUIRE_NCCL_OR_SKIP()                                                  \
  do {                                                                             \
    if (!cuda_available() || !dist::have_nccl()) {                                 \
      WARN("SKIPPED: no CUDA device or kdtrain built without NCCL");               \
      return;                                                                      \
    }                                                                              \
  } while (0)

float contribution(int rank, int64_t i) {
  return static_cast<float>(std::sin(0.37 * double(i) + rank) * (1.0 + rank * 1e-3));
}

}  // namespace

TEST_CASE("nccl: gradient buckets, all-gather and host values at any world size", "[.nccl]") {
  KD_REQUIRE_NCCL_OR_SKIP();
  auto comm = dist::make_communicator(DistBackend::nccl, Device::cuda, 60.0);
  std::unique_ptr<Backend> backend = make_backend("cuda", 0);
  const int W = comm->world(), R = comm->rank();
  REQUIRE(comm->name() == "nccl");
  REQUIRE(comm->distributed());
  for (int64_t n : {int64_t{1}, int64_t{10007}, int64_t{3} << 20}) {
    for (bool bf16 : {false, true}) {
      for (int64_t bucket : {int64_t{1000}, int64_t{1} << 20}) {
        for (bool overlap : {true, false}) {
          INFO("n " << n << (bf16 ? " bf16" : " fp32") << " bucket " << bucket << (overlap ? " overlap" : "")
                    << ", rank " << R << " of " << W);
          std::vector<float> host(n), expected(n);
          double worst = 0.0;  // |sum| bound for the tolerance
          for (int64_t i = 0; i < n; ++i) {
            host[i] = contribution(R, i);
            float sum = 0.f;
            double magnitude = 0.0;
            for (int r = 0; r < W; ++r) {
              const float x = contribution(r, i);
              sum += bf16 ? io::bf16_to_float(io::float_to_bf16(x)) : x;
              magnitude += std::abs(x);
            }
            expected[i] = sum;
            worst = std::max(worst, magnitude);
          }
          float* grads = static_cast<float*>(backend->alloc(n * sizeof(float)));
          backend->to_device(grads, host.data(), n * sizeof(float));
          dist::GradReduceOptions options;
          options.bucket_elements = bucket;
          options.overlap = overlap;
          options.bf16 = bf16;
          dist::GradReducer reducer(*comm, grads, n, options, backend->native_stream());
          reducer.begin_step();
          for (int64_t end = n; end > 0; end -= 777) reducer.mark_final(std::max<int64_t>(0, end - 777), end);
          reducer.finish();
          std::vector<float> out(n);
          backend->to_host(out.data(), grads, n * sizeof(float));
          // World 1: the identity (bf16: the rounding), bit for bit. More ranks:
          // NCCL adds in its ring's order (bf16: with bf16 partial sums).
          const double unit = bf16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -24);
          const double tolerance = W == 1 ? 0.0 : 2.0 * W * unit * worst;
          const dist::Range mine = dist::shard_range(n, R, W);
          double err = 0.0;
          for (int64_t i = mine.begin; i < mine.end; ++i) err = std::max(err, double(std::abs(out[i] - expected[i])));
          CHECK(err <= tolerance);
          // All-gather of the owners' parts: every rank ends with the same arena.
          comm->all_gather(grads, n);
          backend->to_host(out.data(), grads, n * sizeof(float));
          err = 0.0;
          for (int64_t i = 0; i < n; ++i) err = std::max(err, double(std::abs(out[i] - expected[i])));
          CHECK(err <= tolerance);
          backend->release(grads);
        }
      }
    }
  }
  std::vector<double> values = {double(R), 1.0};
  comm->all_reduce_sum_host(values.data(), 2);
  CHECK(values[1] == double(W));
  CHECK(dist::broadcast_string(*comm, R == 0 ? "from rank 0" : "", 0) == "from rank 0");
  CHECK(comm->any(R == W - 1));
  comm->barrier();
}

#if KDTRAIN_HAVE_CUDA
// The compute stream is held by a host callback for longer than dist.timeout_s,
// so the first bucket cannot start and finish() waits: the watchdog must end
// the process (exit code 124) with its message. Run alone, in its own process.
TEST_CASE("nccl: the watchdog ends a reduction that does not complete", "[.nccl-watchdog]") {
  KD_REQUIRE_NCCL_OR_SKIP();
  auto comm = dist::make_communicator(DistBackend::nccl, Device::cuda, 2.0);
  std::unique_ptr<Backend> backend = make_backend("cuda", 0);
  float* grads = static_cast<float*>(backend->alloc(4096 * sizeof(float)));
  dist::GradReducer reducer(*comm, grads, 4096, {}, backend->native_stream());
  auto stall = [](void*) { std::this_thread::sleep_for(std::chrono::seconds(30)); };
  REQUIRE(cudaLaunchHostFunc(static_cast<cudaStream_t>(backend->native_stream()), stall, nullptr) ==
          cudaSuccess);
  reducer.begin_step();
  reducer.mark_final(0, 4096);
  reducer.finish();  // never returns: the watchdog exits first
  FAIL("the reduction completed although the compute stream was stalled for 30 s");
}
#endif
