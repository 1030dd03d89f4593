// Register fragments of wgmma m64nNk16 with bf16 inputs and fp32 accumulators (PTX ISA
// 9.7.15.5.1), for the warpgroup's thread t = 32w + 4g + q (warp w, lane 4g + q). The
// emulator (kernels/tc/sim/simt_wgmma.cpp) places operands and results by these;
// tests/tc/cute/wgmma_desc_vs_cute.cpp checks them element by element against CuTe's
// CLayout_64xN and ALayout_64x16. Plain C++17.
#pragma once

namespace kdtrain::tc {

struct WgmmaCoord {
  int row = 0, col = 0;
};

// Accumulator register i (i < N/2) of thread t: element (row, col) of the 64 x N D.
constexpr WgmmaCoord wgmma_d_coord(int t, int i) {
  const int w = t / 32, g = (t % 32) / 4, q = t % 4;
  return WgmmaCoord{16 * w + g + 8 * ((i / 2) % 2), 8 * (i / 4) + 2 * q + i % 2};
}

// A element e (e < 8) of thread t, the low (e even) or high half of its register e / 2:
// element (row, col) of the 64 x 16 A (the mma.m16n8k16 A fragment of warp w's 16 rows).
constexpr WgmmaCoord wgmma_a_coord(int t, int e) {
  const int w = t / 32, g = (t % 32) / 4, q = t % 4, j = e / 2, h = e % 2;
  return WgmmaCoord{16 * w + g + 8 * (j % 2), 2 * q + h + 8 * (j / 2)};
}

}  // namespace kdtrain::tc
