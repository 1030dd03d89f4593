#include "dist/communicator.h"

#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "dist/grad_reducer.h"
#include "dist/mpi_communicator.h"
#include "dist/nccl_communicator.h"

namespace kdtrain::dist {

Range shard_range(int64_t n, int rank, int world) {
  KD_CHECK(world >= 1 && rank >= 0 && rank < world, "shard_range: rank ", rank,
           " out of range for world size ", world);
  constexpr int64_t kAlign = 64;
  auto boundary = [&](int r) -> int64_t {
    if (r >= world) return n;
    // r*n may overflow int64 only beyond 2^63 / world elements; arenas are far smaller.
    return (static_cast<int64_t>(r) * n / world) / kAlign * kAlign;
  };
  return {boundary(rank), boundary(rank + 1)};
}

std::string broadcast_string(Communicator& comm, const std::string& value, int root) {
  if (comm.world() == 1) return value;
  uint64_t size = value.size();
  comm.broadcast_host(&size, sizeof size, root);
  std::string out = comm.rank() == root ? value : std::string(size, '\0');
  if (size > 0) comm.broadcast_host(out.data(), size, root);
  return out;
}

bool launched_by_mpi() {
  // Open MPI (mpirun), PMIx (Open MPI 5, srun --mpi=pmix), MPICH/Hydra and Intel MPI (PMI).
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "MPI_LOCALNRANKS"}) {
    const char* value = std::getenv(var);
    if (value && *value) return true;
  }
  return false;
}

namespace {

// World size 1 without collectives: a bucket's sum is the bucket itself.
class IdentityTransport final : public BucketTransport {
 public:
  void start(const Range&) override {}
  void poll() override {}
  void wait_all() override {}
};

}  // namespace

std::unique_ptr<BucketTransport> SingleCommunicator::make_bucket_transport(float*, int64_t, bool, void*) {
  return std::make_unique<IdentityTransport>();
}

void SingleCommunicator::abort(int code) { std::exit(code); }

std::unique_ptr<Communicator> make_single_communicator() {
  return std::make_unique<SingleCommunicator>();
}

std::unique_ptr<Communicator> make_communicator(DistBackend backend, Device device, double timeout_s) {
  const bool launched = launched_by_mpi();
  if (backend == DistBackend::auto_select)
    backend = !launched ? DistBackend::single : device == Device::cuda ? DistBackend::nccl : DistBackend::mpi;
  switch (backend) {
    case DistBackend::single:
      KD_CHECK(!launched, "dist.backend=single, but an MPI launcher started this process: every rank "
                          "would train alone into the same run directory; use dist.backend=auto");
      return make_single_communicator();
    case DistBackend::mpi:
      KD_CHECK(device == Device::cpu, "dist.backend=mpi reduces host memory, so it needs train.device=cpu "
                                        "(train.device=", to_string(device), " takes dist.backend=nccl)");
      break;
    case DistBackend::nccl:
      KD_CHECK(device == Device::cuda, "dist.backend=nccl needs train.device=cuda (got ", to_string(device),
               ")");
      break;
    case DistBackend::auto_select:
      break;
  }
#if KDTRAIN_HAVE_MPI
  // Without a launcher, NCCL runs alone (world 1, no MPI); MPI initialises as a singleton.
  std::unique_ptr<MpiCommunicator> mpi =
      launched || backend == DistBackend::mpi ? std::make_unique<MpiCommunicator>(timeout_s) : nullptr;
  if (backend == DistBackend::nccl) return make_nccl_communicator(std::move(mpi), timeout_s);
  return mpi;
#else
  (void)timeout_s;
  fail(launched ? "this process was started by an MPI launcher, but kdtrain was built without MPI "
                  "(install libopenmpi-dev and re-run cmake), so it cannot join the job"
                : "dist.backend=", to_string(backend), " needs a build with MPI (install libopenmpi-dev "
                  "and re-run cmake)");
#endif
}

}  // namespace kdtrain::dist
