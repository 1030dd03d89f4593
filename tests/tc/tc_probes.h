// Probe kernels of every wrapper in kernels/tc/primitives.cuh, kernels/tc/sync.cuh and
// kernels/tc/named_barrier.cuh,
// written once against those wrappers. nvcc builds them for the GPU
// (tests/tc/cuda/tc_probes.cu); the host runs the same source in the SIMT emulator, whose
// semantics come from the PTX ISA (tests/tc/test_sim_simt.cpp). The GPU's outputs must equal
// the emulator's bit for bit (tests/tc/test_tc_primitives_cuda.cpp), which catches what no
// emulated test can: a wrong operand order or modifier inside a device-only asm wrapper
// (e.g. the two sources of cvt.rn.bf16x2.f32 swapped in pack_bf16x2).
//
// Every probe is one block of kProbeThreads threads reading `in` (kProbeWords 32-bit
// words, chosen by the caller) and writing `out` (kProbeWords words, every one written);
// `counter` is an int the sync probe counts on.
#pragma once
#include <cstdint>

#include "kernels/tc/named_barrier.cuh"
#include "kernels/tc/primitives.cuh"
#include "kernels/tc/sync.cuh"

namespace kdtrain::tcprobe {

constexpr int kProbeThreads = 64;  // two warps: the index probe sees warp 1 too
constexpr int kProbeWords = 1024;
constexpr int kProbeSmemBytes = 4096;

enum class Probe { scalars, approx, shuffles, mma, ldmatrix, cp_async, sync, indices, named_barrier, atomic_f32 };
constexpr Probe kProbes[] = {Probe::scalars,  Probe::approx, Probe::shuffles,      Probe::mma,
                             Probe::ldmatrix, Probe::cp_async, Probe::sync,        Probe::indices,
                             Probe::named_barrier, Probe::atomic_f32};
constexpr const char* probe_name(Probe p) {
  switch (p) {
    case Probe::scalars: return "bits, bf16 rounding and packing";
    case Probe::approx: return "exp2_approx, log2_approx";
    case Probe::shuffles: return "shuffles, quad/warp reductions, quad transpose, 16-byte global store";
    case Probe::mma: return "mma.sync m16n8k16 bf16";
    case Probe::ldmatrix: return "ldmatrix x1/x2/x4, plain and .trans";
    case Probe::cp_async: return "cp.async with zero-fill, commit, wait; copy16";
    case Probe::sync: return "atomic_add, release/acquire, cg loads and stores";
    case Probe::indices: return "thread, warp, lane and block indices";
    case Probe::named_barrier: return "named barriers: bar.arrive and bar.sync between two warps";
    case Probe::atomic_f32: return "atomic_add_f32 (small integers: exact in any order)";
  }
  return "?";
}

// out[32 * k + lane] for k = 0..: one result word per lane and wrapper.
TC_DEVICE void probe_scalars(const uint32_t* in, uint32_t* out, int lane) {
  const float x = tc::bits_to_float(in[lane]), y = tc::bits_to_float(in[32 + lane]);
  out[lane] = tc::float_to_bits(x);
  out[32 + lane] = tc::float_to_bf16(x);
  out[64 + lane] = tc::pack_bf16x2(x, y);
  out[96 + lane] = tc::float_to_bits(tc::bf16x2_lo(in[64 + lane]));
  out[128 + lane] = tc::float_to_bits(tc::bf16x2_hi(in[64 + lane]));
  out[160 + lane] = tc::float_to_bits(tc::bf16_to_float(static_cast<uint16_t>(in[64 + lane])));
}

TC_DEVICE void probe_approx(const uint32_t* in, uint32_t* out, int lane) {
  const float x = tc::bits_to_float(in[lane]);
  out[lane] = tc::float_to_bits(tc::exp2_approx(x));
  out[32 + lane] = tc::float_to_bits(tc::log2_approx(x < 0 ? -x : x));
}

TC_DEVICE void probe_shuffles(const uint32_t* in, uint32_t* out, int lane) {
  const uint32_t v = in[lane];
  const float f = tc::bits_to_float(in[32 + lane]);
  int k = 0;
  for (int m = 1; m < 32; m *= 2) out[32 * k++ + lane] = tc::shfl_xor(v, m);
  out[32 * k++ + lane] = tc::shfl_idx(v, (lane * 7 + 3) % 32);
  out[32 * k++ + lane] = tc::float_to_bits(tc::shfl_xor(f, 5));
  out[32 * k++ + lane] = tc::float_to_bits(tc::shfl_idx(f, 31 - lane));
  out[32 * k++ + lane] = tc::float_to_bits(tc::quad_max(f));
  out[32 * k++ + lane] = tc::float_to_bits(tc::quad_sum(f));
  out[32 * k++ + lane] = tc::float_to_bits(tc::warp_sum(f));
  out[32 * k++ + lane] = tc::float_to_bits(tc::warp_max(f));
  alignas(16) uint32_t x[4] = {in[lane], in[32 + lane], in[64 + lane], in[96 + lane]};
  tc::quad_transpose(x);
  tc::store_global_vec<4>(out + 32 * k + 4 * lane, x);  // the next 4 x 32 words, lane by lane
}

// a: in[4 lane ..], b: in[128 + 2 lane ..], c: in[192 + 4 lane ..]; the caller gives
// small-integer bf16 values, so every fp32 sum is exact in any order.
TC_DEVICE void probe_mma(const uint32_t* in, uint32_t* out, int lane) {
  const uint32_t a[4] = {in[4 * lane], in[4 * lane + 1], in[4 * lane + 2], in[4 * lane + 3]};
  const uint32_t b[2] = {in[128 + 2 * lane], in[128 + 2 * lane + 1]};
  const float c[4] = {tc::bits_to_float(in[192 + 4 * lane]), tc::bits_to_float(in[193 + 4 * lane]),
                      tc::bits_to_float(in[194 + 4 * lane]), tc::bits_to_float(in[195 + 4 * lane])};
  float d[4];
  tc::mma_bf16_16816(d, a, b, c);
  for (int e = 0; e < 4; ++e) out[4 * lane + e] = tc::float_to_bits(d[e]);
  float acc[4] = {c[0], c[1], c[2], c[3]};
  tc::mma_bf16_16816(acc, a, b);  // the accumulating overload
  tc::mma_bf16_16816(acc, a, b);
  for (int e = 0; e < 4; ++e) out[128 + 4 * lane + e] = tc::float_to_bits(acc[e]);
}

// Shared memory: 32 rows of 64 bf16 (128 bytes) from in[0..1023]; lane l addresses row
// (l * 5) % 32 at chunk (l % 8) (a permutation, so every matrix has distinct rows).
TC_DEVICE void probe_ldmatrix(const uint32_t* in, uint32_t* out, int lane, unsigned char* smem) {
  auto* s = reinterpret_cast<uint32_t*>(smem);
  for (int k = lane; k < kProbeWords; k += 32) s[k] = in[k];
  tc::sync_warp();
  const auto* row = reinterpret_cast<const uint16_t*>(smem) + ((lane * 5) % 32) * 64 + (lane % 8) * 8;
  uint32_t r1[1], r2[2], r4[4], t1[1], t2[2], t4[4];
  tc::ldmatrix<1>(r1, row);
  tc::ldmatrix<2>(r2, row);
  tc::ldmatrix<4>(r4, row);
  tc::ldmatrix<1, true>(t1, row);
  tc::ldmatrix<2, true>(t2, row);
  tc::ldmatrix<4, true>(t4, row);
  const uint32_t all[14] = {r1[0], r2[0], r2[1], r4[0], r4[1], r4[2], r4[3],
                            t1[0], t2[0], t2[1], t4[0], t4[1], t4[2], t4[3]};
  for (int k = 0; k < 14; ++k) out[32 * k + lane] = all[k];
}

// Each lane copies 16 bytes of `in` into shared memory (odd lanes zero-fill), in two
// commit groups; after the waits the block reads it back. copy16 moves it to `out`.
TC_DEVICE void probe_cp_async(const uint32_t* in, uint32_t* out, int lane, unsigned char* smem) {
  auto* s = reinterpret_cast<uint32_t*>(smem);
  for (int k = lane; k < 256; k += 32) s[k] = 0xdeadbeefu;
  tc::sync_warp();
  tc::cp_async_16(s + 4 * lane, in + 4 * lane, lane % 2 == 0);
  tc::cp_async_commit();
  tc::cp_async_16(s + 128 + 4 * lane, in + 128 + 4 * lane);
  tc::cp_async_commit();
  tc::cp_async_wait<1>();  // the first group has landed
  tc::cp_async_wait<0>();
  tc::sync_warp();
  const int src = (lane * 3) % 32;  // another lane's copy
  tc::copy16(out + 4 * lane, s + 4 * src);
  tc::copy16(out + 128 + 4 * lane, s + 128 + 4 * src);
}

// counter starts at 0. atomic_add hands out 0..31 in some order; out[lane] = the value
// lane got, sorted by the caller. Lane 0 then releases a flag that every lane acquires
// and waits for; fp32 words go through the cg loads and stores.
TC_DEVICE void probe_sync(const uint32_t* in, uint32_t* out, int lane, int* counter) {
  out[lane] = static_cast<uint32_t>(tc::atomic_add(counter, 1));
  tc::sync_warp();
  float v[4];
  tc::load_cg4(v, reinterpret_cast<const float*>(in) + 4 * lane);
  tc::store_cg4(reinterpret_cast<float*>(out) + 32 + 4 * lane, v);
  tc::store_cg(reinterpret_cast<float*>(out) + 160 + lane, tc::load_cg(reinterpret_cast<const float*>(in) + 128 + lane));
  tc::fence_gpu();
  tc::sync_warp();
  if (lane == 0) tc::store_release(counter + 1, 7);
  tc::sync_warp();
  tc::wait_equal(counter + 1, 7);
  out[192 + lane] = static_cast<uint32_t>(tc::load_acquire(counter + 1));
}

// Both warps. Warp 1 writes 32 words to shared memory and arrives at barrier 1 (bar.arrive,
// no wait); warp 0 waits there (bar.sync 64) and reads them, then writes 32 of its own;
// both meet at barrier 2 and warp 1 reads those. A wrapper with the wrong barrier id,
// count or instruction hangs or reads unwritten words.
TC_DEVICE void probe_named_barrier(const uint32_t* in, uint32_t* out, int lane, int warp, unsigned char* smem) {
  auto* s = reinterpret_cast<uint32_t*>(smem);
  if (warp == 1) {
    s[lane] = in[lane] ^ 0x5a5a5a5au;
    tc::named_barrier_arrive(1, kProbeThreads);
  } else {
    tc::named_barrier_sync(1, kProbeThreads);
    out[lane] = s[(lane * 7) % 32];
    s[32 + lane] = in[32 + lane] + 1u;
  }
  tc::named_barrier_sync(2, kProbeThreads);
  if (warp == 1) out[32 + lane] = s[32 + (lane * 5) % 32];
}

// Lanes 0..3 zero four fp32 sums in `out`; every lane then adds its small-integer value
// in[lane] to sum lane % 4 and in[32 + lane] to sum 4 + lane % 8 (exact in any order).
TC_DEVICE void probe_atomic_f32(const uint32_t* in, uint32_t* out, int lane) {
  float* sums = reinterpret_cast<float*>(out);
  if (lane < 12) tc::store_cg(sums + lane, 0.f);
  tc::fence_gpu();
  tc::sync_warp();
  tc::atomic_add_f32(sums + lane % 4, tc::bits_to_float(in[lane]));
  tc::atomic_add_f32(sums + 4 + lane % 8, tc::bits_to_float(in[32 + lane]));
}

TC_DEVICE void probe_indices(uint32_t* out) {
  const int t = static_cast<int>(tc::thread_idx().x);
  out[t] = static_cast<uint32_t>(tc::lane_id() | (tc::warp_id() << 8) | (tc::block_dim().x << 16));
  out[kProbeThreads + t] = tc::block_idx().x + 16 * tc::grid_dim().x;
}

// The body every probe launch runs (one block of kProbeThreads threads).
TC_DEVICE void run_probe(Probe p, const uint32_t* in, uint32_t* out, int* counter, unsigned char* smem) {
  const int lane = tc::lane_id();
  if (p == Probe::indices) return probe_indices(out);
  if (p == Probe::named_barrier) return probe_named_barrier(in, out, lane, tc::warp_id(), smem);
  if (tc::warp_id() != 0) return;  // the other probes are one-warp probes
  switch (p) {
    case Probe::scalars: return probe_scalars(in, out, lane);
    case Probe::approx: return probe_approx(in, out, lane);
    case Probe::shuffles: return probe_shuffles(in, out, lane);
    case Probe::mma: return probe_mma(in, out, lane);
    case Probe::ldmatrix: return probe_ldmatrix(in, out, lane, smem);
    case Probe::cp_async: return probe_cp_async(in, out, lane, smem);
    case Probe::sync: return probe_sync(in, out, lane, counter);
    case Probe::atomic_f32: return probe_atomic_f32(in, out, lane);
    default: return;
  }
}

}  // namespace kdtrain::tcprobe
