// The MPI bucket transport (host memory): one MPI_Ialltoallv per bucket piece
// sends every rank the part of the bucket it owns (bucket ∩ its shard) from
// every rank; once received, the owner adds the W contributions in rank order
// (0, 1, ..., W-1) itself. So an element's sum is the same bits whatever the
// bucket boundaries, the overlap, or MPI's algorithms.
//
// With bf16 the contributions travel as bf16 (round to nearest even) and the
// owner adds them in fp32, in rank order; its own contribution takes the same
// rounding, so every rank's part is treated alike.
//
// Progress: MPI advances non-blocking collectives only inside MPI calls, so
// poll() tests every piece in flight (the reducer calls it at every layer
// boundary of the backward); wait_all() waits under the watchdog.
#include "dist/mpi_communicator.h"

#if KDTRAIN_HAVE_MPI
#include <algorithm>
#include <climits>

#include "core/bf16.h"
#include "core/error.h"
#include "dist/grad_reducer.h"

namespace kdtrain::dist {

namespace {

class MpiBucketTransport final : public BucketTransport {
 public:
  MpiBucketTransport(MpiCommunicator& comm, float* data, int64_t n, bool bf16)
      : comm_(comm), data_(data), n_(n), bf16_(bf16), world_(comm.world()),
        shards_(static_cast<size_t>(world_)) {
    for (int r = 0; r < world_; ++r) shards_[r] = shard_range(n, r, world_);
    // Receive displacements reach W * piece: keep them below 2^31.
    max_piece_ = std::max<int64_t>(64, (INT_MAX / world_) / 64 * 64);
  }

  ~MpiBucketTransport() override {
    // Pieces still in flight (only after an error, on the way to MPI_Abort):
    // MPI may still write into them and a collective's request cannot be
    // freed, so their buffers are left allocated.
    for (auto& piece : busy_) piece.release();
  }

  void start(const Range& bucket) override {
    KD_CHECK(bucket.begin >= 0 && bucket.end <= n_, "bucket outside the arena");
    for (int64_t begin = bucket.begin; begin < bucket.end; begin += max_piece_)
      start_piece({begin, std::min(bucket.end, begin + max_piece_)});
  }

  void poll() override {
    for (size_t i = 0; i < busy_.size();) {
      int done = 0;
      check_mpi(MPI_Test(&busy_[i]->request, &done, MPI_STATUS_IGNORE), "MPI_Test (gradient bucket)");
      if (!done) {
        ++i;
        continue;
      }
      complete(*busy_[i]);
      free_.push_back(std::move(busy_[i]));
      busy_.erase(busy_.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }

  void wait_all() override {
    Watchdog::Scope guard(comm_.watchdog(), "reduce_scatter (gradient buckets)");
    for (auto& piece : busy_) {
      check_mpi(MPI_Wait(&piece->request, MPI_STATUS_IGNORE), "MPI_Wait (gradient bucket)");
      complete(*piece);
      free_.push_back(std::move(piece));
    }
    busy_.clear();
  }

 private:
  // One MPI_Ialltoallv in flight and its buffers (kept for reuse).
  struct Piece {
    Range mine;  // the part this rank owns: the sums land here
    MPI_Request request = MPI_REQUEST_NULL;
    std::vector<float> recv;                 // W x mine.size(), rank-major
    std::vector<uint16_t> send16, recv16;    // bf16 only
    std::vector<int> send_counts, send_displs, recv_counts, recv_displs;
  };

  void start_piece(const Range& part) {
    std::unique_ptr<Piece> piece;
    if (free_.empty()) {
      piece = std::make_unique<Piece>();
    } else {
      piece = std::move(free_.back());
      free_.pop_back();
    }
    Piece& p = *piece;
    const int W = world_;
    p.send_counts.assign(W, 0);
    p.send_displs.assign(W, 0);
    p.recv_counts.assign(W, 0);
    p.recv_displs.assign(W, 0);
    const Range own = shards_[comm_.rank()];
    p.mine = {std::max(part.begin, own.begin), std::min(part.end, own.end)};
    if (p.mine.begin > p.mine.end) p.mine = {part.begin, part.begin};
    const int mine = static_cast<int>(p.mine.size());
    for (int r = 0; r < W; ++r) {
      const int64_t lo = std::max(part.begin, shards_[r].begin), hi = std::min(part.end, shards_[r].end);
      p.send_counts[r] = static_cast<int>(std::max<int64_t>(0, hi - lo));
      p.send_displs[r] = p.send_counts[r] > 0 ? static_cast<int>(lo - part.begin) : 0;
      p.recv_counts[r] = mine;
      p.recv_displs[r] = r * mine;
    }
    const float* send = data_ + part.begin;
    if (bf16_) {
      p.send16.resize(static_cast<size_t>(part.size()));
      for (int64_t i = 0; i < part.size(); ++i) p.send16[i] = float_to_bf16_bits(send[i]);
      p.recv16.resize(static_cast<size_t>(W) * mine);
      check_mpi(MPI_Ialltoallv(p.send16.data(), p.send_counts.data(), p.send_displs.data(), MPI_UINT16_T,
                               p.recv16.data(), p.recv_counts.data(), p.recv_displs.data(), MPI_UINT16_T,
                               MPI_COMM_WORLD, &p.request),
                "MPI_Ialltoallv (gradient bucket, bf16)");
    } else {
      p.recv.resize(static_cast<size_t>(W) * mine);
      check_mpi(MPI_Ialltoallv(send, p.send_counts.data(), p.send_displs.data(), MPI_FLOAT, p.recv.data(),
                               p.recv_counts.data(), p.recv_displs.data(), MPI_FLOAT, MPI_COMM_WORLD,
                               &p.request),
                "MPI_Ialltoallv (gradient bucket)");
    }
    busy_.push_back(std::move(piece));
  }

  // The owner's sums, in rank order, in fp32.
  void complete(Piece& p) const {
    const int64_t k = p.mine.size();
    float* out = data_ + p.mine.begin;
    if (bf16_) {
      for (int64_t i = 0; i < k; ++i) {
        float sum = bf16_bits_to_float(p.recv16[i]);
        for (int r = 1; r < world_; ++r) sum += bf16_bits_to_float(p.recv16[r * k + i]);
        out[i] = sum;
      }
    } else {
      for (int64_t i = 0; i < k; ++i) {
        float sum = p.recv[i];
        for (int r = 1; r < world_; ++r) sum += p.recv[r * k + i];
        out[i] = sum;
      }
    }
  }

  MpiCommunicator& comm_;
  float* data_;
  int64_t n_;
  bool bf16_;
  int world_;
  std::vector<Range> shards_;
  int64_t max_piece_;
  std::vector<std::unique_ptr<Piece>> busy_, free_;
};

}  // namespace

std::unique_ptr<BucketTransport> MpiCommunicator::make_bucket_transport(float* data, int64_t n, bool bf16,
                                                                        void* /*compute_stream*/) {
  return std::make_unique<MpiBucketTransport>(*this, data, n, bf16);
}

}  // namespace kdtrain::dist
#endif
