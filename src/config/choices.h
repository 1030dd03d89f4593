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
enum class AttentionForward { auto_select, mma_sync, wgmma };

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
template <>
struct Choices<AlphaActivation> {
  static constexpr const char* what = "alpha activation";
  static constexpr ChoiceName<AlphaActivation> rows[] = {
      {AlphaActivation::linear_clip, "linear_clip"}, {AlphaActivation::sigmoid, "sigmoid"}};
};
template <>
struct Choices<AffineBiasDivisor> {
  static constexpr const char* what = "affine bias divisor";
  static constexpr ChoiceName<AffineBiasDivisor> rows[] = {{AffineBiasDivisor::sequence, "sequence"},
                                                           {AffineBiasDivisor::visible, "visible"}};
};
template <>
struct Choices<AffineInferenceN> {
  static constexpr const char* what = "affine inference N";
  static constexpr ChoiceName<AffineInferenceN> rows[] = {{AffineInferenceN::train_length, "train_length"},
                                                          {AffineInferenceN::keys, "keys"}};
};
template <>
struct Choices<KdLoss> {
  static constexpr const char* what = "KD loss";
  static constexpr ChoiceName<KdLoss> rows[] = {
      {KdLoss::forward_kl, "forward_kl"}, {KdLoss::reverse_kl, "reverse_kl"}, {KdLoss::soft_ce, "soft_ce"}};
};
template <>
struct Choices<ScheduleKind> {
  static constexpr const char* what = "schedule kind";
  static constexpr ChoiceName<ScheduleKind> rows[] = {
      {ScheduleKind::wsd, "wsd"}, {ScheduleKind::cosine, "cosine"}, {ScheduleKind::constant, "constant"}};
};
template <>
struct Choices<DecayShape> {
  static constexpr const char* what = "decay shape";
  static constexpr ChoiceName<DecayShape> rows[] = {
      {DecayShape::linear, "linear"}, {DecayShape::cosine, "cosine"}, {DecayShape::one_minus_sqrt, "1-sqrt"}};
};
template <>
struct Choices<NonFinitePolicy> {
  static constexpr const char* what = "non-finite policy";
  static constexpr ChoiceName<NonFinitePolicy> rows[] = {{NonFinitePolicy::stop, "stop"},
                                                         {NonFinitePolicy::skip, "skip"}};
};
template <>
struct Choices<ModelFamily> {
  static constexpr const char* what = "model family";
  static constexpr ChoiceName<ModelFamily> rows[] = {{ModelFamily::llama, "llama"},
                                                     {ModelFamily::qwen2, "qwen2"}};
};
template <>
struct Choices<RopeScalingType> {
  static constexpr const char* what = "RoPE scaling type";
  static constexpr ChoiceName<RopeScalingType> rows[] = {{RopeScalingType::none, "default"},
                                                         {RopeScalingType::llama3, "llama3"}};
};
template <>
struct Choices<Device> {
  static constexpr const char* what = "device";
  static constexpr ChoiceName<Device> rows[] = {{Device::cpu, "cpu"}, {Device::cuda, "cuda"}};
};
template <>
struct Choices<CacheTail> {
  static constexpr const char* what = "cache tail";
  static constexpr ChoiceName<CacheTail> rows[] = {{CacheTail::renormalize, "renormalize"},
                                                   {CacheTail::bucket, "bucket"}};
};

template <>
struct Choices<DistBackend> {
  static constexpr const char* what = "dist.backend";
  static constexpr ChoiceName<DistBackend> rows[] = {{DistBackend::auto_select, "auto"},
                                                     {DistBackend::single, "single"},
                                                     {DistBackend::mpi, "mpi"},
                                                     {DistBackend::nccl, "nccl"}};
};
template <>
struct Choices<ReduceDtype> {
  static constexpr const char* what = "dist.reduce_dtype";
  static constexpr ChoiceName<ReduceDtype> rows[] = {{ReduceDtype::fp32, "fp32"},
                                                     {ReduceDtype::bf16, "bf16"}};
};

template <>
struct Choices<Recompute> {
  static constexpr const char* what = "train.recompute";
  static constexpr ChoiceName<Recompute> rows[] = {{Recompute::none, "none"},
                                                   {Recompute::swiglu, "swiglu"},
                                                   {Recompute::norms, "norms"},
                                                   {Recompute::mlp, "mlp"}};
};
template <>
struct Choices<AttentionForward> {
  static constexpr const char* what = "train.attention_forward";
  static constexpr ChoiceName<AttentionForward> rows[] = {{AttentionForward::auto_select, "auto"},
                                                          {AttentionForward::mma_sync, "mma_sync"},
                                                          {AttentionForward::wgmma, "wgmma"}};
};

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
