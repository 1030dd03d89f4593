// The MPI communicator over host memory (the CPU backend's transport, and the
// host side of the NCCL one). Sums are computed by this code in rank order
// (MPI moves bytes only), so results do not depend on MPI's algorithms.
//
// Reduce-scatter of an arena of n floats: in rounds of at most 2^24 elements
// per shard, MPI_Alltoallv sends rank r the round's piece of shard r from every
// rank into a scratch buffer (W pieces), which is then summed in rank order.
// All-gather: MPI_Allgatherv of the round's pieces into scratch, copied out.
// Counts and displacements stay below 2^31 whatever the arena size.
#pragma once
#if KDTRAIN_HAVE_MPI
#include <mpi.h>

#include <vector>

#include "dist/communicator.h"
#include "dist/watchdog.h"

namespace kdtrain::dist {

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
  void reduce_scatter_sum(float* data, int64_t n) override;
  void all_gather(float* data, int64_t n) override;
  void all_reduce_sum(float* data, int64_t n) override;
  void all_reduce_sum_host(double* data, int64_t n) override;
  void broadcast_host(void* data, size_t bytes, int root) override;
  bool any(bool flag) override;
  [[noreturn]] void abort(int code) override;

  Watchdog& watchdog() { return *watchdog_; }
  double timeout_s() const { return timeout_s_; }

  // Elements per shard per round (default 2^24); tests make it small to
  // exercise several rounds on small arenas.
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
