// The MPI communicator over host memory (the CPU backend's transport, and the
// host side of the NCCL one). Sums are computed by this code in rank order
// (MPI moves bytes only), so results do not depend on MPI's algorithms.
//
// Reduce-scatter: bucket by bucket with MPI_Ialltoallv (mpi_bucket_transport.cpp).
// All-gather: MPI_Allgatherv, in rounds of at most 2^24 elements per shard,
// of the round's pieces into scratch, copied out. Counts and displacements
// stay below 2^31 whatever the arena size.
#pragma once
#if KDTRAIN_HAVE_MPI
#include <mpi.h>

#include <vector>

#include "dist/communicator.h"
#include "dist/watchdog.h"

namespace kdtrain::dist {

// Throws naming `what` and MPI's message unless code is MPI_SUCCESS.
void check_mpi(int code, const char* what);

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(double timeout_s);  // MPI_Init_thread unless already initialised
  ~MpiCommunicator() override;                  // MPI_Finalize if this object initialised MPI

  std::string name() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int world() const override { return world_; }
  int local_rank() const override { return local_rank_; }
  int local_world() const override { return local_world_; }
  bool distributed() const override { return true; }
  void barrier() override;
  std::unique_ptr<BucketTransport> make_bucket_transport(float* data, int64_t n, bool bf16,
                                                         void* compute_stream) override;
  void all_gather(float* data, int64_t n) override;
  void all_reduce_sum_host(double* data, int64_t n) override;
  void broadcast_host(void* data, size_t bytes, int root) override;
  bool any(bool flag) override;
  [[noreturn]] void abort(int code) override;

  Watchdog& watchdog() { return *watchdog_; }
  double timeout_s() const { return timeout_s_; }

  // All-gather elements per shard per round (default 2^24); tests make it
  // small to exercise several rounds on small arenas.
  void set_round_elements(int64_t n) { round_ = n > 0 ? n : 1; }

 private:
  bool initialised_here_ = false;
  int rank_ = 0, world_ = 1, local_rank_ = 0, local_world_ = 1;
  double timeout_s_;
  std::unique_ptr<Watchdog> watchdog_;
  int64_t round_ = int64_t{1} << 24;
  std::vector<float> scratch_;
};

}  // namespace kdtrain::dist
#endif
