// A second, independent source for the wgmma descriptors: CuTe (the nvidia-cutlass
// package's headers, pinned in requirements.txt). Built and run by
// scripts/tests/test_wgmma_desc_cute.py, which skips with a message where the headers or
// a compiler are absent. For each canonical layout CuTe builds (every swizzle mode,
// K-major and MN-major, bf16) and each k-step of 16:
//   - CuTe's make_gmma_desc fields (LBO, SBO, base offset, swizzle) and its start
//     address (the slice's offset: on the host CuTe cannot convert a pointer to a shared
//     address, so the start field is taken from its pointer arithmetic) decoded by
//     kernels/tc/wgmma_desc.h must address every element (mn, k) exactly where CuTe's
//     swizzled layout puts it;
//   - for the attention kernels' tiles (kernels/tc/wgmma.cuh WgmmaTile), our
//     descriptors must equal CuTe's bit for bit and WgmmaTile::offset CuTe's layout.
// And the register fragments the emulator uses (kernels/tc/wgmma_fragments.h): for every
// thread and value, the accumulator position must be CuTe's CLayout_64xN's (N = 64, 128,
// 256) and the register-A position its ALayout_64x16's.
// Prints one line per check and "mismatches: N"; exits 1 if N > 0.
#include <cstdint>
#include <cstdio>

#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cute/tensor.hpp>

#include "kernels/tc/wgmma.cuh"
#include "kernels/tc/wgmma_fragments.h"

using namespace cute;
using bf16 = cute::bfloat16_t;

namespace {

int g_mismatches = 0;
alignas(1024) bf16 g_buf[128 * 128 * 2];

uint64_t with_start(uint64_t cute_desc, uint32_t start) { return (cute_desc & ~uint64_t(0x3fff)) | ((start >> 4) & 0x3fff); }

uint32_t byte_offset(const void* p) {
  return static_cast<uint32_t>(reinterpret_cast<const char*>(p) - reinterpret_cast<const char*>(g_buf));
}

// The (MN, K) smem layout `layout`, sliced into operands of kMN rows and k-steps of 16;
// `ours(mb, kb)` (0 where there is none): the descriptor our kernels build for operand
// rows [kMN mb, kMN (mb + 1)) and step kb, which must equal CuTe's.
template <GMMA::Major kMajor, int kMN, class Layout, class Ours>
void check(const char* name, Layout layout, Ours ours) {
  Tensor t = make_tensor(make_smem_ptr(g_buf), layout);
  constexpr int MN = size<0>(Layout{}), K = size<1>(Layout{});
  Tensor steps = flat_divide(t, make_shape(Int<kMN>{}, Int<16>{}));  // (kMN, 16, MN/kMN, K/16)
  int bad = 0, bad_desc = 0;
  for (int mb = 0; mb < MN / kMN; ++mb)
    for (int kb = 0; kb < K / 16; ++kb) {
      Tensor s = steps(_, _, mb, kb);
      GmmaDescriptor d = SM90::GMMA::make_gmma_desc<kMajor>(s);
      const uint32_t start = byte_offset(raw_pointer_cast(s.data()));
      const uint64_t full = with_start(d.desc_, start);
      const kdtrain::tc::WgmmaDescFields f = kdtrain::tc::wgmma_decode(full);
      const auto major = kMajor == GMMA::Major::K ? kdtrain::tc::WgmmaMajor::k : kdtrain::tc::WgmmaMajor::mn;
      for (int mn = 0; mn < kMN; ++mn)
        for (int k = 0; k < 16; ++k)
          bad += kdtrain::tc::wgmma_element_address(f, major, mn, k) != byte_offset(&s(mn, k));
      const uint64_t mine = ours(mb, kb);
      if (mine != 0 && mine != full) {
        ++bad_desc;
        std::printf("  rows %d, k-step %d: ours 0x%016llx, CuTe 0x%016llx\n", mb * kMN, kb,
                    static_cast<unsigned long long>(mine), static_cast<unsigned long long>(full));
      }
    }
  std::printf("%-44s element mismatches %d, descriptor mismatches %d\n", name, bad, bad_desc);
  g_mismatches += bad + bad_desc;
}

// WgmmaTile<R, C>::offset against where CuTe's swizzled layout of the same tile puts
// each element; `mn_major`: CuTe's layout is indexed (col, row) (the MN-major view of V).
template <int R, int C, class Layout>
void check_tile(const char* name, Layout layout, bool mn_major) {
  Tensor t = make_tensor(make_smem_ptr(g_buf), layout);
  int bad = 0;
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) {
      const uint32_t cute_off = byte_offset(mn_major ? &t(c, r) : &t(r, c)) / 2;
      bad += static_cast<uint32_t>(kdtrain::tc::WgmmaTile<R, C>::offset(r, c)) != cute_off;
    }
  std::printf("%-44s element mismatches %d\n", name, bad);
  g_mismatches += bad;
}

uint64_t none(int, int) { return 0; }

// A CuTe (thread, value) -> (m, n) layout of an M-row operand (column-major index
// m + M n) against `ours(t, v)`, element by element.
template <int M, int kValues, class Layout, class Ours>
void check_fragment(const char* name, Layout layout, Ours ours) {
  int bad = 0;
  for (int t = 0; t < 128; ++t)
    for (int v = 0; v < kValues; ++v) {
      const int idx = layout(t, v);
      const kdtrain::tc::WgmmaCoord c = ours(t, v);
      bad += c.row != idx % M || c.col != idx / M;
    }
  std::printf("%-44s element mismatches %d\n", name, bad);
  g_mismatches += bad;
}

template <int N>
void check_accumulator() {
  char name[64];
  std::snprintf(name, sizeof name, "accumulator fragment vs CLayout_64x%d", N);
  check_fragment<64, N / 2>(name, SM90::GMMA::CLayout_64xN<N>{}, kdtrain::tc::wgmma_d_coord);
}

}  // namespace

int main() {
  using namespace kdtrain;
  // The attention kernels' tiles: Q/K (K-major, rows x D, operands of 64 rows for each
  // warpgroup's Q or of all 128 keys) and V (MN-major, keys x D).
  using Tile = tc::WgmmaTile<128, 128>;
  auto qk_layout = tile_to_shape(GMMA::Layout_K_SW128_Atom<bf16>{}, Shape<_128, _128>{});
  check<GMMA::Major::K, 64>("kernel Q tile, 64-row slices, K-major 128B", qk_layout,
                            [](int mb, int kb) { return Tile::desc_k_major(0, 64 * mb, kb); });
  check<GMMA::Major::K, 128>("kernel K tile, K-major 128B", qk_layout,
                             [](int, int kb) { return Tile::desc_k_major(0, 0, kb); });
  // V: CuTe's B operand is (N = D, K = keys), N contiguous; k tiles first, as our tile
  // puts 64-column blocks of all rows one after another.
  auto v_layout = tile_to_shape(GMMA::Layout_MN_SW128_Atom<bf16>{}, Shape<_128, _128>{}, Step<_2, _1>{});
  check<GMMA::Major::MN, 128>("kernel V tile, MN-major 128B", v_layout,
                              [](int, int kb) { return Tile::desc_mn_major(0, kb); });
  check_tile<128, 128>("WgmmaTile<128,128>::offset vs K-major 128B", qk_layout, false);
  check_tile<128, 128>("WgmmaTile<128,128>::offset vs MN-major 128B", v_layout, true);
  // Every swizzle mode, both majors (CuTe's own dense tilings).
  check<GMMA::Major::K, 64>("K-major none, 64 x 32", tile_to_shape(GMMA::Layout_K_INTER_Atom<bf16>{}, Shape<_64, _32>{}), none);
  check<GMMA::Major::K, 64>("K-major 32B, 64 x 32", tile_to_shape(GMMA::Layout_K_SW32_Atom<bf16>{}, Shape<_64, _32>{}), none);
  check<GMMA::Major::K, 64>("K-major 64B, 64 x 32", tile_to_shape(GMMA::Layout_K_SW64_Atom<bf16>{}, Shape<_64, _32>{}), none);
  check<GMMA::Major::K, 64>("K-major 128B, 64 x 64", tile_to_shape(GMMA::Layout_K_SW128_Atom<bf16>{}, Shape<_64, _64>{}), none);
  check<GMMA::Major::MN, 128>("MN-major none, 128 x 32", tile_to_shape(GMMA::Layout_MN_INTER_Atom<bf16>{}, Shape<_128, _32>{}), none);
  check<GMMA::Major::MN, 128>("MN-major 32B, 128 x 32", tile_to_shape(GMMA::Layout_MN_SW32_Atom<bf16>{}, Shape<_128, _32>{}), none);
  check<GMMA::Major::MN, 128>("MN-major 64B, 128 x 32", tile_to_shape(GMMA::Layout_MN_SW64_Atom<bf16>{}, Shape<_128, _32>{}), none);
  check<GMMA::Major::MN, 128>("MN-major 128B, 128 x 32", tile_to_shape(GMMA::Layout_MN_SW128_Atom<bf16>{}, Shape<_128, _32>{}), none);
  // The register fragments: accumulators of every N the kernels use (and the largest),
  // A from registers (bf16: two elements per register, CuTe's value index is ours).
  check_accumulator<64>();
  check_accumulator<128>();
  check_accumulator<256>();
  check_fragment<64, 8>("register A fragment vs ALayout_64x16", SM90::GMMA::ALayout_64x16{}, kdtrain::tc::wgmma_a_coord);
  std::printf("mismatches: %d\n", g_mismatches);
  return g_mismatches == 0 ? 0 : 1;
}
