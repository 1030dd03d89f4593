// tc::exp2_approx and tc::log2_approx on the host, the emulator's model of ex2.approx.ftz.f32
// and lg2.approx.ftz.f32: std::exp2 / std::log2 with .ftz's flushes. The instructions are
// not bit-exactly specified, so the model is checked against the PTX ISA's error bounds
// (tc/approx_bounds.h) over a sweep of inputs, and the bounds themselves against the
// hardware word that broke the earlier, relative-only check and against values just
// beyond them. An emulator outside the bounds (e.g. exp2 scaled by 1 + 2^-21) fails here.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/tc/primitives.cuh"
#include "tc/approx_bounds.h"

using namespace kdtrain;

namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

float ulps_away(float f, int n) {  // n ulp further from zero (f > 0)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return from_bits(u + static_cast<uint32_t>(n));
}

}  // namespace

TEST_CASE("the emulator's exp2_approx and log2_approx meet the PTX ISA's error bounds", "[tc][sim]") {
  int64_t worst_ex2 = 0, checked = 0, failed = 0;
  // Every 257th float with 2^x normal, both signs of x: steps far below an ulp of x near
  // zero and every exponent of x up to 2^7.
  for (uint32_t u = 0; u < 0x43000000u; u += 257)
    for (float x : {from_bits(u), -from_bits(u)}) {
      if (!(x > -126.f && x < 128.f)) continue;
      const int64_t d = tcprobe::ex2_ulps(x, tc::exp2_approx(x));
      worst_ex2 = std::max(worst_ex2, d);
      failed += d < 0 || d > tcprobe::kEx2MaxUlp;
      ++checked;
    }
  INFO("exp2: " << checked << " inputs, worst " << worst_ex2 << " ulp");
  CHECK(failed == 0);
  failed = checked = 0;
  for (uint32_t u = 0x00800000u; u < 0x7f800000u; u += 4099) {  // every exponent of a normal x
    failed += !tcprobe::lg2_within_isa(from_bits(u), tc::log2_approx(from_bits(u)));
    ++checked;
  }
  for (uint32_t u = 0x3f000001u; u < 0x40000000u; u += 13) {  // densely in (0.5, 2), the absolute range
    failed += !tcprobe::lg2_within_isa(from_bits(u), tc::log2_approx(from_bits(u)));
    ++checked;
  }
  INFO("log2: " << checked << " inputs");
  CHECK(failed == 0);
}

TEST_CASE("exp2_approx and log2_approx flush subnormals and give the ISA's special values", "[tc][sim]") {
  const float sub = from_bits(0x00400000u);                // a subnormal: .ftz reads it as zero
  CHECK(tc::exp2_approx(sub) == 1.f);
  CHECK(tc::exp2_approx(-130.f) == 0.f);                   // 2^-130 is subnormal: flushed
  CHECK(!std::signbit(tc::exp2_approx(-130.f)));
  CHECK(tc::exp2_approx(-126.f) == from_bits(0x00800000u)); // the smallest normal stays
  CHECK(tc::exp2_approx(-INFINITY) == 0.f);
  CHECK(tc::exp2_approx(INFINITY) == INFINITY);
  CHECK(tc::log2_approx(sub) == -INFINITY);
  CHECK(tc::log2_approx(-sub) == -INFINITY);               // -0 after the flush
  CHECK(tc::log2_approx(0.f) == -INFINITY);
  CHECK(std::isnan(tc::log2_approx(-1.f)));
  CHECK(tc::log2_approx(INFINITY) == INFINITY);
  for (float x : {sub, -130.f, -INFINITY, INFINITY}) CHECK(tcprobe::ex2_within_isa(x, tc::exp2_approx(x)));
  for (float x : {sub, 0.f, -1.f, INFINITY}) CHECK(tcprobe::lg2_within_isa(x, tc::log2_approx(x)));
}

TEST_CASE("the ISA bounds hold the H200's lg2 word and reject values just beyond them", "[tc]") {
  // 2026-11-28, H200: lg2.approx.ftz of 1.0117011 (0xbf817f6c's magnitude) gave 0x3c897d0b,
  // 69 ulp and 2^-22.9 absolute from the exact 0.01678312886; a 2^-21 relative check failed it.
  const float x = from_bits(0x3f817f6cu);
  CHECK(tcprobe::lg2_within_isa(x, from_bits(0x3c897d0bu)));
  const double exact = std::log2(static_cast<double>(x));
  CHECK_FALSE(tcprobe::lg2_within_isa(x, static_cast<float>(exact + 0x1.2p-22)));
  CHECK_FALSE(tcprobe::lg2_within_isa(x, static_cast<float>(exact - 0x1.2p-22)));
  // Outside (0.5, 2) the bound is relative: 2^-22 of log2(5) = 2.32 is 2.3 ulp of it, so
  // half of it (plus the rounding to float) is inside and twice it outside.
  const double l5 = std::log2(5.0);
  CHECK(tcprobe::lg2_within_isa(5.f, static_cast<float>(l5 * (1 + 0x1p-23))));
  CHECK_FALSE(tcprobe::lg2_within_isa(5.f, static_cast<float>(l5 * (1 + 0x1p-21))));
  CHECK_FALSE(tcprobe::lg2_within_isa(-1.f, 0.f));  // the ISA's table: NaN
  // ex2: 2 ulp from the correctly rounded result, either side.
  for (float e : {-7.5022020f, 0.3751945f, 5.9598122f}) {
    const float cr = static_cast<float>(std::exp2(static_cast<double>(e)));
    CHECK(tcprobe::ex2_within_isa(e, ulps_away(cr, 2)));
    CHECK(tcprobe::ex2_within_isa(e, ulps_away(cr, -2)));
    CHECK_FALSE(tcprobe::ex2_within_isa(e, ulps_away(cr, 3)));
    CHECK_FALSE(tcprobe::ex2_within_isa(e, ulps_away(cr, -3)));
    CHECK_FALSE(tcprobe::ex2_within_isa(e, cr * (1 + 0x1p-21f)));
  }
}
