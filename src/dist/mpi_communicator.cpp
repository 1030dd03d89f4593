#include "dist/mpi_communicator.h"

#if KDTRAIN_HAVE_MPI
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace kdtrain::dist {

void check_mpi(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  fail("MPI ", what, " failed: ", std::string(text, len));
}

MpiCommunicator::MpiCommunicator(double timeout_s) : timeout_s_(timeout_s) {
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (!initialised) {
    // One thread calls MPI; the watchdog thread never does.
    int provided = 0;
    check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    initialised_here_ = true;
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_);
  MPI_Comm node;
  check_mpi(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node),
            "MPI_Comm_split_type");
  MPI_Comm_rank(node, &local_rank_);
  MPI_Comm_size(node, &local_world_);
  MPI_Comm_free(&node);
  watchdog_ = std::make_unique<Watchdog>(timeout_s, rank_);
}

MpiCommunicator::~MpiCommunicator() {
  watchdog_.reset();
  if (initialised_here_) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }
}

void MpiCommunicator::barrier() {
  Watchdog::Scope guard(*watchdog_, "barrier");
  check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
}

void MpiCommunicator::all_gather(float* data, int64_t n) {
  if (world_ == 1) return;
  Watchdog::Scope guard(*watchdog_, "all_gather");
  const Range mine = shard_range(n, rank_, world_);
  std::vector<Range> shards(world_);
  int64_t longest = 0;
  for (int r = 0; r < world_; ++r) {
    shards[r] = shard_range(n, r, world_);
    longest = std::max(longest, shards[r].size());
  }
  std::vector<int> counts(world_), displs(world_);
  for (int64_t offset = 0; offset < std::max<int64_t>(longest, 1); offset += round_) {
    int total = 0;
    for (int r = 0; r < world_; ++r) {
      counts[r] = static_cast<int>(std::clamp<int64_t>(shards[r].size() - offset, 0, round_));
      displs[r] = total;
      total += counts[r];
    }
    scratch_.resize(std::max(total, 1));
    check_mpi(MPI_Allgatherv(data + mine.begin + offset, counts[rank_], MPI_FLOAT, scratch_.data(),
                             counts.data(), displs.data(), MPI_FLOAT, MPI_COMM_WORLD),
              "MPI_Allgatherv (all-gather)");
    for (int r = 0; r < world_; ++r)
      if (r != rank_)
        std::memcpy(data + shards[r].begin + offset, scratch_.data() + displs[r],
                    static_cast<size_t>(counts[r]) * sizeof(float));
  }
}

void MpiCommunicator::all_reduce_sum_host(double* data, int64_t n) {
  if (world_ == 1 || n == 0) return;
  Watchdog::Scope guard(*watchdog_, "all_reduce (host)");
  KD_CHECK(n * world_ < (int64_t{1} << 31), "all_reduce_sum_host: ", n, " values is too many");
  std::vector<double> all(static_cast<size_t>(n) * world_);
  check_mpi(MPI_Allgather(data, static_cast<int>(n), MPI_DOUBLE, all.data(), static_cast<int>(n),
                          MPI_DOUBLE, MPI_COMM_WORLD),
            "MPI_Allgather (host all-reduce)");
  for (int64_t i = 0; i < n; ++i) {
    double sum = all[i];
    for (int r = 1; r < world_; ++r) sum += all[r * n + i];
    data[i] = sum;
  }
}

void MpiCommunicator::broadcast_host(void* data, size_t bytes, int root) {
  if (world_ == 1) return;
  Watchdog::Scope guard(*watchdog_, "broadcast");
  char* p = static_cast<char*>(data);
  for (size_t done = 0; done < bytes;) {
    const int piece = static_cast<int>(std::min<size_t>(bytes - done, size_t{1} << 30));
    check_mpi(MPI_Bcast(p + done, piece, MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast");
    done += piece;
  }
}

bool MpiCommunicator::any(bool flag) {
  if (world_ == 1) return flag;
  Watchdog::Scope guard(*watchdog_, "agreement");
  int local = flag ? 1 : 0, global = 0;
  check_mpi(MPI_Allreduce(&local, &global, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce (flag)");
  return global != 0;
}

void MpiCommunicator::abort(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace kdtrain::dist
#endif
