// CudaBackend methods: argument translation (void* -> bf16*, enums -> kernel
// flags) and the memory plumbing; the numerics live in the per-op launchers.
#include <algorithm>
#include <cstring>

#include "kernels/add.cuh"
#include "kernels/alpha_activation.cuh"
#include "backend/op_checks.h"
#include "kernels/column_sum.cuh"
#include "kernels/convert.cuh"
#include "backend/cuda/cuda_backend.cuh"
#include "kernels/cuda_check.cuh"
#include "kernels/loss.cuh"
#include "kernels/optim.cuh"
#include "kernels/rmsnorm.cuh"
#include "kernels/rope.cuh"
#include "kernels/sparse_kd_loss.cuh"
#include "kernels/topk.cuh"
#include "kernels/kernel_timer.cuh"
#include "kernels/sigmoid_gate.cuh"
#include "kernels/swiglu.cuh"

namespace kdtrain {
namespace {
using cuda::bf16;
constexpr size_t kBlasWorkspaceBytes = size_t(32) << 20;  // cuBLASLt's suggestion for Hopper

bf16* BF(void* p) { return static_cast<bf16*>(p); }
const bf16* BF(const void* p) { return static_cast<const bf16*>(p); }

}  // namespace

CudaBackend::CudaBackend(AttentionForward attention_forward, AttentionBackward attention_backward)
    : kernels_{cuda::flash_forward_kernel_here(attention_forward),
               cuda::flash_backward_kernel_here(attention_backward)} {
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  blas_ = cuda::blas_create(kBlasWorkspaceBytes);
  memory_.on_alloc(blas_.workspace, blas_.workspace_bytes);
  sample_device_memory();
  CUDA_CHECK(cudaHostAlloc(&staging_, 2 * kStagingHalfBytes, cudaHostAllocDefault));
  for (cudaEvent_t& e : staging_done_)
    CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
}

CudaBackend::~CudaBackend() {
  // Destructors must not throw: errors here are ignored.
  cudaStreamSynchronize(stream_);
  if (scratch_) cudaFree(scratch_);
  if (buckets_) cudaFree(buckets_);
  if (segments_) cudaFree(segments_);
  for (cudaEvent_t e : staging_done_)
    if (e) cudaEventDestroy(e);
  if (staging_) cudaFreeHost(staging_);
  cuda::blas_destroy(blas_);
  cudaStreamDestroy(stream_);
}

void CudaBackend::sample_device_memory() {
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) return;
  device_total_ = static_cast<int64_t>(total_bytes);
  device_used_peak_ = std::max(device_used_peak_, static_cast<int64_t>(total_bytes - free_bytes));
}

void* CudaBackend::device_malloc(size_t bytes) {
  ++counters_.allocs;
  void* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, bytes));  // aligned to at least 256 bytes
  memory_.on_alloc(p, bytes);
  sample_device_memory();
  return p;
}

void CudaBackend::device_free(void* ptr) {
  if (ptr == nullptr) return;
  memory_.on_release(ptr);
  CUDA_CHECK(cudaFree(ptr));
}

MemoryStats CudaBackend::memory_stats() const {
  MemoryStats m;
  m.current_bytes = memory_.current_bytes();
  m.peak_bytes = memory_.peak_bytes();
  m.device_used_peak_bytes = device_used_peak_;
  m.device_total_bytes = device_total_;
  return m;
}

void CudaBackend::wait_for_stream() {
  ++counters_.host_waits;
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void* CudaBackend::scratch(size_t bytes) {
  if (bytes <= scratch_bytes_) return scratch_;
  // Earlier ops on the stream may still read the old buffer.
  wait_for_stream();
  // Exactly what is asked, rounded up to 2 MiB: doubling overshot to ~0.5 GiB for the
  // attention backward at T 4096; the sizes of a training step repeat, so it grows rarely.
  const size_t grown = (bytes + (size_t{2} << 20) - 1) / (size_t{2} << 20) * (size_t{2} << 20);
  device_free(scratch_);
  scratch_ = nullptr;
  scratch_bytes_ = 0;
  scratch_ = device_malloc(grown);
  scratch_bytes_ = grown;
  return scratch_;
}

void* CudaBackend::alloc(size_t bytes) {
  const size_t rounded = std::max<size_t>(256, (bytes + 255) / 256 * 256);
  void* p = device_malloc(rounded);
  CUDA_CHECK(cudaMemsetAsync(p, 0, rounded, stream_));
  return p;
}
void CudaBackend::release(void* ptr) {
  if (ptr == nullptr) return;
  wait_for_stream();
  device_free(ptr);
}
void CudaBackend::zero(void* ptr, size_t bytes) {
  if (bytes > 0) CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes, stream_));
}
void CudaBackend::to_host(void* host, const void* device, size_t bytes) {
  ++counters_.to_host_calls;
  counters_.to_host_bytes += static_cast<int64_t>(bytes);
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream_));
  wait_for_stream();
}

// Small copies go through the pinned staging buffer without waiting for the device:
// the bytes are copied into the current half and the copy is queued on the stream.
// A half is refilled only after the copies issued from it have completed (its event),
// so the host waits only when the device lags a whole half behind. Larger copies
// wait for their transfer, as the host buffer may be reused on return.
void CudaBackend::to_device(void* device, const void* host, size_t bytes) {
  ++counters_.to_device_calls;
  counters_.to_device_bytes += static_cast<int64_t>(bytes);
  if (bytes == 0) return;
  if (bytes > kStagingHalfBytes) {
    CUDA_CHECK(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream_));
    wait_for_stream();
    return;
  }
  if (staging_used_ + bytes > kStagingHalfBytes) {
    CUDA_CHECK(cudaEventRecord(staging_done_[staging_side_], stream_));
    staging_side_ ^= 1;
    const cudaError_t ready = cudaEventQuery(staging_done_[staging_side_]);
    if (ready == cudaErrorNotReady) {
      (void)cudaGetLastError();  // "not ready" is a status, not an error to keep
      ++counters_.host_waits;
      CUDA_CHECK(cudaEventSynchronize(staging_done_[staging_side_]));
    } else {
      CUDA_CHECK(ready);
    }
    staging_used_ = 0;
  }
  char* slot = staging_ + staging_side_ * kStagingHalfBytes + staging_used_;
  std::memcpy(slot, host, bytes);
  CUDA_CHECK(cudaMemcpyAsync(device, slot, bytes, cudaMemcpyHostToDevice, stream_));
  staging_used_ += (bytes + 255) / 256 * 256;
}
void CudaBackend::copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0 || dst == src) return;
  const char* d = static_cast<const char*>(dst);
  const char* s = static_cast<const char*>(src);
  if (d < s + bytes && s < d + bytes) {
    // Overlapping ranges (memmove semantics, as the CPU backend): cudaMemcpy's
    // result is undefined there, so go through scratch.
    void* tmp = scratch(bytes);
    CUDA_CHECK(cudaMemcpyAsync(tmp, src, bytes, cudaMemcpyDeviceToDevice, stream_));
    CUDA_CHECK(cudaMemcpyAsync(dst, tmp, bytes, cudaMemcpyDeviceToDevice, stream_));
    return;
  }
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
}
void CudaBackend::synchronize() { wait_for_stream(); }
int64_t CudaBackend::free_device_bytes() {
  size_t free = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return static_cast<int64_t>(free);
}
void CudaBackend::convert_from_f32(void* dst, const float* src, int64_t n) {
  cuda::convert_f32_to_bf16(BF(dst), src, n, stream_);
}
void CudaBackend::convert_to_f32(float* dst, const void* src, int64_t n) {
  cuda::convert_bf16_to_f32(dst, BF(src), n, stream_);
}

void CudaBackend::embedding_forward(void* out, const int32_t* tokens, const void* wte, int64_t N,
                                    int64_t C) {
  op_checks::embedding_forward(out, tokens, wte, N, C);
  cuda::embedding_forward(BF(out), tokens, BF(wte), N, C, stream_);
}

void CudaBackend::embedding_backward(float* dwte, const void* dout, const int32_t* tokens,
                                     int64_t N, int64_t C, int64_t V) {
  op_checks::embedding_backward(dwte, dout, tokens, N, C, V);
  if (N == 0) return;
  const cuda::TokenBuckets b = cuda::bucket_tokens(tokens, N, V);  // tokens: host memory
  const size_t U = b.ids.size();
  const size_t need = U + (U + 1) + static_cast<size_t>(N);
  if (need > buckets_capacity_) {
    wait_for_stream();
    device_free(buckets_);
    buckets_ = nullptr;
    buckets_ = static_cast<int32_t*>(device_malloc(need * sizeof(int32_t)));
    buckets_capacity_ = need;
  }
  int32_t* ids = buckets_;
  int32_t* offsets = ids + U;
  int32_t* positions = offsets + U + 1;
  to_device(ids, b.ids.data(), U * sizeof(int32_t));
  to_device(offsets, b.offsets.data(), (U + 1) * sizeof(int32_t));
  to_device(positions, b.positions.data(), static_cast<size_t>(N) * sizeof(int32_t));
  cuda::embedding_backward(dwte, BF(dout), ids, offsets, positions, static_cast<int64_t>(U), C,
                           stream_);
}

void CudaBackend::rmsnorm_forward(void* out, float* rstd, const void* inp, const void* weight,
                                  int64_t N, int64_t C, float eps) {
  op_checks::rmsnorm_forward(out, rstd, inp, weight, N, C, eps);
  cuda::rmsnorm_forward(BF(out), rstd, BF(inp), BF(weight), N, C, eps, stream_);
}
void CudaBackend::add_rmsnorm_forward(void* sum_out, void* out, float* rstd, const void* a,
                                      const void* b, const void* weight, int64_t N, int64_t C,
                                      float eps) {
  op_checks::add_rmsnorm_forward(sum_out, out, rstd, a, b, weight, N, C, eps);
  cuda::add_rmsnorm_forward(BF(sum_out), BF(out), rstd, BF(a), BF(b), BF(weight), N, C, eps,
                            stream_);
}
void CudaBackend::rmsnorm_backward(void* dinp, float* dweight, const void* dout, const void* inp,
                                   const void* weight, const float* rstd, int64_t N, int64_t C) {
  op_checks::rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C);
  void* s = scratch(cuda::rmsnorm_backward_scratch_bytes(N, C));
  cuda::rmsnorm_backward(BF(dinp), dweight, s, BF(dout), BF(inp), BF(weight), rstd, N, C, stream_);
}

void CudaBackend::matmul_forward(void* out, const void* inp, const void* weight, const void* bias,
                                 int64_t N, int64_t IC, int64_t OC) {
  op_checks::matmul_forward(out, inp, weight, N, IC, OC);
  cuda::timed_launch("matmul fwd", stream_,
                     [&] { cuda::matmul_forward(blas_, BF(out), BF(inp), BF(weight), BF(bias), N, IC, OC, stream_); });
}
void CudaBackend::matmul_backward(void* dinp, float* dweight, float* dbias, const void* dout,
                                  const void* inp, const void* weight, int64_t N, int64_t IC,
                                  int64_t OC, bool accumulate_dinp) {
  op_checks::matmul_backward(dout, inp, weight, N, IC, OC);
  void* s = scratch(cuda::matmul_backward_scratch_bytes(N, OC, dbias != nullptr));
  cuda::matmul_backward(blas_, BF(dinp), dweight, dbias, BF(dout), BF(inp), BF(weight), N, IC, OC,
                        accumulate_dinp, s, stream_);
}

void CudaBackend::rope_forward(void* x, const float* cos, const float* sin, int64_t B, int64_t T,
                               int64_t n_heads, int64_t n_rot, int64_t D) {
  op_checks::rope("rope_forward", x, cos, sin, B, T, n_heads, n_rot, D);
  cuda::rope_forward(BF(x), cos, sin, B, T, n_heads, n_rot, D, stream_);
}
void CudaBackend::rope_backward(void* dx, const float* cos, const float* sin, int64_t B,
                                int64_t T, int64_t n_heads, int64_t n_rot, int64_t D) {
  op_checks::rope("rope_backward", dx, cos, sin, B, T, n_heads, n_rot, D);
  cuda::rope_backward(BF(dx), cos, sin, B, T, n_heads, n_rot, D, stream_);
}

void CudaBackend::run_attention(const flash::AttentionParams& p, cuda::AttentionPass pass,
                                const AttentionShape& shape, AttentionFeatures features) {
  const cuda::AttentionPathChoice choice = cuda::attention_path(p);
  KD_CHECK(choice.path != cuda::AttentionPath::none, "attention B=", shape.B, " T=", shape.T, " H=", shape.H,
           " Hkv=", shape.Hkv, " D=", shape.D, ": no CUDA implementation: ", choice.reason);
  const size_t bytes = cuda::attention_workspace_bytes(p, pass, choice.path);
  void* workspace = bytes > 0 ? scratch(bytes) : nullptr;
  cuda::attention_run(p, pass, choice.path, kernels_, workspace, bytes, stream_);
  std::string reason = choice.reason;
  // Both kernels, on either pass: the log keeps one reason per shape, the last pass's.
  if (choice.path == cuda::AttentionPath::flash)
    reason += std::string("; forward kernel ") + cuda::to_string(kernels_.forward) + "; backward kernel " +
              cuda::to_string(kernels_.backward);
  paths_.record(shape, features, pass == cuda::AttentionPass::backward, cuda::to_string(choice.path), reason);
}
void CudaBackend::attention_forward(const AttentionForwardArgs& a) {
  op_checks::attention_forward(a);
  run_attention(cuda::attention_params(a), cuda::AttentionPass::forward, a.shape, a.features);
}
void CudaBackend::attention_backward(const AttentionBackwardArgs& a) {
  op_checks::attention_backward(a);
  run_attention(cuda::attention_params(a), cuda::AttentionPass::backward, a.shape, a.features);
}

void CudaBackend::alpha_activation_forward(void* alpha, const void* z, int64_t n,
                                           AlphaActivation act) {
  op_checks::elementwise("alpha_activation_forward", n, {alpha, z});
  cuda::alpha_activation_forward(BF(alpha), BF(z), n, act == AlphaActivation::sigmoid, stream_);
}
void CudaBackend::alpha_activation_backward(void* dz, const void* dalpha, const void* z,
                                            int64_t n, AlphaActivation act) {
  op_checks::elementwise("alpha_activation_backward", n, {dz, dalpha, z});
  cuda::alpha_activation_backward(BF(dz), BF(dalpha), BF(z), n, act == AlphaActivation::sigmoid,
                                  stream_);
}
void CudaBackend::column_sum_accumulate(float* sums, const void* x, int64_t N, int64_t H) {
  op_checks::column_sum(sums, x, N, H);
  void* s = scratch(cuda::column_sum_scratch_bytes(N, H));
  cuda::column_sum_accumulate(sums, BF(x), N, H, s, stream_);
}

void CudaBackend::sigmoid_gate_forward(void* out, const void* inp, const void* gate, int64_t n) {
  op_checks::elementwise("sigmoid_gate_forward", n, {out, inp, gate});
  cuda::timed_launch("fwd gate", stream_, [&] { cuda::sigmoid_gate_forward(BF(out), BF(inp), BF(gate), n, stream_); });
}
void CudaBackend::sigmoid_gate_backward(void* dinp, void* dgate, const void* dout,
                                        const void* inp, const void* gate, int64_t n) {
  op_checks::elementwise("sigmoid_gate_backward", n, {dinp, dgate, dout, inp, gate});
  cuda::timed_launch("bwd gate", stream_, [&] {
    cuda::sigmoid_gate_backward(BF(dinp), BF(dgate), BF(dout), BF(inp), BF(gate), n, stream_);
  });
}
void CudaBackend::swiglu_forward(void* out, const void* gate_up, int64_t N, int64_t F) {
  op_checks::swiglu("swiglu_forward", N, F, {out, gate_up});
  cuda::swiglu_forward(BF(out), BF(gate_up), N, F, stream_);
}
void CudaBackend::swiglu_backward(void* dgate_up, const void* dout, const void* gate_up,
                                  int64_t N, int64_t F) {
  op_checks::swiglu("swiglu_backward", N, F, {dgate_up, dout, gate_up});
  cuda::swiglu_backward(BF(dgate_up), BF(dout), BF(gate_up), N, F, stream_);
}
void CudaBackend::add(void* out, const void* a, const void* b, int64_t n) {
  op_checks::elementwise("add", n, {out, a, b});
  cuda::add(BF(out), BF(a), BF(b), n, stream_);
}
void CudaBackend::accumulate(void* dst, const void* src, int64_t n) {
  op_checks::elementwise("accumulate", n, {dst, src});
  cuda::accumulate(BF(dst), BF(src), n, stream_);
}

namespace {
cuda::KdKind kd_kind(KdLoss loss) {
  return loss == KdLoss::forward_kl   ? cuda::KdKind::forward_kl
         : loss == KdLoss::reverse_kl ? cuda::KdKind::reverse_kl
                                      : cuda::KdKind::soft_ce;
}

// The fields the dense and the sparse loss kernels share, copied from their
// Backend arguments (LossChunkArgs, SparseKdChunkArgs) under the same names.
template <typename Params, typename Args>
void set_shared_loss_fields(Params& p, const Args& a) {
  p.n = a.n;
  p.V = a.V;
  p.logits = BF(a.logits);
  p.targets = a.targets;
  p.ce = a.ce;
  p.kd = a.kd;
  p.soft_ce = a.soft_ce;
  p.kind = kd_kind(a.kd_loss);
  p.temperature = a.temperature;
  p.kd_weight = a.kd_weight;
  p.grad_scale = a.grad_scale;
  p.compute_grad = a.compute_grad;
}
}  // namespace

void CudaBackend::loss_chunk(const LossChunkArgs& a) {
  op_checks::loss_chunk(a);
  cuda::LossParams p;
  set_shared_loss_fields(p, a);
  p.teacher_logits = BF(a.teacher_logits);
  cuda::loss_chunk(p, stream_);
}

void CudaBackend::sparse_kd_loss_chunk(const SparseKdChunkArgs& a) {
  op_checks::sparse_kd_loss_chunk(a);
  cuda::SparseKdParams p;
  set_shared_loss_fields(p, a);
  p.K = a.K;
  p.ids = a.ids;
  p.logp = a.logp;
  p.log_tail = a.log_tail;
  p.bucket = a.tail == CacheTail::bucket;
  cuda::sparse_kd_loss_chunk(p, stream_);
}

void CudaBackend::topk_log_probs(const TopkArgs& a) {
  op_checks::topk_log_probs(a);
  topk::TopkParams p;
  p.n = a.n;
  p.V = a.V;
  p.K = a.K;
  p.logits = static_cast<const uint16_t*>(a.logits);
  p.ids = a.ids;
  p.logp = a.logp;
  p.log_tail = a.log_tail;
  cuda::timed_launch("topk", stream_, [&] { cuda::topk_log_probs(p, stream_); });
}

double CudaBackend::sum_squares(const float* x, int64_t n) {
  op_checks::sum_squares(x, n);
  void* s = scratch(cuda::sum_squares_scratch_bytes(n));
  if (n > 0) ++counters_.host_waits;  // the sum comes back to the host
  return cuda::sum_squares(x, n, s, stream_);
}

void CudaBackend::adamw_update(const AdamWArgs& a) {
  op_checks::adamw(a);
  cuda::AdamWParams p;
  p.master = a.master;
  p.compute = a.compute == static_cast<void*>(a.master) ? nullptr : BF(a.compute);
  p.grad = a.grad;
  p.m = a.m;
  p.v = a.v;
  p.n = a.n;
  p.lr = a.lr;
  p.beta1 = a.beta1;
  p.beta2 = a.beta2;
  p.eps = a.eps;
  p.weight_decay = a.weight_decay;
  p.grad_scale = a.grad_scale;
  p.step = a.step;
  p.stochastic_rounding = stochastic_rounding_;
  // A different stream of random bits every step, reproducible from (seed, step).
  p.seed = sr_seed_ ^ static_cast<uint32_t>(static_cast<uint64_t>(a.step) * 2654435761u);
  if (a.segments == nullptr) {
    cuda::adamw_update(p, stream_);
    return;
  }
  // The segment table lives on the device and is uploaded again only when it changes
  // (an optimizer passes the same table every step).
  std::vector<cuda::AdamWSegment> table(static_cast<size_t>(a.num_segments));
  for (int64_t i = 0; i < a.num_segments; ++i)
    table[i] = {a.segments[i].begin, a.segments[i].end, a.segments[i].weight_decay};
  const bool same = table.size() == segments_host_.size() &&
                    std::equal(table.begin(), table.end(), segments_host_.begin(),
                               [](const cuda::AdamWSegment& x, const cuda::AdamWSegment& y) {
                                 return x.begin == y.begin && x.end == y.end &&
                                        x.weight_decay == y.weight_decay;
                               });
  if (!same) {
    if (table.size() > segments_capacity_) {
      wait_for_stream();
      device_free(segments_);
      segments_ = static_cast<cuda::AdamWSegment*>(
          device_malloc(table.size() * sizeof(cuda::AdamWSegment)));
      segments_capacity_ = table.size();
    }
    to_device(segments_, table.data(), table.size() * sizeof(cuda::AdamWSegment));
    segments_host_ = std::move(table);
  }
  if (a.num_segments == 0) return;
  cuda::adamw_update_segments(p, segments_, a.num_segments, a.segments[0].begin,
                              a.segments[a.num_segments - 1].end, stream_);
}

std::unique_ptr<Backend> make_cuda_backend(AttentionForward attention_forward, AttentionBackward attention_backward) {
  return std::make_unique<CudaBackend>(attention_forward, attention_backward);
}

}  // namespace kdtrain
