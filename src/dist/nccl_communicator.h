// The NCCL communicator (CUDA backend): arena collectives on device memory
// through NCCL, host values and set-up through the wrapped MPI communicator.
// Selects GPU local_rank before creating the NCCL communicator; the unique id
// is broadcast from rank 0 over MPI.
//
// Shards are near-equal but not equal (dist::shard_range), so reduce-scatter
// is one grouped ncclReduce per shard (root = its owner) and all-gather one
// grouped ncclBroadcast per shard. Collectives run on their own stream and
// are waited for before returning (the trainer synchronises the backend
// before calling them). Bucketing and overlap with the backward pass are not
// done yet (docs/distributed.md). There is no shortcut for world 1: one GPU
// under `mpirun -np 1` runs the same NCCL calls as eight.
#pragma once
#include <memory>

#include "dist/communicator.h"

namespace kdtrain::dist {

// True when this build has the NCCL path.
bool have_nccl();

#if KDTRAIN_HAVE_MPI
class MpiCommunicator;

// Built without NCCL: an error for world > 1, else the MPI communicator itself
// (world 1: every arena collective is the identity, so device pointers are fine).
std::unique_ptr<Communicator> make_nccl_communicator(std::unique_ptr<MpiCommunicator> mpi);
#endif

}  // namespace kdtrain::dist
