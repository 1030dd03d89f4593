// The attention variant's per-model state (docs/model.md), one component of Model:
// where the attention reads each layer's fp32 sinks and alpha_ma, the host copy
// of alpha_ma, the per-(layer, head) alpha sums a training forward accumulates,
// and the end-of-step update of the running mean
//   alpha_ma <- rho*alpha_ma + (1-rho)*mean(alpha)
// over every token of the global batch. Variants without sinks or alpha leave
// it empty: every method is then a no-op or returns nothing.
#pragma once
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "dist/communicator.h"
#include "model/param_layout.h"

namespace kdtrain {

class VariantState {
 public:
  // `features`: the model's, resolved once (Model::features); `alpha_momentum`:
  // rho of the running mean (attention.alpha_momentum). `master`: the model's
  // fp32 arena, which holds sinks and alpha_ma; null for a teacher without one,
  // whose fp32 copies then live in a side buffer here.
  VariantState(const ModelConfig& model, AttentionFeatures features, double alpha_momentum,
               const ParamLayout& layout, Backend& backend, float* master);
  ~VariantState();
  VariantState(const VariantState&) = delete;
  VariantState& operator=(const VariantState&) = delete;

  // Layer l's fp32 sinks (H) and alpha_ma (H) in backend memory; null when the
  // variant has none.
  const float* layer_sinks(int64_t l) const;
  const float* layer_alpha_ma(int64_t l) const;
  // Every layer's sinks (L*H) on the host: one small read, not the whole arena.
  std::vector<float> sinks();

  // From the host parameters the model was just given (Model::set_params):
  // the host copy of alpha_ma, and without a master the side buffer.
  void load(const std::vector<float>& host);
  // The same for one tensor given alone (Model::set_param_tensor): `offset` is its
  // place in the layout, `values` its fp32 elements. A tensor that is neither
  // a layer's sinks nor its alpha_ma is ignored.
  void load_tensor(int64_t offset, const float* values);
  // Whether the tensor at `offset` is a layer's sinks or alpha_ma.
  bool holds(int64_t offset) const;

  // A training forward: adds layer l's column sums of alpha (N, H) to the
  // step's totals, and, once per forward, its N tokens.
  void accumulate_alpha(int64_t l, const void* alpha, int64_t N);
  void count_tokens(int64_t N) { alpha_tokens_ += N; }
  // Per (layer, head) sums of alpha and the token count since the last take;
  // empty unless the variant is affine.
  std::vector<double> take_alpha_sums(int64_t* tokens_counted);

  // The end of an optimizer step, on every rank alike: takes the step's alpha
  // sums, adds them over the ranks (one all-reduce of L*H+1 values, affine
  // variants only), and when the step was `applied` moves alpha_ma toward
  // their mean. Called after the update, so every forward of the step read the
  // value from before it. Returns the mean alpha per (layer, head), or nothing
  // (not affine, or not applied).
  std::vector<double> end_step(dist::Communicator& comm, bool applied);

  // alpha_ma per (layer, head), from the host copy: reading it costs no
  // transfer; setting it uploads L*H floats without a wait.
  std::vector<float> alpha_ma() const { return alpha_ma_host_; }
  void set_alpha_ma(const std::vector<float>& values);

 private:
  void upload_alpha_ma();

  Backend& backend_;
  const ParamLayout& layout_;
  AttentionFeatures features_;
  double rho_;  // attention.alpha_momentum
  int64_t L_, H_;
  float* master_;
  float* side_ = nullptr;        // teacher without master: sinks (L, H) then alpha_ma (L, H), fp32
  float* alpha_sums_ = nullptr;  // (L, H) fp32
  float* sinks_view_ = nullptr;  // (L, H) fp32 gather buffer for sinks()
  std::vector<float> alpha_ma_host_;  // (L*H) for affine variants
  int64_t alpha_tokens_ = 0;
};

}  // namespace kdtrain
