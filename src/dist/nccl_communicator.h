// The NCCL communicator (CUDA backend): arena collectives on device memory
// through NCCL; host values and set-up through the wrapped MPI communicator.
// Selects GPU local_rank before creating the NCCL communicator; the unique id
// is broadcast from rank 0 over MPI.
//
// Without a launcher (dist.backend=nccl, one process) there is no MPI: the
// communicator is NCCL's own of world size 1, host values are the identity,
// and every arena collective still runs through NCCL, so one GPU exercises
// the NCCL calls eight GPUs make (scripts/gpu/gpu_check_nccl.sh).
//
// Shards are near-equal but not equal (dist::shard_range), so a gradient
// bucket's reduce-scatter is one grouped ncclReduce per owner of a part of the
// bucket, and all-gather one grouped ncclBroadcast per shard. Buckets run on
// the communicator's own stream, after an event recorded on the compute
// stream when the bucket was launched, so they overlap the rest of the
// backward; wait_all() polls the stream so the watchdog can still fire.
// dist.reduce_dtype=bf16: the bucket is converted to bf16 on the
// communication stream and reduced by NCCL in bf16 (see docs/distributed.md
// for how its accumulation differs from the MPI path's).
#pragma once
#include <memory>

#include "dist/communicator.h"

namespace kdtrain::dist {

// True when this build has the NCCL path.
bool have_nccl();

#if KDTRAIN_HAVE_MPI
class MpiCommunicator;

// `mpi` null: one process, world size 1, no launcher. Built without NCCL: an
// error, except that under MPI at world size 1 the MPI communicator itself is
// returned (every arena collective is then an identity on device pointers).
std::unique_ptr<Communicator> make_nccl_communicator(std::unique_ptr<MpiCommunicator> mpi,
                                                     double timeout_s);
#endif

}  // namespace kdtrain::dist
