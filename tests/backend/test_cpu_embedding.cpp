// Embedding: forward gathers rows; backward scatters with repeated tokens, FD
// gradient, += semantics, identical bits with 1 and 2 threads.
#include <omp.h>

#include <catch2/catch.hpp>

#include "backend/cpu/cpu_ops.h"
#include "support/cpu_test_util.h"

using namespace kdtrain;
using namespace kdtrain::testutil;

namespace {
constexpr int64_t kN = 7, kC = 13, kV = 11;
const std::vector<int32_t> kTokens{3, 0, 10, 3, 5, 3, 10};
}  // namespace

TEST_CASE("embedding forward gathers rows", "[cpu][embedding]") {
  const auto wte = random_vec(kV * kC, 61);
  std::vector<double> out(kN * kC);
  cpu::embedding_forward(out.data(), kTokens.data(), wte.data(), kN, kC);
  for (int64_t n = 0; n < kN; ++n)
    for (int64_t c = 0; c < kC; ++c) CHECK(out[n * kC + c] == wte[kTokens[n] * kC + c]);
}

TEST_CASE("embedding backward: FD gradient with repeated tokens, accumulated", "[cpu][embedding]") {
  auto wte = random_vec(kV * kC, 62);
  const auto w = random_vec(kN * kC, 63);
  auto loss = [&] {
    std::vector<double> out(kN * kC);
    cpu::embedding_forward(out.data(), kTokens.data(), wte.data(), kN, kC);
    return weighted_sum(w, out.data(), out.size());
  };
  std::vector<double> dwte(wte.size(), 1.0);
  cpu::embedding_backward(dwte.data(), w.data(), kTokens.data(), kN, kC, kV);
  for (double& v : dwte) v -= 1.0;
  check_grad(dwte, numeric_grad(wte, loss), "wte");
}

TEST_CASE("embedding backward: identical bits with 1 and 2 OpenMP threads",
          "[cpu][embedding][determinism]") {
  const int64_t N = 300, C = 200, V = 17;
  std::vector<int32_t> tokens(N);
  for (int64_t n = 0; n < N; ++n) tokens[n] = static_cast<int32_t>((n * 7) % V);
  const auto dout = to_float(random_vec(N * C, 64));
  std::vector<float> dwte[2];
  const int saved = omp_get_max_threads();
  for (int run = 0; run < 2; ++run) {
    omp_set_num_threads(run + 1);
    dwte[run].assign(V * C, 0.f);
    cpu::embedding_backward(dwte[run].data(), dout.data(), tokens.data(), N, C, V);
  }
  omp_set_num_threads(saved);
  CHECK(dwte[0] == dwte[1]);
}
