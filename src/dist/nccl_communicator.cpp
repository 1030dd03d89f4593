#include "dist/nccl_communicator.h"

#include "core/error.h"
#include "dist/mpi_communicator.h"

#if KDTRAIN_HAVE_MPI && KDTRAIN_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "kernels/convert.cuh"
#include "dist/grad_reducer.h"
#include "dist/watchdog.h"

namespace kdtrain::dist {

namespace {

void check_cuda(cudaError_t code, const char* what) {
  KD_CHECK(code == cudaSuccess, "CUDA ", what, " failed: ", cudaGetErrorString(code));
}

void check_nccl(ncclResult_t code, const char* what) {
  KD_CHECK(code == ncclSuccess, "NCCL ", what, " failed: ", ncclGetErrorString(code),
           " (set NCCL_DEBUG=INFO for details)");
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(std::unique_ptr<MpiCommunicator> mpi, double timeout_s) : mpi_(std::move(mpi)) {
    if (!mpi_) own_watchdog_ = std::make_unique<Watchdog>(timeout_s, 0);
    int devices = 0;
    check_cuda(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
    KD_CHECK(devices > 0, "rank ", rank(), ": no CUDA device visible");
    KD_CHECK(local_rank() < devices, "rank ", rank(), " is local rank ", local_rank(),
             " on its node but only ", devices, " GPUs are visible; launch at most one rank per GPU");
    check_cuda(cudaSetDevice(local_rank()), "cudaSetDevice");
    ncclUniqueId id;
    if (rank() == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    if (mpi_) mpi_->broadcast_host(&id, sizeof id, 0);
    {
      Watchdog::Scope guard(watchdog(), "ncclCommInitRank");
      check_nccl(ncclCommInitRank(&comm_, world(), id, rank()), "ncclCommInitRank");
    }
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  }

  ~NcclCommunicator() override {
    if (stream_) cudaStreamDestroy(stream_);
    if (comm_) ncclCommDestroy(comm_);
  }

  std::string name() const override { return "nccl"; }
  int rank() const override { return mpi_ ? mpi_->rank() : 0; }
  int world() const override { return mpi_ ? mpi_->world() : 1; }
  int local_rank() const override { return mpi_ ? mpi_->local_rank() : 0; }
  int local_world() const override { return mpi_ ? mpi_->local_world() : 1; }
  bool distributed() const override { return true; }
  void barrier() override {
    if (mpi_) mpi_->barrier();
  }

  std::unique_ptr<BucketTransport> make_bucket_transport(float* data, int64_t n, bool bf16,
                                                         void* compute_stream) override;

  void all_gather(float* data, int64_t n) override {
    Watchdog::Scope guard(watchdog(), "all_gather (NCCL)");
    check_nccl(ncclGroupStart(), "ncclGroupStart");
    for (int r = 0; r < world(); ++r) {
      const Range s = shard_range(n, r, world());
      check_nccl(ncclBroadcast(data + s.begin, data + s.begin, static_cast<size_t>(s.size()), ncclFloat,
                               r, comm_, stream_),
                 "ncclBroadcast");
    }
    check_nccl(ncclGroupEnd(), "ncclGroupEnd");
    wait();
  }

  void all_reduce_sum_host(double* data, int64_t n) override {
    if (mpi_) mpi_->all_reduce_sum_host(data, n);
  }
  void broadcast_host(void* data, size_t bytes, int root) override {
    if (mpi_) mpi_->broadcast_host(data, bytes, root);
  }
  bool any(bool flag) override { return mpi_ ? mpi_->any(flag) : flag; }
  [[noreturn]] void abort(int code) override {
    if (comm_) ncclCommAbort(comm_);
    comm_ = nullptr;
    if (mpi_) mpi_->abort(code);
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(code);
  }

  Watchdog& watchdog() { return mpi_ ? mpi_->watchdog() : *own_watchdog_; }
  ncclComm_t comm() const { return comm_; }
  cudaStream_t stream() const { return stream_; }

  // Waits for the communication stream, polling so that the watchdog (armed
  // by the caller) can still fire on a hung peer.
  void wait() {
    while (true) {
      const cudaError_t state = cudaStreamQuery(stream_);
      if (state == cudaSuccess) break;
      KD_CHECK(state == cudaErrorNotReady, "CUDA stream error in an NCCL collective: ",
               cudaGetErrorString(state));
      ncclResult_t async = ncclSuccess;
      check_nccl(ncclCommGetAsyncError(comm_, &async), "ncclCommGetAsyncError");
      check_nccl(async, "collective (asynchronous error)");
    }
  }

 private:
  std::unique_ptr<MpiCommunicator> mpi_;         // null: one process, no launcher
  std::unique_ptr<Watchdog> own_watchdog_;       // when there is no MPI communicator
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

// Buckets on the communicator's stream, each after an event on the compute stream.
class NcclBucketTransport final : public BucketTransport {
 public:
  NcclBucketTransport(NcclCommunicator& comm, float* data, int64_t n, bool bf16, void* compute_stream)
      : comm_(comm), data_(data), n_(n), bf16_(bf16),
        compute_(static_cast<cudaStream_t>(compute_stream)) {
    check_cuda(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), "cudaEventCreate");
  }

  ~NcclBucketTransport() override {
    cudaEventDestroy(ready_);
    // Stream-ordered after every bucket that used it.
    if (staging_) cudaFreeAsync(staging_, comm_.stream());
  }

  void start(const Range& bucket) override {
    KD_CHECK(bucket.begin >= 0 && bucket.end <= n_, "bucket outside the arena");
    check_cuda(cudaEventRecord(ready_, compute_), "cudaEventRecord");
    check_cuda(cudaStreamWaitEvent(comm_.stream(), ready_, 0), "cudaStreamWaitEvent");
    if (bf16_) start_bf16(bucket);
    else reduce_parts(bucket, data_ + bucket.begin, ncclFloat, sizeof(float));
  }

  void poll() override {
    ncclResult_t async = ncclSuccess;
    check_nccl(ncclCommGetAsyncError(comm_.comm(), &async), "ncclCommGetAsyncError");
    check_nccl(async, "gradient bucket (asynchronous error)");
  }

  void wait_all() override {
    Watchdog::Scope guard(comm_.watchdog(), "reduce_scatter (gradient buckets, NCCL)");
    comm_.wait();
  }

 private:
  // One grouped ncclReduce per rank owning part of the bucket, in place on
  // `base` (the bucket's first element, `element` bytes each).
  void reduce_parts(const Range& bucket, void* base, ncclDataType_t type, size_t element) {
    check_nccl(ncclGroupStart(), "ncclGroupStart");
    for (int r = 0; r < comm_.world(); ++r) {
      const Range s = shard_range(n_, r, comm_.world());
      const int64_t lo = std::max(bucket.begin, s.begin), hi = std::min(bucket.end, s.end);
      if (lo >= hi) continue;
      char* part = static_cast<char*>(base) + (lo - bucket.begin) * element;
      check_nccl(ncclReduce(part, part, static_cast<size_t>(hi - lo), type, ncclSum, r, comm_.comm(),
                            comm_.stream()),
                 "ncclReduce (gradient bucket)");
    }
    check_nccl(ncclGroupEnd(), "ncclGroupEnd");
  }

  // fp32 -> bf16 staging, NCCL's bf16 reduce, the owner's part back to fp32,
  // all on the communication stream, so one staging buffer serves every bucket.
  void start_bf16(const Range& bucket) {
    if (bucket.size() > staging_elements_) {
      if (staging_) check_cuda(cudaFreeAsync(staging_, comm_.stream()), "cudaFreeAsync");
      check_cuda(cudaMallocAsync(&staging_, bucket.size() * sizeof(cuda::bf16), comm_.stream()),
                 "cudaMallocAsync (bf16 gradient staging)");
      staging_elements_ = bucket.size();
    }
    cuda::convert_f32_to_bf16(staging_, data_ + bucket.begin, bucket.size(), comm_.stream());
    reduce_parts(bucket, staging_, ncclBfloat16, sizeof(cuda::bf16));
    const Range own = shard_range(n_, comm_.rank(), comm_.world());
    const int64_t lo = std::max(bucket.begin, own.begin), hi = std::min(bucket.end, own.end);
    if (lo < hi)
      cuda::convert_bf16_to_f32(data_ + lo, staging_ + (lo - bucket.begin), hi - lo, comm_.stream());
  }

  NcclCommunicator& comm_;
  float* data_;
  int64_t n_;
  bool bf16_;
  cudaStream_t compute_;
  cudaEvent_t ready_ = nullptr;
  cuda::bf16* staging_ = nullptr;
  int64_t staging_elements_ = 0;
};

std::unique_ptr<BucketTransport> NcclCommunicator::make_bucket_transport(float* data, int64_t n, bool bf16,
                                                                         void* compute_stream) {
  return std::make_unique<NcclBucketTransport>(*this, data, n, bf16, compute_stream);
}

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(std::unique_ptr<MpiCommunicator> mpi,
                                                     double timeout_s) {
  return std::make_unique<NcclCommunicator>(std::move(mpi), timeout_s);
}

bool have_nccl() { return true; }

}  // namespace kdtrain::dist

#else

namespace kdtrain::dist {

#if KDTRAIN_HAVE_MPI
std::unique_ptr<Communicator> make_nccl_communicator(std::unique_ptr<MpiCommunicator> mpi, double) {
  KD_CHECK(mpi && mpi->world() == 1, "dist.backend=nccl",
           mpi ? " with " + std::to_string(mpi->world()) + " ranks" : std::string(),
           " needs NCCL, but kdtrain was built without it (install libnccl-dev, or the CUDA "
           "toolkit's NCCL, and re-run cmake)");
  return mpi;
}
#endif

bool have_nccl() { return false; }

}  // namespace kdtrain::dist

#endif
