// The PTX ISA's accuracy promises for the two approximate transcendental instructions
// behind tc::exp2_approx and tc::log2_approx (kernels/tc/primitives.cuh), as checks of one
// fp32 result against a float64 reference. Neither instruction is bit-exactly specified,
// so no emulator can match the hardware's bits; what both the GPU and the emulator must
// meet is the documented bound (PTX ISA 9.1):
// - ex2.approx.f32 (9.7.3.21, "Floating Point Instructions: ex2"): at most 2 ulp from the
//   correctly rounded result over the full range of inputs;
// - lg2.approx.f32 (9.7.3.20, "Floating Point Instructions: lg2"): absolute error at most
//   2^-22 for inputs in (0.5, 2), relative error at most 2^-22 for other positive finite
//   inputs. Near x = 1 the result is small, so 2^-22 absolute is many ulp of it: an H200
//   gave lg2(1.0117011) 69 ulp (2^-22.9 absolute) from the correctly rounded value
//   (2026-11-28), inside the bound.
// .ftz flushes subnormal inputs and results to sign-preserving zero (both sections): the
// checks take the reference of the flushed input and flush a subnormal reference result.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

namespace kdtrain::tcprobe {

constexpr int kEx2MaxUlp = 2;
constexpr double kLg2MaxError = 0x1p-22;  // absolute in (0.5, 2), relative elsewhere

inline float flush_subnormal(float v) { return std::fpclassify(v) == FP_SUBNORMAL ? std::copysign(0.f, v) : v; }

inline int64_t ordered_bits(float f) {  // consecutive floats get consecutive integers
  int32_t i;
  std::memcpy(&i, &f, 4);
  return i < 0 ? -static_cast<int64_t>(i & 0x7fffffff) : i;
}

// Distance in ulp of `got` from the correctly rounded 2^x (ftz), or -1 when `got` is NaN
// or the special value the ISA's table names is missed. double carries 2^x to 53 bits, so
// rounding it to float is the correctly rounded result except in ties no input here hits.
inline int64_t ex2_ulps(float x, float got) {
  const float want = flush_subnormal(static_cast<float>(std::exp2(static_cast<double>(flush_subnormal(x)))));
  if (std::isnan(x)) return std::isnan(got) ? 0 : -1;
  if (std::isnan(got)) return -1;
  const int64_t d = ordered_bits(got) - ordered_bits(want);
  return d < 0 ? -d : d;
}

inline bool ex2_within_isa(float x, float got) {
  const int64_t u = ex2_ulps(x, got);
  return u >= 0 && u <= kEx2MaxUlp;
}

// |got - log2 x| against the bound of x's range; infinities and NaN exactly as the ISA's
// table says (log2 of 0 is -inf, of a negative number NaN).
inline bool lg2_within_isa(float x, float got) {
  const float a = flush_subnormal(x);
  if (std::isnan(a) || a < 0) return std::isnan(got);
  if (a == 0) return got == -INFINITY;
  if (std::isinf(a)) return got == INFINITY;
  if (!std::isfinite(got)) return false;
  const double exact = std::log2(static_cast<double>(a));
  const double bound = a > 0.5f && a < 2.f ? kLg2MaxError : kLg2MaxError * std::fabs(exact);
  return std::fabs(static_cast<double>(got) - exact) <= bound;
}

}  // namespace kdtrain::tcprobe
