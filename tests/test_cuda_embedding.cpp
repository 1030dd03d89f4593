
#ifdef KDTRAIN_HAVE_CUDA_BACKEND
#include "embedding.cuh"

// The host half of the deterministic backward runs without a device.
TEST_CASE("embedding token buckets group positions by id in order", "[cuda][embedding]") {
  const std::vector<int32_t> tokens = {4, 1, 4, 0, 4, 1};
  const cuda::TokenBuckets b = cuda::bucket_tokens(tokens.data(), 6, 5);
  CHECK(b.ids == std::vector<int32_t>{0, 1, 4});
  CHECK(b.offsets == std::vector<int32_t>{0, 1, 3, 6});
  CHECK(b.positions == std::vector<int32_t>{3, 1, 5, 0, 2, 4});
  CHECK_THROWS_WITH(cuda::bucket_tokens(tokens.data(), 6, 4), Catch::Contains("position 0"));
  const int32_t negative[] = {0, -1};
  CHECK_THROWS_WITH(cuda::bucket_tokens(negative, 2, 4), Catch::Contains("position 1"));
}
#endif
