#include "bench/collective_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>

#include "bench/bench.h"
#include "core/error.h"
#include "dist/grad_reducer.h"
#include "dist/mpi_communicator.h"

namespace kdtrain::bench {

double mpi_reduce_s(int64_t n, int64_t bucket_elements, int world, const MpiLink& link) {
  double total = 0.0;
  for (const dist::Range& bucket : dist::plan_buckets(n, bucket_elements)) {
    int64_t busiest = 0;  // the largest part of the bucket one rank owns
    for (int r = 0; r < world; ++r) {
      const dist::Range s = dist::shard_range(n, r, world);
      busiest = std::max(busiest, std::min(bucket.end, s.end) - std::max(bucket.begin, s.begin));
    }
    const double bytes = 4.0 * double(busiest);
    total += link.bucket_latency_s + (world - 1) * bytes / link.p2p_bytes_s + (world + 1) * bytes / link.sum_bytes_s;
  }
  return total;
}

double mpi_all_gather_s(int64_t n, int world, const MpiLink& link) {
  const double received = 4.0 * double(n) * (world - 1) / world;
  return link.p2p_latency_s * (world - 1) + received / link.p2p_bytes_s + 2.0 * received / link.sum_bytes_s;
}

#if KDTRAIN_HAVE_MPI
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The slowest rank's time.
double slowest(double seconds) {
  double out = 0.0;
  dist::check_mpi(MPI_Allreduce(&seconds, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce");
  return out;
}

// Half a round trip between ranks 0 and 1 (the others wait at the barrier).
double ping_pong_s(dist::MpiCommunicator& comm, size_t bytes, int repeats) {
  std::vector<char> buffer(bytes);
  comm.barrier();
  const auto t = Clock::now();
  for (int i = 0; i < repeats && comm.rank() < 2; ++i) {
    const int count = static_cast<int>(bytes);
    if (comm.rank() == 0) {
      dist::check_mpi(MPI_Send(buffer.data(), count, MPI_BYTE, 1, 0, MPI_COMM_WORLD), "MPI_Send");
      dist::check_mpi(MPI_Recv(buffer.data(), count, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv");
    } else {
      dist::check_mpi(MPI_Recv(buffer.data(), count, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv");
      dist::check_mpi(MPI_Send(buffer.data(), count, MPI_BYTE, 0, 0, MPI_COMM_WORLD), "MPI_Send");
    }
  }
  double half = comm.rank() == 0 ? seconds_since(t) / (2.0 * repeats) : 0.0;
  comm.broadcast_host(&half, sizeof half, 0);
  return half;
}

// Median over `repeats` of one reduction step, slowest rank.
double time_reduction(dist::MpiCommunicator& comm, std::vector<float>& grads, int64_t bucket_elements,
                      int64_t repeats) {
  dist::GradReduceOptions options;
  options.bucket_elements = bucket_elements;
  options.overlap = false;
  dist::GradReducer reducer(comm, grads.data(), static_cast<int64_t>(grads.size()), options, nullptr);
  std::vector<double> times;
  for (int64_t i = 0; i <= repeats; ++i) {  // the first one warms the buffers up
    comm.barrier();
    const auto t = Clock::now();
    reducer.begin_step();
    reducer.mark_final(0, static_cast<int64_t>(grads.size()));
    reducer.finish();
    const double s = slowest(seconds_since(t));
    if (i > 0) times.push_back(s);
  }
  return median(times);
}

MpiLink measure_link(dist::MpiCommunicator& comm) {
  MpiLink link;
  link.p2p_latency_s = ping_pong_s(comm, 8, 2000);
  const size_t big = size_t{16} << 20;
  link.p2p_bytes_s = double(big) / std::max(1e-9, ping_pong_s(comm, big, 20) - link.p2p_latency_s);
  std::vector<float> tiny(64, 1.f);
  link.bucket_latency_s = time_reduction(comm, tiny, 64, 200);
  // The owner's sum (mpi_bucket_transport.cpp), alone on rank 0.
  const int W = comm.world();
  const int64_t k = int64_t{1} << 22;
  std::vector<float> pieces(static_cast<size_t>(W * k), 0.5f), out(static_cast<size_t>(k));
  double sum_s = 0.0;
  comm.barrier();
  if (comm.rank() == 0) {
    std::vector<double> times;
    for (int rep = 0; rep < 5; ++rep) {
      const auto t = Clock::now();
      for (int64_t i = 0; i < k; ++i) {
        float s = pieces[i];
        for (int r = 1; r < W; ++r) s += pieces[r * k + i];
        out[i] = s;
      }
      times.push_back(seconds_since(t));
    }
    sum_s = median(times);
  }
  comm.broadcast_host(&sum_s, sizeof sum_s, 0);
  link.sum_bytes_s = (W + 1) * 4.0 * double(k) / sum_s;
  return link;
}

}  // namespace

nlohmann::json run_collective_bench(const CollectiveBenchOptions& options) {
  KD_CHECK(dist::launched_by_mpi(), "--collectives measures MPI between ranks: run it under a launcher, "
                                    "e.g. mpirun -np 2 kdtrain bench --collectives");
  dist::MpiCommunicator comm(300.0);
  const int W = comm.world();
  KD_CHECK(W >= 2, "--collectives needs at least 2 ranks (mpirun -np 2 ...), got ", W);
  KD_CHECK(options.repeats >= 1, "--steps must be >= 1");
  const MpiLink link = measure_link(comm);
  nlohmann::json j;
  j["world"] = W;
  j["rank"] = comm.rank();  // only rank 0 prints
  j["link"] = {{"p2p_latency_us", link.p2p_latency_s * 1e6},
               {"p2p_gb_s", link.p2p_bytes_s / 1e9},
               {"bucket_latency_us", link.bucket_latency_s * 1e6},
               {"sum_gb_s", link.sum_bytes_s / 1e9}};
  nlohmann::json rows = nlohmann::json::array();
  for (int64_t n : options.elements) {
    std::vector<float> grads(static_cast<size_t>(n), 1.f);
    for (double mb : options.bucket_mb) {
      const int64_t bucket = dist::bucket_elements_for_mib(mb);
      const double measured = time_reduction(comm, grads, bucket, options.repeats);
      const double predicted = mpi_reduce_s(n, bucket, W, link);
      rows.push_back({{"collective", "reduce"}, {"elements", n}, {"bucket_mb", mb},
                      {"buckets", dist::plan_buckets(n, bucket).size()}, {"measured_ms", measured * 1e3},
                      {"predicted_ms", predicted * 1e3}, {"predicted_over_measured", predicted / measured}});
    }
    std::vector<double> times;
    for (int64_t i = 0; i <= options.repeats; ++i) {
      comm.barrier();
      const auto t = Clock::now();
      comm.all_gather(grads.data(), n);
      const double s = slowest(seconds_since(t));
      if (i > 0) times.push_back(s);
    }
    const double measured = median(times), predicted = mpi_all_gather_s(n, W, link);
    rows.push_back({{"collective", "all_gather"}, {"elements", n}, {"measured_ms", measured * 1e3},
                    {"predicted_ms", predicted * 1e3}, {"predicted_over_measured", predicted / measured}});
  }
  j["rows"] = rows;
  return j;
}
#else
nlohmann::json run_collective_bench(const CollectiveBenchOptions&) {
  fail("--collectives needs a build with MPI (install libopenmpi-dev and re-run cmake)");
}
#endif

std::string format_collective_report(const nlohmann::json& j) {
  const nlohmann::json& link = j["link"];
  std::ostringstream o;
  char line[512];
  std::snprintf(line, sizeof line,
                "MPI collectives on %d ranks: point-to-point %.1f us, %.2f GB/s; empty bucket %.1f us; "
                "owner's sum %.2f GB/s\n",
                j["world"].get<int>(), link["p2p_latency_us"].get<double>(), link["p2p_gb_s"].get<double>(),
                link["bucket_latency_us"].get<double>(), link["sum_gb_s"].get<double>());
  o << line << "  collective   elements  bucket MiB  buckets  measured ms  predicted ms  predicted/measured\n";
  for (const nlohmann::json& r : j["rows"]) {
    const bool reduce = r["collective"] == "reduce";
    std::snprintf(line, sizeof line, "  %-10s %10lld  %10s  %7s  %11.2f  %12.2f  %18.2f\n",
                  r["collective"].get<std::string>().c_str(), r["elements"].get<long long>(),
                  reduce ? std::to_string(r["bucket_mb"].get<double>()).substr(0, 5).c_str() : "-",
                  reduce ? std::to_string(r["buckets"].get<long long>()).c_str() : "-",
                  r["measured_ms"].get<double>(), r["predicted_ms"].get<double>(),
                  r["predicted_over_measured"].get<double>());
    o << line;
  }
  return o.str();
}

}  // namespace kdtrain::bench
