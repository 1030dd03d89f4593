// kdtrain bench --collectives, under `mpirun -np W` (W >= 2): checks the
// communication term of the scaling model (bench/scaling.h) against this
// machine's MPI. It measures the link — point-to-point latency and bandwidth
// between ranks 0 and 1 (ping-pong), the latency of an empty bucket, the rate
// of the owner's rank-ordered sum — then times the gradient reduction
// (GradReducer over the MPI transport) and the ZeRO-1 all-gather for several
// arena and bucket sizes, each beside the time mpi_reduce_s / mpi_all_gather_s
// predict from the measured link. docs/distributed.md has the results.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kdtrain::bench {

// The measured link of the MPI transport.
struct MpiLink {
  double p2p_latency_s = 0;      // half a ping-pong of 8 bytes
  double p2p_bytes_s = 0;        // one direction, large messages
  double bucket_latency_s = 0;   // an MPI_Ialltoallv + wait of a 64-element bucket
  double sum_bytes_s = 0;        // bytes read and written by the owner's rank-ordered sum
};

// The MPI transport's predicted time for one reduction of n fp32 gradients in
// buckets of `bucket_elements` over `world` ranks: per bucket, its latency,
// plus, on its busiest owner (the owner of part p receives W-1 copies of p),
// the copies in and the rank-ordered sum: (W-1)·4p / p2p + (W+1)·4p / sum.
double mpi_reduce_s(int64_t n, int64_t bucket_elements, int world, const MpiLink& link);
// MPI_Allgatherv of the shards (in rounds of 2^24 elements per shard): every
// rank receives W-1 shards and copies them out of the scratch buffer.
double mpi_all_gather_s(int64_t n, int world, const MpiLink& link);

struct CollectiveBenchOptions {
  std::vector<int64_t> elements = {int64_t{1} << 20, int64_t{1} << 22, int64_t{1} << 24};
  std::vector<double> bucket_mb = {0.25, 4.0, 25.0};
  int64_t repeats = 5;  // timed repetitions per row (the median is reported)
};

// Runs on every rank; the report (identical on every rank) as JSON.
nlohmann::json run_collective_bench(const CollectiveBenchOptions& options);
std::string format_collective_report(const nlohmann::json& report);

}  // namespace kdtrain::bench
