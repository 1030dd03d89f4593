// Every Backend op in one harness, as ggml's test-backend-ops: each case is
// written once against the Backend interface — it makes its inputs from its
// seed (bf16-exact, so every backend sees the same values), runs one op and
// names its outputs — and the harness runs it on the CPU backend (the fp32
// reference) and on every other backend of the build, then compares output by
// output: NMSE and max |err| within the output's bound, no NaN/inf, the guard
// after every output intact, and a rerun bit-identical (every op is
// deterministic). Without a CUDA device the CUDA runs print a visible SKIPPED
// (KDTRAIN_CUDA_TESTS_ON_CPU=1 runs them on the CPU backend to check the harness).
//
// Bounds, from the precision of the output on the tested backend:
//   act-dtype outputs (bf16 on CUDA, rounded once from fp32 accumulators):
//     NMSE < 5e-4, max |err| <= 2e-2 * max |ref|
//   fp32 outputs (statistics, parameter gradients, optimizer state, losses):
//     NMSE < 1e-8, max |err| <= 1e-4 * max(|ref|, 1)
// A case may loosen one output with a reason (e.g. dsinks, a sum over T^2 terms).
//
// The enumeration test reads class Backend in src/backend/backend.h and fails
// when an op has no case here: an op cannot ship without a test on every backend.
// Adding an op's case is one entry in cases(): inputs, the call, the outputs.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/cached_teacher_loss.h"
#include "support/backend_ops_harness.h"
#include "support/test_cuda_util.h"

using namespace kdtrain;
using namespace kdtrain::cudatest;
using namespace kdtrain::opstest;

namespace {

// RoPE tables as the model builds them: cos/sin of t * theta^(-2i/D).
void rope_tables(int64_t T, int64_t D, std::vector<float>& cos, std::vector<float>& sin) {
  cos.resize(T * D / 2);
  sin.resize(T * D / 2);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < D / 2; ++i) {
      const double a = t * std::pow(10000.0, -2.0 * i / D);
      cos[t * D / 2 + i] = static_cast<float>(std::cos(a));
      sin[t * D / 2 + i] = static_cast<float>(std::sin(a));
    }
}

void add_attention_cases(std::vector<OpCase>& cases) {
  struct Shape {
    int64_t B, T, H, Hkv, D;
  };
  for (const AttentionVariantInfo& info : kAttentionVariants) {
    for (const Shape s : {Shape{2, 33, 6, 2, 16}, Shape{1, 7, 4, 4, 64}}) {
      const AttentionFeatures f = info.features;
      const std::string label = std::string(info.name) + " B=" + std::to_string(s.B) +
                                " T=" + std::to_string(s.T) + " H=" + std::to_string(s.H) + "/" +
                                std::to_string(s.Hkv) + " D=" + std::to_string(s.D);
      const int64_t N = s.B * s.T, W = (s.H + 2 * s.Hkv) * s.D;
      auto forward = [=](OpRun& r) {
        AttentionForwardArgs a;
        a.shape = AttentionShape{s.B, s.T, s.H, s.Hkv, s.D};
        a.features = info.features;
        a.scale = 1.f / std::sqrt(static_cast<float>(s.D));
        a.qkv = r.act(values(N * W, 11));
        a.sinks = f.sink ? r.f32(random_values(s.H, 12, 0.f, 1.f, false)) : nullptr;
        std::vector<float> alpha = values(N * s.H, 13, 3.f);
        for (float& x : alpha) x = round_bf16(1.f / (1.f + std::exp(-x)));
        std::vector<float> alpha_ma(s.H);
        for (int64_t h = 0; h < s.H; ++h) alpha_ma[h] = 0.3f + 0.4f * static_cast<float>(h) / s.H;
        a.alpha = f.affine ? r.act(alpha) : nullptr;
        a.alpha_ma = f.affine ? r.f32(alpha_ma) : nullptr;
        a.out = r.out_act("out", N * s.H * s.D);
        a.lse = r.out_f32("lse", s.B * s.H * s.T);
        r.be().attention_forward(a);
        return a;
      };
      cases.push_back({"attention_forward", label, [=](OpRun& r) { forward(r); }});
      cases.push_back({"attention_backward", label, [=](OpRun& r) {
                         AttentionBackwardArgs a = attention_backward_args(forward(r));
                         a.dout = r.act(values(N * s.H * s.D, 14));
                         a.dqkv = r.out_act("dqkv", N * W);
                         // A sum over B*T*T terms into fp32: the order of the sum shows.
                         if (f.sink)
                           a.dsinks = r.out_f32("dsinks", s.H, random_values(s.H, 15, 0.f, 0.1f, false),
                                                Bound{1e-6, 1e-3, 1e-6});
                         if (f.affine) a.dalpha = r.out_act("dalpha", N * s.H);
                         r.be().attention_backward(a);
                       }});
    }
  }
}

// The fields the dense and the sparse loss op share (LossChunkArgs, SparseKdChunkArgs),
// filled alike so their cases differ only in how the teacher is given.
template <typename LossArgs>
void fill_shared_loss_args(OpRun& r, LossArgs& a, int64_t n, int64_t V, KdLoss kd_loss) {
  std::vector<int32_t> targets = ids(n, 21, V);
  targets[n / 2] = -1;  // a masked row: no CE, KD still counts
  a.n = n;
  a.V = V;
  a.logits = r.out_act("dlogits", n * V, values(n * V, 22, 3.f));
  a.targets = r.i32(targets);
  a.ce = r.out_f32("ce", n);
  a.kd = r.out_f32("kd", n);
  a.kd_loss = kd_loss;
  a.temperature = 2.f;
  a.kd_weight = 0.6f;
  a.grad_scale = 0.25f;
}

void add_loss_cases(std::vector<OpCase>& cases) {
  for (const KdLoss kd_loss : {KdLoss::forward_kl, KdLoss::reverse_kl, KdLoss::soft_ce}) {
    for (const bool teacher : {false, true}) {
      if (!teacher && kd_loss != KdLoss::forward_kl) continue;
      for (const int64_t V : {33, 1025}) {
        const int64_t n = 9;
        cases.push_back({"loss_chunk",
                         std::string(to_string(kd_loss)) + (teacher ? " teacher" : " no teacher") + " V=" + std::to_string(V),
                         [=](OpRun& r) {
                           LossChunkArgs a;
                           fill_shared_loss_args(r, a, n, V, kd_loss);
                           a.teacher_logits = teacher ? r.act(values(n * V, 23, 3.f)) : nullptr;
                           r.be().loss_chunk(a);
                         }});
      }
    }
  }
}

// A cached sparse teacher of n rows: K distinct ids per row (the first row
// holds the row's target among them), their log-probabilities (a softmax of
// random logits restricted to the K ids, scaled to leave `tail` of the mass out)
// and log(tail). K = V leaves no tail.
struct SparseRows {
  std::vector<int32_t> ids;
  std::vector<float> logp, log_tail;
};
SparseRows sparse_rows(int64_t n, int64_t V, int64_t K, uint32_t seed) {
  SparseRows rows;
  std::mt19937 rng(seed);
  std::vector<int32_t> all(static_cast<size_t>(V));
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t j = 0; j < V; ++j) all[j] = static_cast<int32_t>(j);
    std::shuffle(all.begin(), all.end(), rng);
    const std::vector<float> z = values(K, seed + 1 + static_cast<uint32_t>(r), 2.f);
    double sum = 0.0;
    for (float x : z) sum += std::exp(double(x));
    const double kept = K == V ? 1.0 : 0.5 + 0.45 * double(r % 3) / 2.0;  // 0.5 .. 0.95
    for (int64_t k = 0; k < K; ++k) {
      rows.ids.push_back(all[k]);
      rows.logp.push_back(static_cast<float>(double(z[k]) - std::log(sum) + std::log(kept)));
    }
    rows.log_tail.push_back(static_cast<float>(std::log1p(-kept)));
  }
  return rows;
}

void add_sparse_kd_cases(std::vector<OpCase>& cases) {
  for (const CacheTail tail : {CacheTail::renormalize, CacheTail::bucket}) {
    for (const KdLoss kd_loss : {KdLoss::forward_kl, KdLoss::reverse_kl, KdLoss::soft_ce}) {
      if (kd_loss == KdLoss::reverse_kl && tail == CacheTail::renormalize) continue;
      for (const int64_t V : {33, 1025}) {
        for (const int64_t K : {int64_t(1), int64_t(8), V}) {
          const int64_t n = 9;
          cases.push_back({"sparse_kd_loss_chunk",
                           std::string(to_string(kd_loss)) + " " + to_string(tail) + " V=" +
                               std::to_string(V) + " K=" + std::to_string(K),
                           [=](OpRun& r) {
                             const SparseRows rows = sparse_rows(n, V, K, 24);
                             SparseKdChunkArgs a;
                             fill_shared_loss_args(r, a, n, V, kd_loss);
                             a.K = K;
                             a.ids = r.i32(rows.ids);
                             a.logp = r.f32(rows.logp);
                             a.log_tail = r.f32(rows.log_tail);
                             a.tail = tail;
                             a.soft_ce = r.out_f32("soft_ce", n);
                             r.be().sparse_kd_loss_chunk(a);
                           }});
        }
      }
    }
  }
}

// Teacher logits on a coarse grid (steps of 1/4 over about +-6), so rows hold
// many equal values: ties go to the lower id on every backend. Finite rows only:
// the harness refuses NaN and inf outputs (topk_log_probs' NaN rows and -inf
// logits are tested in tests/backend/test_topk.cpp).
void add_topk_cases(std::vector<OpCase>& cases) {
  for (const int64_t V : {33, 1025})
    for (const int64_t K : {int64_t(1), int64_t(8), V - 1}) {
      const int64_t n = 9;
      cases.push_back({"topk_log_probs", "V=" + std::to_string(V) + " K=" + std::to_string(K), [=](OpRun& r) {
                         std::vector<float> z = values(n * V, 61, 2.f);
                         for (float& x : z) x = std::round(x * 4.f) / 4.f;
                         TopkArgs a;
                         a.n = n;
                         a.V = V;
                         a.K = K;
                         a.logits = r.act(z);
                         a.ids = r.out_i32("ids", n * K);
                         a.logp = r.out_f32("logp", n * K);
                         a.log_tail = r.out_f32("log_tail", n);
                         r.be().topk_log_probs(a);
                       }});
    }
}

// An adamw_update case's outputs: the master weights from `seed`, the compute
// copy and zero moments, at lr 1e-3.
AdamWArgs adamw_outputs(OpRun& r, int64_t n, uint32_t seed) {
  AdamWArgs a;
  a.master = r.out_f32("master", n, random_values(n, seed, 0.f, 0.5f, false));
  a.compute = r.out_act("compute", n);
  a.m = r.out_f32("m", n);
  a.v = r.out_f32("v", n);
  a.n = n;
  a.lr = 1e-3f;
  return a;
}

// Every case: one or more per op, at sizes that are not multiples of a warp or a tile.
std::vector<OpCase> cases() {
  std::vector<OpCase> c;
  const int64_t n = 1025, N = 33, C = 70, V = 37, F = 45;
  c.push_back({"convert_from_f32", "n=1025", [=](OpRun& r) {
                 r.be().convert_from_f32(r.out_act("dst", n), r.f32(values(n, 1, 3.f)), n);
               }});
  c.push_back({"convert_to_f32", "n=1025", [=](OpRun& r) {
                 r.be().convert_to_f32(r.out_f32("dst", n), r.act(values(n, 2, 3.f)), n);
               }});
  c.push_back({"embedding_forward", "N=33 C=70 V=37", [=](OpRun& r) {
                 r.be().embedding_forward(r.out_act("out", N * C), r.i32(ids(N, 3, V)),
                                          r.act(values(V * C, 4)), N, C);
               }});
  c.push_back({"embedding_backward", "N=33 C=70 V=37, repeated ids (host ids)", [=](OpRun& r) {
                 const std::vector<int32_t> tokens = ids(N, 7, 5);  // read on the host
                 r.be().embedding_backward(r.out_f32("dwte", V * C, values(V * C, 5)),
                                           r.act(values(N * C, 6)), tokens.data(), N, C, V);
               }});
  c.push_back({"rmsnorm_forward", "N=33 C=70", [=](OpRun& r) {
                 r.be().rmsnorm_forward(r.out_act("out", N * C), r.out_f32("rstd", N),
                                        r.act(values(N * C, 8)), r.act(values(C, 9, 0.2f, 1.f)), N, C,
                                        1e-5f);
               }});
  c.push_back({"add_rmsnorm_forward", "N=33 C=70, sum aliases a", [=](OpRun& r) {
                 void* a = r.out_act("sum", N * C, values(N * C, 8));
                 r.be().add_rmsnorm_forward(a, r.out_act("out", N * C), r.out_f32("rstd", N), a,
                                            r.act(values(N * C, 40)), r.act(values(C, 9, 0.2f, 1.f)),
                                            N, C, 1e-5f);
               }});
  c.push_back({"rmsnorm_backward", "N=33 C=70, dinp accumulated", [=](OpRun& r) {
                 const void* inp = r.act(values(N * C, 8));
                 const void* w = r.act(values(C, 9, 0.2f, 1.f));
                 float* rstd = r.out_f32("rstd", N);
                 void* out = r.out_act("out", N * C);
                 r.be().rmsnorm_forward(out, rstd, inp, w, N, C, 1e-5f);
                 r.be().rmsnorm_backward(r.out_act("dinp", N * C, values(N * C, 10)),
                                         r.out_f32("dweight", C, values(C, 11)), r.act(values(N * C, 12)),
                                         inp, w, rstd, N, C);
               }});
  for (const bool bias : {false, true})
    c.push_back({"matmul_forward", bias ? "N=33 IC=70 OC=45 bias" : "N=33 IC=70 OC=45", [=](OpRun& r) {
                   r.be().matmul_forward(r.out_act("out", N * F), r.act(values(N * C, 13)),
                                         r.act(values(F * C, 14)), bias ? r.act(values(F, 15)) : nullptr,
                                         N, C, F);
                 }});
  for (const bool accumulate : {false, true})
    c.push_back({"matmul_backward", accumulate ? "N=33 IC=70 OC=45 dinp +=" : "N=33 IC=70 OC=45",
                 [=](OpRun& r) {
                   r.be().matmul_backward(r.out_act("dinp", N * C, values(N * C, 16)),
                                          r.out_f32("dweight", F * C, values(F * C, 17)),
                                          r.out_f32("dbias", F, values(F, 18)), r.act(values(N * F, 19)),
                                          r.act(values(N * C, 13)), r.act(values(F * C, 14)), N, C, F,
                                          accumulate);
                 }});
  for (const bool forward : {true, false})
    c.push_back({forward ? "rope_forward" : "rope_backward", "B=2 T=9 heads=5 rotated=4 D=16",
                 [=](OpRun& r) {
                   const int64_t B = 2, T = 9, heads = 5, D = 16;
                   std::vector<float> cos, sin;
                   rope_tables(T, D, cos, sin);
                   void* x = r.out_act("x", B * T * heads * D, values(B * T * heads * D, 20));
                   if (forward)
                     r.be().rope_forward(x, r.f32(cos), r.f32(sin), B, T, heads, 4, D);
                   else
                     r.be().rope_backward(x, r.f32(cos), r.f32(sin), B, T, heads, 4, D);
                 }});
  add_attention_cases(c);
  for (const AlphaActivation activation : {AlphaActivation::linear_clip, AlphaActivation::sigmoid}) {
    // std 6 puts values on both sides of the clip points +-5 and deep in the tails.
    c.push_back({"alpha_activation_forward", to_string(activation), [=](OpRun& r) {
                   r.be().alpha_activation_forward(r.out_act("alpha", n), r.act(values(n, 24, 6.f)), n,
                                                   activation);
                 }});
    c.push_back({"alpha_activation_backward", to_string(activation), [=](OpRun& r) {
                   r.be().alpha_activation_backward(r.out_act("dz", n), r.act(values(n, 25)),
                                                    r.act(values(n, 24, 6.f)), n, activation);
                 }});
  }
  c.push_back({"column_sum_accumulate", "N=1025 H=6", [=](OpRun& r) {
                 r.be().column_sum_accumulate(r.out_f32("sums", 6, values(6, 26)), r.act(values(n * 6, 27)),
                                              n, 6);
               }});
  c.push_back({"sigmoid_gate_forward", "n=1025", [=](OpRun& r) {
                 r.be().sigmoid_gate_forward(r.out_act("out", n), r.act(values(n, 28)),
                                             r.act(values(n, 29, 4.f)), n);
               }});
  c.push_back({"sigmoid_gate_backward", "n=1025", [=](OpRun& r) {
                 r.be().sigmoid_gate_backward(r.out_act("dinp", n), r.out_act("dgate", n),
                                              r.act(values(n, 30)), r.act(values(n, 28)),
                                              r.act(values(n, 29, 4.f)), n);
               }});
  c.push_back({"swiglu_forward", "N=33 F=45", [=](OpRun& r) {
                 r.be().swiglu_forward(r.out_act("out", N * F), r.act(values(N * 2 * F, 31, 2.f)), N, F);
               }});
  c.push_back({"swiglu_backward", "N=33 F=45", [=](OpRun& r) {
                 r.be().swiglu_backward(r.out_act("dgate_up", N * 2 * F), r.act(values(N * F, 32)),
                                        r.act(values(N * 2 * F, 31, 2.f)), N, F);
               }});
  c.push_back({"add", "n=1025, out aliases a", [=](OpRun& r) {
                 void* a = r.out_act("a", n, values(n, 33));
                 r.be().add(a, a, r.act(values(n, 34)), n);
               }});
  c.push_back({"accumulate", "n=1025", [=](OpRun& r) {
                 r.be().accumulate(r.out_act("dst", n, values(n, 35)), r.act(values(n, 36)), n);
               }});
  add_loss_cases(c);
  add_sparse_kd_cases(c);
  add_topk_cases(c);
  c.push_back({"sum_squares", "n=100003", [=](OpRun& r) {
                 const int64_t m = 100003;
                 r.scalar("sum", r.be().sum_squares(r.f32(random_values(m, 37, 0.f, 1e-2f, false)), m));
               }});
  c.push_back({"adamw_update", "n=1025, 2 steps, clipped", [=](OpRun& r) {
                 AdamWArgs a = adamw_outputs(r, n, 38);
                 a.weight_decay = 0.1f;
                 a.grad_scale = 0.5f;
                 for (int64_t step = 1; step <= 2; ++step) {
                   a.grad = r.f32(random_values(n, 39 + step, 0.f, 1.f, false));
                   a.step = step;
                   r.be().adamw_update(a);
                 }
               }});
  c.push_back({"adamw_update", "n=1025, segments with their own decay, a gap left alone", [=](OpRun& r) {
                 const ParamSegment segments[] = {{0, 300, 0.1f}, {300, 700, 0.f}, {900, n, 0.05f}};
                 AdamWArgs a = adamw_outputs(r, n, 44);
                 a.grad = r.f32(random_values(n, 45, 0.f, 1.f, false));
                 a.segments = segments;
                 a.num_segments = 3;
                 r.be().adamw_update(a);
               }});
  return c;
}

// Backend methods that are not ops: identity, memory, transfers (every case uses
// them) and reporting.
const std::set<std::string> kNotOps = {"name",      "act_dtype", "alloc",           "release",
                                       "zero",      "to_host",   "to_device",       "copy",
                                       "synchronize", "attention_paths", "memory_stats", "free_device_bytes",
                                       "native_stream"};

// The virtual methods of class Backend, read from its header.
std::set<std::string> backend_methods() {
  std::ifstream in(std::string(KDTRAIN_SOURCE_DIR) + "/src/backend/backend.h");
  REQUIRE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  const std::string all = text.str();
  const size_t begin = all.find("class Backend {");
  REQUIRE(begin != std::string::npos);
  const std::string body = all.substr(begin, all.find("\n};", begin) - begin);
  std::set<std::string> names;
  const std::regex method(R"(virtual\s+[\w:<>\*&\s]+?\b(\w+)\s*\()");
  for (auto it = std::sregex_iterator(body.begin(), body.end(), method); it != std::sregex_iterator(); ++it)
    names.insert((*it)[1]);
  names.erase("Backend");  // the destructor
  return names;
}

}  // namespace

TEST_CASE("backend ops: every op of class Backend has a case", "[backend_ops]") {
  const std::set<std::string> methods = backend_methods();
  REQUIRE(methods.count("attention_forward") == 1);  // the reader found the class
  std::set<std::string> covered;
  for (const OpCase& c : cases()) {
    INFO("case " << c.op << " " << c.label);
    CHECK(methods.count(c.op) == 1);  // a case names a real op
    covered.insert(c.op);
  }
  for (const std::string& m : methods) {
    if (kNotOps.count(m)) continue;
    INFO("Backend::" << m << " has no case in tests/backend/test_backend_ops.cpp");
    CHECK(covered.count(m) == 1);
  }
}

TEST_CASE("backend ops: every backend against the CPU reference", "[backend_ops][cuda]") {
  auto reference = make_backend("cpu", 0);
  const bool cuda = cuda_available() || selfcheck_on_cpu();
  if (!cuda) WARN("SKIPPED: no CUDA device; backend ops ran on the CPU reference only");
  std::unique_ptr<Backend> device = cuda ? cuda_backend() : nullptr;
  for (const OpCase& c : cases()) {
    INFO("op " << c.op << ": " << c.label);
    OpRun ref_run(*reference);
    c.run(ref_run);
    const std::map<std::string, Output> ref = ref_run.results();
    for (const auto& [name, out] : ref) {
      INFO(name);
      CHECK(out.guard_intact);
    }
    if (!device) continue;
    OpRun first(*device), second(*device);
    c.run(first);
    c.run(second);
    const std::map<std::string, Output> got = first.results(), again = second.results();
    REQUIRE(got.size() == ref.size());
    for (const auto& [name, out] : got) {
      compare(c.op + "." + name, out, ref.at(name));
      INFO(c.op << "." << name << ": a rerun must give the same bits");
      CHECK(again.at(name).bytes == out.bytes);
    }
  }
}

// The sparse loss against its definition (docs/distillation.md, "How the tail is
// treated"): on the CPU backend, loss_chunk against the dense teacher that
// dense_cached_teacher expands (for soft_ce in bucket mode: forward_kl plus the
// bucket teacher's entropy tau^2 H(q), as that doc states), every tail mode and
// loss, K from 1 to V, tau 1 and 2, and a rerun bit-identical.
// Bound: both forms compute each row in double from the same fp32 inputs; the
// dense form rounds the teacher logits t = tau log q to fp32 (relative 2^-24 of
// |t| <= ~40, so |d log q| <= 3e-6) before its softmax, so values and gradients
// agree to a few 1e-6 relative: max |err| <= 2e-5 * max(|ref|, 1e-3), NMSE < 1e-9.
TEST_CASE("backend ops: sparse_kd_loss_chunk equals loss_chunk against the dense cached teacher",
          "[backend_ops][teacher_cache]") {
  auto cpu = make_backend("cpu", 0);
  const int64_t n = 7;
  for (const CacheTail tail : {CacheTail::renormalize, CacheTail::bucket})
    for (const KdLoss kd_loss : {KdLoss::forward_kl, KdLoss::reverse_kl, KdLoss::soft_ce})
      for (const int64_t V : {33, 1025})
        for (const int64_t K : {int64_t(1), int64_t(8), V})
          for (const float tau : {1.f, 2.f}) {
            if (kd_loss == KdLoss::reverse_kl && tail == CacheTail::renormalize) continue;
            INFO(to_string(kd_loss) << " " << to_string(tail) << " V=" << V << " K=" << K
                                    << " tau=" << tau);
            const std::vector<int32_t> targets = ids(n, 21, V);
            const SparseRows rows = sparse_rows(n, V, K, 24);
            const std::vector<float> logits = values(n * V, 22, 3.f);
            std::vector<float> teacher(n * V);
            dense_cached_teacher<float>(rows.ids.data(), rows.logp.data(), rows.log_tail.data(), n, K,
                                        V, tail, tau, logits.data(), teacher.data());
            const bool bucket_soft_ce = tail == CacheTail::bucket && kd_loss == KdLoss::soft_ce;
            std::vector<float> dense = logits, dense_ce(n), dense_kd(n), dense_soft(n);
            LossChunkArgs d;
            d.n = n;
            d.V = V;
            d.logits = dense.data();
            d.teacher_logits = teacher.data();
            d.targets = targets.data();
            d.ce = dense_ce.data();
            d.kd = dense_kd.data();
            d.soft_ce = dense_soft.data();
            d.kd_loss = bucket_soft_ce ? KdLoss::forward_kl : kd_loss;
            d.temperature = tau;
            d.kd_weight = 0.6f;
            d.grad_scale = 0.25f;
            cpu->loss_chunk(d);
            if (bucket_soft_ce) {
              std::vector<double> h(n);
              bucket_teacher_entropy(rows.logp.data(), rows.log_tail.data(), n, K, tau, h.data());
              for (int64_t r = 0; r < n; ++r) dense_kd[r] += static_cast<float>(h[r]);
            }
            std::vector<float> runs[2];
            std::vector<float> ce(n), kd(n), soft(n);
            for (std::vector<float>& sparse : runs) {
              sparse = logits;
              SparseKdChunkArgs a;
              a.n = n;
              a.V = V;
              a.K = K;
              a.logits = sparse.data();
              a.targets = targets.data();
              a.ids = rows.ids.data();
              a.logp = rows.logp.data();
              a.log_tail = rows.log_tail.data();
              a.tail = tail;
              a.ce = ce.data();
              a.kd = kd.data();
              a.soft_ce = soft.data();
              a.kd_loss = kd_loss;
              a.temperature = tau;
              a.kd_weight = 0.6f;
              a.grad_scale = 0.25f;
              cpu->sparse_kd_loss_chunk(a);
            }
            CHECK(runs[0] == runs[1]);
            check_close("dlogits", runs[0], dense, 1e-9, 2e-5, 1e-3);
            check_close("ce", ce, dense_ce, 1e-9, 2e-5, 1e-3);
            check_close("kd", kd, dense_kd, 1e-9, 2e-5, 1e-3);
            check_close("soft_ce", soft, dense_soft, 1e-9, 2e-5, 1e-3);
          }
}
