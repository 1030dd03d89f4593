// Data-parallel collectives (docs/distributed.md) behind one interface, so the
// trainer reads the same on the CPU backend (MPI over host memory) and on CUDA
// (NCCL over device memory, MPI for the set-up and the small host-side values).
//
// Two kinds of buffers:
// - arena buffers (`float*`, n elements) live in the backend's memory: host on
//   the CPU backend, device on CUDA. The bucket transport's reduce-scatter and
//   all_gather work on them;
// - host values (loss sums, alpha sums, flags, strings) are always host memory.
//
// Determinism: every reduction adds the ranks' contributions in rank order
// (0, 1, ..., W-1) on the MPI path, independent of the MPI library's
// algorithm, so two runs with the same world size give the same bits. NCCL's
// ring/tree sums are deterministic for a fixed topology and element count but
// are not ordered by rank (docs/distributed.md).
//
// Faults: every collective runs under a watchdog; one that has not completed
// within dist.timeout_s prints which collective and which rank, then ends the
// process (mpirun then tears the job down), so a dead or hung rank never
// leaves the others waiting forever.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config/choices.h"

namespace kdtrain::dist {

class BucketTransport;  // dist/grad_reducer.h

// Rank r's contiguous part [begin, end) of an arena of n elements split over W
// ranks: near-equal, boundaries rounded down to multiples of 64 elements (256
// bytes of fp32) so device shards stay aligned. A fixed function of (n, W).
struct Range {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};
Range shard_range(int64_t n, int rank, int world);

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual std::string name() const = 0;  // "single", "mpi", "nccl"
  virtual int rank() const = 0;
  virtual int world() const = 0;
  virtual int local_rank() const = 0;    // rank among the processes on this node
  virtual int local_world() const = 0;   // processes on this node
  // True when collectives really run (MPI or NCCL, even at world size 1), so
  // one GPU under `mpirun -np 1` exercises the path that eight GPUs take; false
  // for the single-process communicator, whose collectives are identities.
  virtual bool distributed() const = 0;

  virtual void barrier() = 0;

  // Arena buffers (backend memory), n elements on every rank.
  // Reduce-scatter, bucket by bucket, without blocking (dist/grad_reducer.h):
  // sums of data[bucket] over ranks land on the owner of each element
  // (shard_range). bf16: contributions travel as bf16 and are summed in fp32.
  // compute_stream: the backend's native_stream(), ordered before each bucket.
  virtual std::unique_ptr<BucketTransport> make_bucket_transport(float* data, int64_t n, bool bf16,
                                                                 void* compute_stream) = 0;
  // Every rank receives data[shard_range(n, r)] from rank r.
  virtual void all_gather(float* data, int64_t n) = 0;

  // Host values.
  virtual void all_reduce_sum_host(double* data, int64_t n) = 0;
  virtual void broadcast_host(void* data, size_t bytes, int root) = 0;
  // True on every rank when `flag` is true on any rank.
  virtual bool any(bool flag) = 0;

  // Ends the whole job with `code` (MPI_Abort); never returns.
  [[noreturn]] virtual void abort(int code) = 0;
};

// World size 1 without collectives: every collective is the identity. Tests
// derive from it for a communicator that records what it is asked.
class SingleCommunicator : public Communicator {
 public:
  std::string name() const override { return "single"; }
  int rank() const override { return 0; }
  int world() const override { return 1; }
  int local_rank() const override { return 0; }
  int local_world() const override { return 1; }
  bool distributed() const override { return false; }
  void barrier() override {}
  std::unique_ptr<BucketTransport> make_bucket_transport(float* data, int64_t n, bool bf16,
                                                         void* compute_stream) override;
  void all_gather(float*, int64_t) override {}
  void all_reduce_sum_host(double*, int64_t) override {}
  void broadcast_host(void*, size_t, int) override {}
  bool any(bool flag) override { return flag; }
  [[noreturn]] void abort(int code) override;
};

// A string from `root` to every rank.
std::string broadcast_string(Communicator& comm, const std::string& value, int root);

// True when this process was started by an MPI launcher (mpirun, mpiexec,
// srun --mpi=pmix): one of the launchers' environment variables is set.
bool launched_by_mpi();

// The communicator for this process (dist.backend):
// - auto: a single-process one (world 1, MPI never initialised) unless
//   launched_by_mpi(); then NCCL for train.device=cuda, else MPI;
// - single: world 1, refused under a launcher;
// - mpi (train.device=cpu): MPI, as a singleton of world 1 without a launcher;
// - nccl (train.device=cuda): NCCL over MPI under a launcher; without one, NCCL
//   alone at world 1 (no MPI), so one GPU runs every NCCL call.
// timeout_s <= 0 disables the collective watchdog.
std::unique_ptr<Communicator> make_communicator(DistBackend backend, Device device, double timeout_s);

// Always world 1: every collective is the identity.
std::unique_ptr<Communicator> make_single_communicator();

}  // namespace kdtrain::dist
