// The loss chunk size, decided in one place (loss_chunk_tokens, src/model/loss.h):
// an explicit request wins (capped at N); auto is 1024 rows on host memory and, on
// a device, 8192 or 4096 rows when both logits buffers fit in the free memory,
// else the most multiple of 256 that fits (at least 256); never more than N.
#include <catch2/catch.hpp>

#include "model/loss.h"

using namespace kdtrain;

TEST_CASE("loss_chunk_tokens: explicit, host and device-sized chunks", "[loss]") {
  const int64_t V = 128256, bf16 = 2;
  const int64_t GiB = int64_t(1) << 30;
  CHECK(loss_chunk_tokens(512, 16384, V, bf16, 2, 70 * GiB) == 512);
  CHECK(loss_chunk_tokens(4096, 100, V, bf16, 2, -1) == 100);
  CHECK(loss_chunk_tokens(0, 16384, V, 4, 1, -1) == kHostChunk);
  CHECK(loss_chunk_tokens(0, 100, V, 4, 1, -1) == 100);
  // 8192 rows x 128256 x 2 bytes x 2 buffers = 3.9 GiB.
  CHECK(loss_chunk_tokens(0, 16384, V, bf16, 2, 70 * GiB) == 8192);
  CHECK(loss_chunk_tokens(0, 16384, V, bf16, 2, 3 * GiB) == 4096);
  // 1 GiB fits 2093 rows of two buffers: the most multiple of 256 is 2048.
  CHECK(loss_chunk_tokens(0, 16384, V, bf16, 2, 1 * GiB) == 2048);
  CHECK(loss_chunk_tokens(0, 16384, V, bf16, 2, 0) == 256);
  CHECK(loss_chunk_tokens(0, 3000, V, bf16, 1, 70 * GiB) == 3000);
}
