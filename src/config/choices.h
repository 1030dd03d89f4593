// Every closed choice of the config is an enum with one table of spellings
// (Choices<E>): parse_choice, choice_name and choice_names read that table, so
// the JSON reader, the CLI, to_json and `kdtrain config --list` can never
// disagree on a spelling. The attention variants' table is kAttentionVariants.
#pragma once
#include <ostream>
#include <string>
#include <type_traits>
#include <vector>

#include "config/attention_variant.h"

namespace kdtrain {

enum class AlphaActivation { linear_clip, sigmoid };
enum class KdLoss { forward_kl, reverse_kl, soft_ce };
enum class ScheduleKind { wsd, cosine, constant };
enum class DecayShape { linear, cosine, one_minus_sqrt };
enum class NonFinitePolicy { stop, skip };
enum class ModelFamily { llama, qwen2 };           // which Hugging Face architecture exports it
enum class RopeScalingType { none, llama3 };       // "default" is Hugging Face's name for none
enum class Device { cpu, cuda };
enum class CacheTail { renormalize, bucket };      // teacher-cache mass outside the top K
enum class DistBackend { auto_select, single, mpi, nccl };  // dist/communicator.h
enum class ReduceDtype { fp32, bf16 };             // gradient all-reduce precision
// Activations the backward recomputes instead of keeping (model/activations.h),
// each choice dropping more than the one before it.
enum class Recompute { none, swiglu, norms, mlp };
// The fused attention forward's kernel on CUDA, resolved once when the backend is built
// (backend/cuda/attention_path.h): the rule, or one kernel forced.
enum class AttentionForward { auto_select, mma_sync, wgmma, wgmma_lockstep };
// The fused attention backward's main kernel on CUDA, likewise.
enum class AttentionBackward { auto_select, mma_sync, wgmma };

template <typename E>
struct ChoiceName {
  E value;
  const char* name;
};

// Choices<E>::what names the choice in messages; Choices<E>::rows spells each value.
template <typename E>
struct Choices;

template <>
struct Choices<AttentionVariant> {
  static constexpr const char* what = "attention variant";
  static constexpr const auto& rows = kAttentionVariants;
};

// The other tables: KDTRAIN_CHOICES(E, what, {E::a, "a"}, {E::b, "b"}, ...) specialises Choices<E>.
#define KDTRAIN_CHOICES(E, WHAT, ...)                      \
  template <>                                              \
  struct Choices<E> {                                      \
    static constexpr const char* what = WHAT;              \
    static constexpr ChoiceName<E> rows[] = {__VA_ARGS__}; \
  }

KDTRAIN_CHOICES(AlphaActivation, "alpha activation",
    {AlphaActivation::linear_clip, "linear_clip"}, {AlphaActivation::sigmoid, "sigmoid"});
KDTRAIN_CHOICES(AffineBiasDivisor, "affine bias divisor",
    {AffineBiasDivisor::sequence, "sequence"}, {AffineBiasDivisor::visible, "visible"});
KDTRAIN_CHOICES(AffineInferenceN, "affine inference N",
    {AffineInferenceN::train_length, "train_length"}, {AffineInferenceN::keys, "keys"});
KDTRAIN_CHOICES(KdLoss, "KD loss",
    {KdLoss::forward_kl, "forward_kl"}, {KdLoss::reverse_kl, "reverse_kl"}, {KdLoss::soft_ce, "soft_ce"});
KDTRAIN_CHOICES(ScheduleKind, "schedule kind",
    {ScheduleKind::wsd, "wsd"}, {ScheduleKind::cosine, "cosine"}, {ScheduleKind::constant, "constant"});
KDTRAIN_CHOICES(DecayShape, "decay shape",
    {DecayShape::linear, "linear"}, {DecayShape::cosine, "cosine"}, {DecayShape::one_minus_sqrt, "1-sqrt"});
KDTRAIN_CHOICES(NonFinitePolicy, "non-finite policy", {NonFinitePolicy::stop, "stop"}, {NonFinitePolicy::skip, "skip"});
KDTRAIN_CHOICES(ModelFamily, "model family", {ModelFamily::llama, "llama"}, {ModelFamily::qwen2, "qwen2"});
KDTRAIN_CHOICES(RopeScalingType, "RoPE scaling type",
    {RopeScalingType::none, "default"}, {RopeScalingType::llama3, "llama3"});
KDTRAIN_CHOICES(Device, "device", {Device::cpu, "cpu"}, {Device::cuda, "cuda"});
KDTRAIN_CHOICES(CacheTail, "cache tail", {CacheTail::renormalize, "renormalize"}, {CacheTail::bucket, "bucket"});
KDTRAIN_CHOICES(DistBackend, "dist.backend",
    {DistBackend::auto_select, "auto"}, {DistBackend::single, "single"}, {DistBackend::mpi, "mpi"},
    {DistBackend::nccl, "nccl"});
KDTRAIN_CHOICES(ReduceDtype, "dist.reduce_dtype", {ReduceDtype::fp32, "fp32"}, {ReduceDtype::bf16, "bf16"});
KDTRAIN_CHOICES(Recompute, "train.recompute",
    {Recompute::none, "none"}, {Recompute::swiglu, "swiglu"}, {Recompute::norms, "norms"}, {Recompute::mlp, "mlp"});
KDTRAIN_CHOICES(AttentionForward, "train.attention_forward",
    {AttentionForward::auto_select, "auto"}, {AttentionForward::mma_sync, "mma_sync"},
    {AttentionForward::wgmma, "wgmma"}, {AttentionForward::wgmma_lockstep, "wgmma_lockstep"});
KDTRAIN_CHOICES(AttentionBackward, "train.attention_backward",
    {AttentionBackward::auto_select, "auto"}, {AttentionBackward::mma_sync, "mma_sync"},
    {AttentionBackward::wgmma, "wgmma"});
#undef KDTRAIN_CHOICES

namespace choice_detail {
template <typename E>
constexpr E value_of(const ChoiceName<E>& row) { return row.value; }
constexpr AttentionVariant value_of(const AttentionVariantInfo& row) { return row.variant; }
}  // namespace choice_detail

template <typename E>
constexpr const char* choice_name(E value) {
  for (const auto& row : Choices<E>::rows)
    if (choice_detail::value_of(row) == value) return row.name;
  return "?";  // unreachable for a valid enum value
}

template <typename E>
std::vector<std::string> choice_names() {
  std::vector<std::string> names;
  for (const auto& row : Choices<E>::rows) names.emplace_back(row.name);
  return names;
}

// Throws "unknown <what> '<name>' (choices: a, b, c)".
[[noreturn]] void fail_unknown_choice(const char* what, const std::string& name,
                                      const std::vector<std::string>& choices);

template <typename E>
E parse_choice(const std::string& name) {
  for (const auto& row : Choices<E>::rows)
    if (name == row.name) return choice_detail::value_of(row);
  fail_unknown_choice(Choices<E>::what, name, choice_names<E>());
}

template <typename E, typename = std::enable_if_t<std::is_enum_v<E>>>
const char* to_string(E value) {
  return choice_name(value);
}

// Named parsers, for call sites that read better with the choice in the name.
inline AttentionVariant parse_attention_variant(const std::string& s) { return parse_choice<AttentionVariant>(s); }
inline AlphaActivation parse_alpha_activation(const std::string& s) { return parse_choice<AlphaActivation>(s); }
inline AffineBiasDivisor parse_affine_bias_divisor(const std::string& s) {
  return parse_choice<AffineBiasDivisor>(s);
}
inline KdLoss parse_kd_loss(const std::string& s) { return parse_choice<KdLoss>(s); }
inline ScheduleKind parse_schedule_kind(const std::string& s) { return parse_choice<ScheduleKind>(s); }
inline DecayShape parse_decay_shape(const std::string& s) { return parse_choice<DecayShape>(s); }
inline NonFinitePolicy parse_nonfinite_policy(const std::string& s) { return parse_choice<NonFinitePolicy>(s); }
inline DistBackend parse_dist_backend(const std::string& s) { return parse_choice<DistBackend>(s); }
inline ReduceDtype parse_reduce_dtype(const std::string& s) { return parse_choice<ReduceDtype>(s); }

// Streams a choice by its spelling (test INFO lines, log messages).
template <typename E, typename = decltype(Choices<E>::rows)>
std::ostream& operator<<(std::ostream& out, E value) {
  return out << choice_name(value);
}

}  // namespace kdtrain
