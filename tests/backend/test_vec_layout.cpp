// The index arithmetic of the vectorised CUDA kernels (kernels/vec_layout.h), run
// on the host: the kernels call these same functions, so covering every element
// exactly once here, for odd sizes and misaligned pointers, proves the kernels'
// loops do too (the arithmetic inside each visit is tested against the CPU ops on
// a GPU, tests/backend/test_cuda_*.cpp).
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "kernels/vec_layout.h"

using namespace kdtrain::cuda;

namespace {
// Simulates a grid of `threads` threads running flat_split_loop<VEC> over n.
template <int VEC>
std::vector<int> flat_visits(int64_t n, int64_t threads) {
  std::vector<int> seen(static_cast<size_t>(n), 0);
  for (int64_t tid = 0; tid < threads; ++tid)
    flat_split_loop<VEC>(
        n, tid, threads,
        [&](int64_t k) {
          REQUIRE(k % VEC == 0);  // packs start aligned to the pack
          REQUIRE(k + VEC <= n);  // and never run past the end
          for (int j = 0; j < VEC; ++j) ++seen[k + j];
        },
        [&](int64_t k) {
          REQUIRE(k >= n / VEC * VEC);  // scalars only in the tail
          ++seen[k];
        });
  return seen;
}

bool all_once(const std::vector<int>& seen) {
  for (int s : seen)
    if (s != 1) return false;
  return true;
}
}  // namespace

TEST_CASE("flat_split_loop visits every element once: packs then a scalar tail", "[vec_layout]") {
  for (int64_t n : {0, 1, 7, 8, 9, 33, 260, 1025, 70001}) {
    for (int64_t threads : {1, 3, 32, 256, 1000}) {
      INFO("n=" << n << " threads=" << threads);
      CHECK(all_once(flat_visits<8>(n, threads)));
      CHECK(all_once(flat_visits<4>(n, threads)));
      CHECK(all_once(flat_visits<1>(n, threads)));
    }
  }
}

TEST_CASE("row_pack_loop covers a (rows, cols) tensor once with a capped grid", "[vec_layout]") {
  struct Shape {
    int64_t rows;
    int cols;
  };
  for (Shape s : {Shape{1, 8}, Shape{33, 24}, Shape{1025, 16}, Shape{3, 8192}}) {
    for (int64_t grid_rows : {int64_t(1), int64_t(5), s.rows}) {
      for (int grid_cols : {1, 2, 7}) {
        INFO("rows=" << s.rows << " cols=" << s.cols << " grid " << grid_rows << "x" << grid_cols);
        constexpr int VEC = 8;
        std::vector<int> seen(static_cast<size_t>(s.rows * s.cols), 0);
        for (int64_t by = 0; by < grid_rows; ++by)
          for (int bx = 0; bx < grid_cols; ++bx)
            row_pack_loop<VEC>(s.rows, by, grid_rows, s.cols / VEC, bx, grid_cols,
                               [&](int64_t r, int c) {
                                 REQUIRE(c % VEC == 0);
                                 for (int j = 0; j < VEC; ++j) ++seen[r * s.cols + c + j];
                               });
        CHECK(all_once(seen));
      }
    }
  }
}

TEST_CASE("rope_item maps work items to (head, offset) one to one", "[vec_layout]") {
  for (int half : {3, 8, 32, 64}) {
    for (int n_rot : {1, 10, 40}) {
      for (int vec : {1, 8}) {
        if (half % vec != 0) continue;
        INFO("half=" << half << " n_rot=" << n_rot << " vec=" << vec);
        std::vector<int> seen(static_cast<size_t>(n_rot * half), 0);
        const int items = n_rot * (half / vec);
        for (int j = 0; j < items; ++j) {
          const RopeItem it = vec == 8 ? rope_item<8>(j, half) : rope_item<1>(j, half);
          REQUIRE(it.head >= 0);
          REQUIRE(it.head < n_rot);
          REQUIRE(it.offset % vec == 0);
          for (int k = 0; k < vec; ++k) ++seen[it.head * half + it.offset + k];
        }
        CHECK(all_once(seen));
      }
    }
  }
}

TEST_CASE("widest_pack: 16 bytes when sizes and addresses allow, narrower otherwise",
          "[vec_layout]") {
  alignas(256) static uint16_t bf[1024];
  alignas(256) static float f32[1024];
  CHECK(widest_pack(2048, bf) == 8);
  CHECK(widest_pack(0, bf) == 8);            // flat loops: no divisibility needed
  CHECK(widest_pack(2050, bf) == 2);         // 2050 = 2 * 1025
  CHECK(widest_pack(33, bf) == 1);
  CHECK(widest_pack(2048, bf + 1) == 1);     // 2-byte aligned view
  CHECK(widest_pack(2048, bf + 4) == 4);     // 8-byte aligned view
  CHECK(widest_pack(0, bf, bf + 2) == 2);    // the least aligned pointer decides
  CHECK(widest_pack(2048, f32) == 4);        // fp32 alone: 4 per 16 bytes
  CHECK(widest_pack(0, bf, f32) == 8);       // mixed: 8 bf16 = 16 B, 8 fp32 = 2 x 16 B
  CHECK(widest_pack(0, bf, f32 + 2) == 2);   // fp32 8-byte aligned: packs of 2
  CHECK(pack_alignment(8, 4) == 16);
  CHECK(pack_alignment(2, 2) == 4);
}

TEST_CASE("row_chunks depend on N alone and cover the rows", "[vec_layout]") {
  for (int64_t N : {1, 15, 16, 17, 33, 1025, 16384, 100000}) {
    const RowChunks rc = row_chunks(N, 256, 32);
    INFO("N=" << N);
    CHECK(rc.rows_per_chunk >= 32);
    CHECK(rc.chunks <= 256);
    CHECK(rc.chunks * rc.rows_per_chunk >= N);
    CHECK((rc.chunks - 1) * rc.rows_per_chunk < N);
  }
  CHECK(row_chunks(0, 256, 32).chunks == 0);
}
