// wgmma shared-memory matrix descriptors, bf16 operands (PTX ISA 9.7.15.5.1, "Matrix
// Descriptor Format", and the canonical layouts of 9.7.15.5.1.1). Plain constexpr C++:
// kernels build descriptors with it, the host emulator (kernels/tc/sim/) decodes them
// with it, and scripts/tests/test_wgmma_desc_cute.py checks both directions against
// CuTe's make_gmma_desc and its swizzled layouts bit for bit.
//
// The 64-bit descriptor:
//   bits  0-13  start address >> 4          bits 32-45  stride byte offset (SBO) >> 4
//   bits 16-29  leading byte offset (LBO) >> 4   bits 49-51  base offset
//   bits 62-63  swizzle: 0 none, 1 128-byte, 2 64-byte, 3 32-byte
//
// Canonical layouts in bytes, for element (mn, k) of an operand with k in [0, 16)
// (one k16 step of bf16, 32 bytes of K), W = swizzle width in 16-byte chunks (1 for
// none, 2/4/8 for 32/64/128-byte):
//   K-major, none:      (mn%8)*16   + (mn/8)*SBO + (k/8)*LBO + (k%8)*2
//   K-major, swizzled:  (mn%8)*16W  + (mn/8)*SBO + (k/8)*16  + (k%8)*2   (LBO unused)
//   MN-major, none:     (k%8)*16    + (k/8)*LBO  + (mn/8)*SBO + (mn%8)*2
//   MN-major, swizzled: (k%8)*16W   + (k/8)*SBO  + (mn/(8W))*LBO + (mn%(8W))*2
// added to the start address, then swizzled: Swizzle<B,4,3> on the shared-memory byte
// address (B = log2 W): address bits [4, 4+B) ^= bits [7, 7+B), i.e. within each 128-byte
// line the 16-byte chunk index (mod W) is XORed with the line index (mod W). For a
// pattern of 8 rows of 16W bytes that is chunk c of row r stored at c ^ ((r % 8) W / 8).
// The swizzle is a function of the address itself, which is why a pattern's 8 rows must
// start at a multiple of 8*16W bytes; this header (and the emulator) takes base offset 0
// and start addresses whose pattern-row bits [7, 7+B) are 0, where the ISA's
// base-offset rule and the address-bit rule agree.
#pragma once
#include <cstdint>

namespace kdtrain::tc {

enum class WgmmaSwizzle : uint32_t { none = 0, b128 = 1, b64 = 2, b32 = 3 };
enum class WgmmaMajor { k, mn };

// 16-byte chunks per swizzled row (1 for none).
constexpr int wgmma_swizzle_chunks(WgmmaSwizzle s) {
  return s == WgmmaSwizzle::b128 ? 8 : s == WgmmaSwizzle::b64 ? 4 : s == WgmmaSwizzle::b32 ? 2 : 1;
}
constexpr int wgmma_swizzle_bits(WgmmaSwizzle s) {
  return s == WgmmaSwizzle::b128 ? 3 : s == WgmmaSwizzle::b64 ? 2 : s == WgmmaSwizzle::b32 ? 1 : 0;
}

// Offsets are in bytes and multiples of 16; start < 256 KiB.
constexpr uint64_t wgmma_desc(uint32_t start, uint32_t lbo, uint32_t sbo, WgmmaSwizzle s, uint32_t base_offset = 0) {
  return (static_cast<uint64_t>((start & 0x3ffffu) >> 4)) | (static_cast<uint64_t>((lbo >> 4) & 0x3fffu) << 16) |
         (static_cast<uint64_t>((sbo >> 4) & 0x3fffu) << 32) | (static_cast<uint64_t>(base_offset & 7u) << 49) |
         (static_cast<uint64_t>(s) << 62);
}

struct WgmmaDescFields {
  uint32_t start = 0, lbo = 0, sbo = 0, base_offset = 0;  // bytes (base offset: the 3-bit field)
  WgmmaSwizzle swizzle = WgmmaSwizzle::none;
};

constexpr WgmmaDescFields wgmma_decode(uint64_t d) {
  WgmmaDescFields f;
  f.start = static_cast<uint32_t>(d & 0x3fffu) << 4;
  f.lbo = static_cast<uint32_t>((d >> 16) & 0x3fffu) << 4;
  f.sbo = static_cast<uint32_t>((d >> 32) & 0x3fffu) << 4;
  f.base_offset = static_cast<uint32_t>((d >> 49) & 7u);
  f.swizzle = static_cast<WgmmaSwizzle>((d >> 62) & 3u);
  return f;
}

// Swizzle<B,4,3> of a shared-memory byte address.
constexpr uint32_t wgmma_swizzle(uint32_t addr, WgmmaSwizzle s) {
  const uint32_t mask = (1u << wgmma_swizzle_bits(s)) - 1u;
  return addr ^ (((addr >> 7) & mask) << 4);
}

// Shared-memory byte address of bf16 element (mn, k), k in [0, 16), of the operand the
// descriptor describes (the layouts above).
constexpr uint32_t wgmma_element_address(const WgmmaDescFields& f, WgmmaMajor major, int mn, int k) {
  const uint32_t w = static_cast<uint32_t>(wgmma_swizzle_chunks(f.swizzle));
  const uint32_t m = static_cast<uint32_t>(mn), kk = static_cast<uint32_t>(k);
  uint32_t off = 0;
  if (major == WgmmaMajor::k) {
    off = (m % 8) * 16 * w + (m / 8) * f.sbo + (kk % 8) * 2 +
          (f.swizzle == WgmmaSwizzle::none ? (kk / 8) * f.lbo : (kk / 8) * 16);
  } else if (f.swizzle == WgmmaSwizzle::none) {
    off = (kk % 8) * 16 + (kk / 8) * f.lbo + (m / 8) * f.sbo + (m % 8) * 2;
  } else {
    off = (kk % 8) * 16 * w + (kk / 8) * f.sbo + (m / (8 * w)) * f.lbo + (m % (8 * w)) * 2;
  }
  return wgmma_swizzle(f.start + off, f.swizzle);
}

}  // namespace kdtrain::tc
