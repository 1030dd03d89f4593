// Spellings of the config enums, shared by the JSON reader, the CLI and to_json.
// Each enum has one table (the attention variants': kAttentionVariants in
// attention_variant.h); to_string and parse read the same table so the two can
// never disagree.
#include <cstddef>
#include <string>
#include <utility>

#include "config/config.h"
#include "core/error.h"

namespace kdtrain {

namespace {

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
const std::pair<DistBackend, const char*> kDistBackend[] = {
    {DistBackend::auto_select, "auto"},
    {DistBackend::single, "single"},
    {DistBackend::mpi, "mpi"},
    {DistBackend::nccl, "nccl"},
};
const std::pair<ReduceDtype, const char*> kReduceDtype[] = {
    {ReduceDtype::fp32, "fp32"},
    {ReduceDtype::bf16, "bf16"},
};

// A table row is a (value, spelling) pair, or an AttentionVariantInfo.
template <typename E>
E value_of(const std::pair<E, const char*>& row) { return row.first; }
template <typename E>
const char* spelling_of(const std::pair<E, const char*>& row) { return row.second; }
AttentionVariant value_of(const AttentionVariantInfo& row) { return row.variant; }
const char* spelling_of(const AttentionVariantInfo& row) { return row.name; }

template <typename Table, typename E>
const char* name_of(const Table& table, E value) {
  for (const auto& row : table)
    if (value_of(row) == value) return spelling_of(row);
  return "?";  // unreachable for a valid enum value
}

template <typename Table>
auto parse_name(const Table& table, const std::string& name, const char* what) {
  std::string choices;
  for (const auto& row : table) {
    if (name == spelling_of(row)) return value_of(row);
    if (!choices.empty()) choices += ", ";
    choices += spelling_of(row);
  }
  fail("unknown ", what, " '", name, "' (choices: ", choices, ")");
}

}  // namespace

const char* to_string(AttentionVariant v) { return name_of(kAttentionVariants, v); }
AttentionVariant parse_attention_variant(const std::string& name) {
  return parse_name(kAttentionVariants, name, "attention variant");
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
const char* to_string(DistBackend b) { return name_of(kDistBackend, b); }
DistBackend parse_dist_backend(const std::string& name) {
  return parse_name(kDistBackend, name, "dist.backend");
}
const char* to_string(ReduceDtype d) { return name_of(kReduceDtype, d); }
ReduceDtype parse_reduce_dtype(const std::string& name) {
  return parse_name(kReduceDtype, name, "dist.reduce_dtype");
}

}  // namespace kdtrain
