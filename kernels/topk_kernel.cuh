// Each row's top K of bf16 teacher logits, their log-probabilities and the log of
// the remaining mass (topk_log_probs of src/backend/backend.h; the reference is
// src/backend/cpu/cpu_topk.cpp): the kernel body, written against
// kernels/tc/primitives.cuh so it runs on the GPU (topk.cu) and in the host SIMT
// emulator (tests).
//
// One block of kTopkThreads per row. Every logit gets a 64-bit key: its bf16 bits
// mapped to an unsigned order (-0 as +0) in the high half, 0xffffffff - id in the
// low half, so keys are distinct and the larger key is the larger logit, equal
// logits the lower id. Passes over the row (it stays in L2):
//   1. NaN / +inf check and the row max m;     2. sum of exp(z - m);
//   3. a 256-bin histogram of the keys' top byte, 4. of the next byte within the
//      chosen bin: the K-th largest logit value t (radix select), how many are
//      above it and how many equal it;
//   5. selection in id order: every logit above t and the lowest-id logits equal to
//      t (a block scan of the "equal" flags, only when some equal ones are left
//      out), into a shared candidate list; the others add exp(z - m) to the tail.
// The K candidates are sorted by a bitonic network in shared memory and written.
// Sums are per thread in id order, then a fixed tree: the same bits every run.
// Histogram counts are integers, so their atomics are order-independent.
#pragma once
#include <cstdint>

#include "kernels/tc/primitives.cuh"
#include "kernels/tc/sync.cuh"

#if !defined(__CUDACC__)
#include <cmath>
#endif

namespace kdtrain::topk {

constexpr int kTopkThreads = 256;
constexpr int kTopkWarps = kTopkThreads / tc::kWarpSize;
// The K candidates are sorted in shared memory, padded to a power of two: 16 KiB.
constexpr int64_t kTopkMaxK = 2048;

struct TopkParams {
  int64_t n = 0, V = 0, K = 0;
  const uint16_t* logits = nullptr;  // (n, V) bf16 bits
  int32_t* ids = nullptr;            // (n, K)
  float* logp = nullptr;             // (n, K)
  float* log_tail = nullptr;         // (n)
};

TC_HOST_DEVICE int64_t padded_k(int64_t K) {
  int64_t p = 1;
  while (p < K) p *= 2;
  return p;
}

// Shared memory of one block: the candidates, the histogram, the reduction slots.
struct TopkShared {
  uint64_t* cand;  // (padded_k(K))
  int* hist;       // (256)
  float* red;      // (kTopkWarps)
  int* ired;       // (kTopkWarps)
  int* misc;       // (4): candidate count, chosen bin, keys above the bin, keys in it
};

TC_HOST_DEVICE size_t topk_shared_bytes(int64_t K) {
  return static_cast<size_t>(padded_k(K)) * 8 + 256 * 4 + kTopkWarps * 8 + 4 * 4;
}

namespace detail {

TC_DEVICE float exp_f(float x) {
#if defined(__CUDACC__)
  return expf(x);
#else
  return std::exp(x);
#endif
}

TC_DEVICE float log_f(float x) {
#if defined(__CUDACC__)
  return logf(x);
#else
  return std::log(x);
#endif
}

TC_DEVICE float quiet_nan() { return tc::bits_to_float(0x7fc00000u); }
TC_DEVICE float neg_inf() { return tc::bits_to_float(0xff800000u); }

// bf16 bits -> an unsigned 16-bit order: larger key, larger value; -0 as +0.
TC_DEVICE uint32_t order_key(uint16_t h) {
  if (h == 0x8000u) h = 0;
  return (h & 0x8000u) ? (~h & 0xffffu) : (h | 0x8000u);
}

TC_DEVICE uint64_t candidate(uint32_t key, int64_t id) {
  return (static_cast<uint64_t>(key) << 32) | (0xffffffffull - static_cast<uint64_t>(id));
}

TC_DEVICE int64_t candidate_id(uint64_t c) { return static_cast<int64_t>(0xffffffffull - (c & 0xffffffffull)); }

// Every thread returns the same bits: per-warp trees, then the warps in order.
TC_DEVICE float block_sum(float v, float* red) {
  v = tc::warp_sum(v);
  tc::sync_block();
  if (tc::lane_id() == 0) red[tc::warp_id()] = v;
  tc::sync_block();
  float total = 0.f;
  for (int w = 0; w < kTopkWarps; ++w) total += red[w];
  return total;
}

TC_DEVICE float block_max(float v, float* red) {
  v = tc::warp_max(v);
  tc::sync_block();
  if (tc::lane_id() == 0) red[tc::warp_id()] = v;
  tc::sync_block();
  float m = red[0];
  for (int w = 1; w < kTopkWarps; ++w) m = fmaxf(m, red[w]);
  return m;
}

// Exclusive prefix of `flag` over the block's threads in thread order; *total gets the sum.
TC_DEVICE int block_exclusive_scan(int flag, int* ired, int* total) {
  const int lane = tc::lane_id();
  int inclusive = flag;
  for (int d = 1; d < tc::kWarpSize; d *= 2) {
    const int up = static_cast<int>(tc::shfl_idx(static_cast<uint32_t>(inclusive), lane >= d ? lane - d : 0));
    if (lane >= d) inclusive += up;
  }
  tc::sync_block();
  if (lane == tc::kWarpSize - 1) ired[tc::warp_id()] = inclusive;
  tc::sync_block();
  int before = 0, sum = 0;
  for (int w = 0; w < kTopkWarps; ++w) {
    if (w < tc::warp_id()) before += ired[w];
    sum += ired[w];
  }
  *total = sum;
  return before + inclusive - flag;
}

// Thread 0 walks the 256 bins from the top: the bin holding the `need`-th largest
// key, and how many keys lie in higher bins. Every thread reads the answer.
TC_DEVICE void choose_bin(const TopkShared& sh, int64_t need) {
  if (tc::thread_idx().x == 0) {
    int64_t above = 0;
    int bin = 0;
    for (int b = 255; b >= 0; --b) {
      if (above + sh.hist[b] >= need) {
        bin = b;
        break;
      }
      above += sh.hist[b];
    }
    sh.misc[1] = bin;
    sh.misc[2] = static_cast<int>(above);
    sh.misc[3] = sh.hist[bin];
  }
  tc::sync_block();
}

TC_DEVICE void clear_hist(const TopkShared& sh) {
  tc::sync_block();
  for (int b = static_cast<int>(tc::thread_idx().x); b < 256; b += kTopkThreads) sh.hist[b] = 0;
  tc::sync_block();
}

TC_DEVICE void push_candidate(const TopkShared& sh, uint32_t key, int64_t id) {
  const int slot = tc::atomic_add(&sh.misc[0], 1);
  sh.cand[slot] = candidate(key, id);
}

// Descending bitonic sort of the padded candidate list (padding 0 sorts last).
TC_DEVICE void sort_candidates(const TopkShared& sh, int64_t Kp) {
  for (int64_t size = 2; size <= Kp; size *= 2)
    for (int64_t stride = size / 2; stride > 0; stride /= 2) {
      tc::sync_block();
      for (int64_t i = tc::thread_idx().x; i < Kp; i += kTopkThreads) {
        const int64_t j = i ^ stride;
        if (j <= i) continue;
        const uint64_t a = sh.cand[i], b = sh.cand[j];
        const bool descending = (i & size) == 0;
        if (descending ? a < b : a > b) {
          sh.cand[i] = b;
          sh.cand[j] = a;
        }
      }
    }
  tc::sync_block();
}

TC_DEVICE void write_bad_row(const TopkParams& p, int64_t r) {
  for (int64_t k = tc::thread_idx().x; k < p.K; k += kTopkThreads) {
    p.ids[r * p.K + k] = -1;
    p.logp[r * p.K + k] = quiet_nan();
  }
  if (tc::thread_idx().x == 0) p.log_tail[r] = quiet_nan();
}

}  // namespace detail

TC_DEVICE void topk_row(const TopkParams& p, unsigned char* smem) {
  using namespace detail;
  const int64_t r = tc::block_idx().x, V = p.V, K = p.K, Kp = padded_k(K);
  const int64_t tid = tc::thread_idx().x;
  const uint16_t* row = p.logits + r * V;
  TopkShared sh;
  sh.cand = reinterpret_cast<uint64_t*>(smem);
  sh.hist = reinterpret_cast<int*>(smem + Kp * 8);
  sh.red = reinterpret_cast<float*>(sh.hist + 256);
  sh.ired = reinterpret_cast<int*>(sh.red + kTopkWarps);
  sh.misc = sh.ired + kTopkWarps;

  // 1. no NaN or +inf, the max
  float mx = neg_inf(), bad = 0.f;
  for (int64_t j = tid; j < V; j += kTopkThreads) {
    const float x = tc::bf16_to_float(row[j]);
    if (x != x || x == -neg_inf()) bad = 1.f;
    mx = fmaxf(mx, x);
  }
  bad = block_max(bad, sh.red);
  mx = block_max(mx, sh.red);
  if (bad != 0.f || mx == neg_inf()) {
    write_bad_row(p, r);
    return;
  }
  // 2. the softmax denominator
  float sum = 0.f;
  for (int64_t j = tid; j < V; j += kTopkThreads) sum += exp_f(tc::bf16_to_float(row[j]) - mx);
  const float log_sum = log_f(block_sum(sum, sh.red));

  // 3.-4. radix select of the K-th largest value
  clear_hist(sh);
  for (int64_t j = tid; j < V; j += kTopkThreads) tc::atomic_add(&sh.hist[order_key(row[j]) >> 8], 1);
  tc::sync_block();
  choose_bin(sh, K);
  const uint32_t hi = static_cast<uint32_t>(sh.misc[1]);
  const int64_t above_hi = sh.misc[2];
  clear_hist(sh);
  for (int64_t j = tid; j < V; j += kTopkThreads) {
    const uint32_t key = order_key(row[j]);
    if ((key >> 8) == hi) tc::atomic_add(&sh.hist[key & 0xffu], 1);
  }
  tc::sync_block();
  choose_bin(sh, K - above_hi);
  const uint32_t t = (hi << 8) | static_cast<uint32_t>(sh.misc[1]);
  const int64_t need_eq = K - above_hi - sh.misc[2], count_eq = sh.misc[3];

  // 5. selection in id order
  for (int64_t i = tid; i < Kp; i += kTopkThreads) sh.cand[i] = 0;
  if (tid == 0) sh.misc[0] = 0;
  tc::sync_block();
  float tail = 0.f;
  if (need_eq == count_eq) {
    for (int64_t j = tid; j < V; j += kTopkThreads) {
      const uint32_t key = order_key(row[j]);
      if (key >= t) push_candidate(sh, key, j);
      else tail += exp_f(tc::bf16_to_float(row[j]) - mx);
    }
  } else {
    int64_t eq_before = 0;
    for (int64_t base = 0; base < V; base += kTopkThreads) {
      const int64_t j = base + tid;
      const bool valid = j < V;
      const uint32_t key = valid ? order_key(row[j]) : 0u;
      int total = 0;
      const int rank = block_exclusive_scan(valid && key == t ? 1 : 0, sh.ired, &total);
      if (valid) {
        if (key > t || (key == t && eq_before + rank < need_eq)) push_candidate(sh, key, j);
        else tail += exp_f(tc::bf16_to_float(row[j]) - mx);
      }
      eq_before += total;
    }
  }
  tail = block_sum(tail, sh.red);
  sort_candidates(sh, Kp);
  for (int64_t k = tid; k < K; k += kTopkThreads) {
    const int64_t id = candidate_id(sh.cand[k]);
    p.ids[r * K + k] = static_cast<int32_t>(id);
    p.logp[r * K + k] = (tc::bf16_to_float(row[id]) - mx) - log_sum;
  }
  if (tid == 0) p.log_tail[r] = tail > 0.f ? log_f(tail) - log_sum : neg_inf();
}

}  // namespace kdtrain::topk
