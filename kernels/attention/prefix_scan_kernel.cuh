// Deterministic chunked prefix (or suffix) sums over the rows of a strided matrix, per
// batch and column, fp32 output: the kernel bodies, written against primitives.cuh so
// they run on the GPU (prefix_scan.cu) and in the host SIMT emulator.
//
//   forward:  out[b][i][c] = sum_{r <= i} in[b][r][c]
//   reverse:  out[b][i][c] = sum_{r >= i} in[b][r][c]
//
// Two launches over the same grid (x: column groups of kScanThreads, y: chunks of
// kScanChunkRows rows, z: batches), one thread per (batch, chunk, column):
//   1. chunk_totals: the sum of the chunk's rows, in row order (reverse: descending);
//   2. chunk_apply: start from the totals of the chunks before it (reverse: after it),
//      added in scan order, then add the chunk's rows in scan order, writing each.
// Every output is the same fixed sequence of fp32 additions whatever the launch, so
// results are bit-reproducible; no atomics. The attention forward uses it for the affine
// term's sum_{j<=i} v_j, the backward's reverse mode for sum_{i>=j} of its weighted rows.
#pragma once
#include <cstdint>

#include "kernels/attention/flash_tiles.h"
#include "kernels/attention/params.h"
#include "kernels/tc/primitives.cuh"

namespace kdtrain::flash {

constexpr int kScanThreads = 128;

template <typename In>  // uint16_t (bf16 bits) or float
struct ScanArgs {
  const In* in = nullptr;
  int64_t batches = 0, rows = 0, cols = 0;
  int64_t in_row_stride = 0, in_batch_stride = 0;  // elements; columns are contiguous
  float* out = nullptr;          // (batches, rows, cols), contiguous
  float* chunk_sums = nullptr;   // (batches, scan_chunks(rows), cols) workspace
  bool reverse = false;
};

constexpr int64_t scan_chunks(int64_t rows) { return (rows + kScanChunkRows - 1) / kScanChunkRows; }

// The affine term's forward scan of a call's v (the forward and the backward both run it):
// a token's kv heads' v rows are the Hkv * D contiguous values at v_offset of its qkv row,
// so out[b][i][g*D + d] = sum_{j<=i} v_j[g][d].
inline ScanArgs<uint16_t> v_prefix_scan(const AttentionParams& p, float* out, float* chunk_sums) {
  ScanArgs<uint16_t> s;
  s.in = p.qkv + p.v_offset;
  s.batches = p.B;
  s.rows = p.T;
  s.cols = p.Hkv * p.D;
  s.in_row_stride = p.qkv_token;
  s.in_batch_stride = p.qkv_batch;
  s.out = out;
  s.chunk_sums = chunk_sums;
  return s;
}

namespace scan_detail {
TC_DEVICE float load(const float* p) { return *p; }
TC_DEVICE float load(const uint16_t* p) { return tc::bf16_to_float(*p); }
}  // namespace scan_detail

// A thread's column of one chunk, in scan order (reverse: the last row first): every load
// issued before the first sum or store, so a chunk costs one memory round trip, not one
// per row (a store between two loads would otherwise order the second after it).
struct ChunkColumn {
  float v[kScanChunkRows];
  int n = 0;      // rows in this chunk (the last chunk may be short)
  int64_t r0 = 0;  // its first row
};

template <typename In>
TC_DEVICE ChunkColumn load_chunk_column(const ScanArgs<In>& a, int64_t b, int64_t chunk, int64_t col) {
  ChunkColumn c;
  c.r0 = chunk * kScanChunkRows;
  c.n = static_cast<int>(a.rows - c.r0 < kScanChunkRows ? a.rows - c.r0 : kScanChunkRows);
  const In* src = a.in + b * a.in_batch_stride + c.r0 * a.in_row_stride + col;
  TC_UNROLL
  for (int k = 0; k < kScanChunkRows; ++k) {
    const int r = a.reverse ? c.n - 1 - k : k;
    c.v[k] = k < c.n ? scan_detail::load(src + r * a.in_row_stride) : 0.f;
  }
  return c;
}

template <typename In>
TC_DEVICE void scan_chunk_totals(const ScanArgs<In>& a) {
  const int64_t col = static_cast<int64_t>(tc::block_idx().x) * kScanThreads + tc::thread_idx().x;
  const int64_t chunk = tc::block_idx().y, b = tc::block_idx().z;
  if (col >= a.cols) return;
  const ChunkColumn c = load_chunk_column(a, b, chunk, col);
  float sum = 0.f;
  TC_UNROLL
  for (int k = 0; k < kScanChunkRows; ++k)
    if (k < c.n) sum += c.v[k];
  a.chunk_sums[(b * scan_chunks(a.rows) + chunk) * a.cols + col] = sum;
}

template <typename In>
TC_DEVICE void scan_chunk_apply(const ScanArgs<In>& a) {
  const int64_t col = static_cast<int64_t>(tc::block_idx().x) * kScanThreads + tc::thread_idx().x;
  const int64_t chunk = tc::block_idx().y, b = tc::block_idx().z, n_chunks = scan_chunks(a.rows);
  if (col >= a.cols) return;
  const ChunkColumn c = load_chunk_column(a, b, chunk, col);
  const float* totals = a.chunk_sums + b * n_chunks * a.cols + col;
  float run = 0.f;
  if (!a.reverse) {
    for (int64_t k = 0; k < chunk; ++k) run += totals[k * a.cols];
  } else {
    for (int64_t k = n_chunks - 1; k > chunk; --k) run += totals[k * a.cols];
  }
  float* dst = a.out + (b * a.rows + c.r0) * a.cols + col;
  TC_UNROLL
  for (int k = 0; k < kScanChunkRows; ++k) {
    if (k >= c.n) break;
    const int r = a.reverse ? c.n - 1 - k : k;
    run += c.v[k];
    dst[r * a.cols] = run;
  }
}

}  // namespace kdtrain::flash
