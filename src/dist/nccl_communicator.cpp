#include "dist/nccl_communicator.h"

#include "core/error.h"
#include "dist/mpi_communicator.h"

#if KDTRAIN_HAVE_MPI && KDTRAIN_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>

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
  explicit NcclCommunicator(std::unique_ptr<MpiCommunicator> mpi) : mpi_(std::move(mpi)) {
    int devices = 0;
    check_cuda(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
    KD_CHECK(devices > 0, "rank ", mpi_->rank(), ": no CUDA device visible");
    KD_CHECK(mpi_->local_rank() < devices, "rank ", mpi_->rank(), " is local rank ",
             mpi_->local_rank(), " on its node but only ", devices,
             " GPUs are visible; launch at most one rank per GPU");
    check_cuda(cudaSetDevice(mpi_->local_rank()), "cudaSetDevice");
    ncclUniqueId id;
    if (mpi_->rank() == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    mpi_->broadcast_host(&id, sizeof id, 0);
    {
      Watchdog::Scope guard(mpi_->watchdog(), "ncclCommInitRank");
      check_nccl(ncclCommInitRank(&comm_, mpi_->world(), id, mpi_->rank()), "ncclCommInitRank");
    }
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  }

  ~NcclCommunicator() override {
    if (stream_) cudaStreamDestroy(stream_);
    if (comm_) ncclCommDestroy(comm_);
  }

  std::string name() const override { return "nccl"; }
  int rank() const override { return mpi_->rank(); }
  int world() const override { return mpi_->world(); }
  int local_rank() const override { return mpi_->local_rank(); }
  int local_world() const override { return mpi_->local_world(); }
  bool distributed() const override { return true; }
  void barrier() override { mpi_->barrier(); }

  void reduce_scatter_sum(float* data, int64_t n) override {
    Watchdog::Scope guard(mpi_->watchdog(), "reduce_scatter (NCCL)");
    check_nccl(ncclGroupStart(), "ncclGroupStart");
    for (int r = 0; r < world(); ++r) {
      const Range s = shard_range(n, r, world());
      check_nccl(ncclReduce(data + s.begin, data + s.begin, static_cast<size_t>(s.size()), ncclFloat,
                            ncclSum, r, comm_, stream_),
                 "ncclReduce");
    }
    check_nccl(ncclGroupEnd(), "ncclGroupEnd");
    wait();
  }

  void all_gather(float* data, int64_t n) override {
    Watchdog::Scope guard(mpi_->watchdog(), "all_gather (NCCL)");
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

  void all_reduce_sum(float* data, int64_t n) override {
    Watchdog::Scope guard(mpi_->watchdog(), "all_reduce (NCCL)");
    check_nccl(ncclAllReduce(data, data, static_cast<size_t>(n), ncclFloat, ncclSum, comm_, stream_),
               "ncclAllReduce");
    wait();
  }

  void all_reduce_sum_host(double* data, int64_t n) override { mpi_->all_reduce_sum_host(data, n); }
  void broadcast_host(void* data, size_t bytes, int root) override { mpi_->broadcast_host(data, bytes, root); }
  bool any(bool flag) override { return mpi_->any(flag); }
  [[noreturn]] void abort(int code) override {
    if (comm_) ncclCommAbort(comm_);
    comm_ = nullptr;
    mpi_->abort(code);
  }

 private:
  // Polls so the watchdog (armed by the caller) can still fire on a hung peer.
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

  std::unique_ptr<MpiCommunicator> mpi_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(std::unique_ptr<MpiCommunicator> mpi) {
  return std::make_unique<NcclCommunicator>(std::move(mpi));
}

bool have_nccl() { return true; }

}  // namespace kdtrain::dist

#else

namespace kdtrain::dist {

#if KDTRAIN_HAVE_MPI
std::unique_ptr<Communicator> make_nccl_communicator(std::unique_ptr<MpiCommunicator> mpi) {
  KD_CHECK(mpi->world() == 1, "train.device=cuda with ", mpi->world(),
           " ranks needs NCCL, but kdtrain was built without it (install libnccl-dev, or the "
           "CUDA toolkit's NCCL, and re-run cmake)");
  return mpi;
}
#endif

bool have_nccl() { return false; }

}  // namespace kdtrain::dist

#endif
