// Device workspace of the fused attention backward: one carve-up shared by the size
// query (flash_attention_backward_workspace_bytes), the launcher, and the emulated tests
// that run the kernels on the host. Plain C++17. Every region starts 256-byte aligned.
//
// Regions (rows padded to T_pad = n_qt * Br, so the main kernel reads whole tiles):
//   ints    counters + semaphores, zeroed by one memset before the kernels:
//           [kTicket] ticket counter of the main kernel, [kSinkDone] blocks of the
//           preprocessing done (last-block dsinks reduction), then one semaphore per
//           (b, h, query tile, dq slice) (flash_backward_schedule.h)
//   lse2    (B, H, T_pad) fp32: lse * log2(e); +inf on padded rows, so P = 0 there
//   drow    (B, H, T_pad) fp32: D_i = dO'_i . (PV)_i; 0 on padded rows
//   alpha   (B, H, T_pad) fp32 [affine]: alpha_i; 0 on padded rows
//   sigma   (B, H, T_pad) fp32 [affine]: dO_i . S_i
//   rs_acc  (B, H, T_pad) fp32 [affine]: sum_j P_ij dPraw_ij, accumulated like dq
//   sink    (H, B, n_chunks) fp32 [sink]: per-chunk partial sums of dsinks
//   vsum    (B, T, Hkv, D) fp32 [affine]: S_i = sum_{j<=i} v_j (forward scan of v), read
//           by the preprocessing, then R_j = sum_{i>=j} u_i (reverse scan of u)
//   scan    (B, scan_chunks(T), Hkv * D) fp32 [affine]: the scans' chunk totals
//   dq_acc  (B, H, n_qt) tiles of Br x D fp32: dq accumulated over key tiles, in the
//           kernel's fragment order (flash_backward_kernel.cuh). Before the main
//           kernel it holds u_i = sum_h beta_ih dO_ih (B, T, Hkv, D) [affine], written
//           by the preprocessing and read by the reverse scan: the main kernel's first
//           contributor to every dq tile stores without reading, so nothing of u leaks.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/attention/flash_tiles.h"

namespace kdtrain::flash {

struct BwdWorkspace {
  static constexpr int kTicket = 0;
  static constexpr int kSinkDone = 1;
  static constexpr int kCounters = 64;  // ints before the semaphores (one 256-byte line)

  int64_t n_qt = 0, T_pad = 0, n_chunks = 0;  // query tiles, padded rows, preprocessing chunks
  int dq_slices = 0;                          // semaphores per (b, h, query tile)
  size_t ints = 0, lse2 = 0, drow = 0, alpha = 0, sigma = 0, rs_acc = 0, sink = 0, vsum = 0,
         scan = 0, dq_acc = 0;  // byte offsets
  size_t zeroed_bytes = 0;    // bytes from `ints` that must be zero before the launch
  size_t bytes = 0;           // total

  static constexpr size_t align(size_t n) { return (n + 255) / 256 * 256; }

  BwdWorkspace(int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t D, bool sink_on, bool affine_on,
               FlashTiles tiles, int slices, int row_chunk) {
    n_qt = (T + tiles.Br - 1) / tiles.Br;
    T_pad = n_qt * tiles.Br;
    n_chunks = (T_pad + row_chunk - 1) / row_chunk;
    dq_slices = slices;
    const size_t rows = static_cast<size_t>(B * H * T_pad) * sizeof(float);
    size_t at = 0;
    auto take = [&](size_t n) {
      const size_t off = at;
      at += align(n);
      return off;
    };
    ints = take((kCounters + static_cast<size_t>(B * H * n_qt * slices)) * sizeof(int));
    zeroed_bytes = at;
    lse2 = take(rows);
    drow = take(rows);
    alpha = affine_on ? take(rows) : at;
    sigma = affine_on ? take(rows) : at;
    rs_acc = affine_on ? take(rows) : at;
    sink = sink_on ? take(static_cast<size_t>(H * B * n_chunks) * sizeof(float)) : at;
    vsum = affine_on ? take(static_cast<size_t>(B * T * Hkv * D) * sizeof(float)) : at;
    const int64_t scan_chunks = (T + kScanChunkRows - 1) / kScanChunkRows;
    scan = affine_on ? take(static_cast<size_t>(B * scan_chunks * Hkv * D) * sizeof(float)) : at;
    dq_acc = take(rows * static_cast<size_t>(D));  // >= (B, T, Hkv, D) floats: holds u first
    bytes = at;
  }
};

}  // namespace kdtrain::flash
