// Spellings of the config enums, shared by the JSON reader, the CLI and to_json.
// Each enum has one table; to_string and parse read the same table so the two
// can never disagree.
#include <cstddef>
#include <string>
#include <utility>

#include "config/config.h"
#include "core/error.h"

namespace kdtrain {

namespace {

const std::pair<AttentionVariant, const char*> kAttention[] = {
    {AttentionVariant::baseline, "baseline"},
    {AttentionVariant::sink, "sink"},
    {AttentionVariant::affine, "affine"},
    {AttentionVariant::gated, "gated"},
    {AttentionVariant::affine_gated, "affine-gated"},
};
const std::pair<AlphaActivation, const char*> kAlpha[] = {
    {AlphaActivation::linear_clip, "linear_clip"},
    {AlphaActivation::sigmoid, "sigmoid"},
};
const std::pair<KdLoss, const char*> kKdLoss[] = {
    {KdLoss::forward_kl, "forward_kl"},
    {KdLoss::reverse_kl, "reverse_kl"},
    {KdLoss::soft_ce, "soft_ce"},
};
const std::pair<ScheduleKind, const char*> kSchedule[] = {
    {ScheduleKind::wsd, "wsd"},
    {ScheduleKind::cosine, "cosine"},
    {ScheduleKind::constant, "constant"},
};
const std::pair<DecayShape, const char*> kDecay[] = {
    {DecayShape::linear, "linear"},
    {DecayShape::cosine, "cosine"},
    {DecayShape::one_minus_sqrt, "1-sqrt"},
};
const std::pair<NonFinitePolicy, const char*> kNonFinite[] = {
    {NonFinitePolicy::stop, "stop"},
    {NonFinitePolicy::skip, "skip"},
};

template <typename E, size_t N>
const char* name_of(const std::pair<E, const char*> (&table)[N], E value) {
  for (const auto& entry : table)
    if (entry.first == value) return entry.second;
  return "?";  // unreachable for a valid enum value
}

template <typename E, size_t N>
E parse_name(const std::pair<E, const char*> (&table)[N], const std::string& name,
             const char* what) {
  std::string choices;
  for (const auto& entry : table) {
    if (name == entry.second) return entry.first;
    if (!choices.empty()) choices += ", ";
    choices += entry.second;
  }
  fail("unknown ", what, " '", name, "' (choices: ", choices, ")");
}

}  // namespace

const char* to_string(AttentionVariant v) { return name_of(kAttention, v); }
AttentionVariant parse_attention_variant(const std::string& name) {
  return parse_name(kAttention, name, "attention variant");
}
const char* to_string(AlphaActivation a) { return name_of(kAlpha, a); }
AlphaActivation parse_alpha_activation(const std::string& name) {
  return parse_name(kAlpha, name, "alpha activation");
}
const char* to_string(KdLoss k) { return name_of(kKdLoss, k); }
KdLoss parse_kd_loss(const std::string& name) { return parse_name(kKdLoss, name, "KD loss"); }
const char* to_string(ScheduleKind s) { return name_of(kSchedule, s); }
ScheduleKind parse_schedule_kind(const std::string& name) {
  return parse_name(kSchedule, name, "schedule kind");
}
const char* to_string(DecayShape s) { return name_of(kDecay, s); }
DecayShape parse_decay_shape(const std::string& name) {
  return parse_name(kDecay, name, "decay shape");
}
const char* to_string(NonFinitePolicy p) { return name_of(kNonFinite, p); }
NonFinitePolicy parse_nonfinite_policy(const std::string& name) {
  return parse_name(kNonFinite, name, "non-finite policy");
}

}  // namespace kdtrain
