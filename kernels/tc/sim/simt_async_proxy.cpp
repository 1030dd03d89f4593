// SIMT emulator: what the async proxy (wgmma operand reads, and any other reader of shared
// memory through it) may see, and fence.proxy.async. Model: simt.h.
//
// Shared memory written through the generic proxy is visible to the async proxy only
// after a fence.proxy.async by the writing thread (PTX ISA, memory consistency model:
// proxies). Two writers are tracked:
// - cp.async landings, per thread and 16-byte chunk: the landing thread must fence them;
// - plain stores, which the emulator cannot attribute to a thread: async_view holds the
//   shared memory as of the last fence.proxy.async of any thread, and an async read of a
//   byte that differs from it is a store no fence has followed. A fence by another
//   thread than the writer is therefore not caught (documented in simt.h).
#include <algorithm>
#include <cstring>
#include <sstream>

#include "kernels/tc/sim/simt_internal.h"

namespace kdtrain::sim {
namespace detail {

void note_cp_async_landing(BlockRun& r, Fiber& f, const unsigned char* dst) {
  const auto chunk = static_cast<uint32_t>((dst - r.smem) / 16);
  r.unfenced_owner[chunk] = f.linear + 1;
  f.unfenced_chunks.push_back(chunk);
}

void reset_async_proxy(BlockRun& r) {
  std::fill(r.unfenced_owner.begin(), r.unfenced_owner.end(), 0u);
  r.async_view.assign(r.smem, r.smem + r.smem_bytes);
}

void check_async_proxy_read(BlockRun& r, uint32_t addr, uint32_t bytes, const char* reader) {
  check_shared(r.smem + addr, bytes, reader);
  for (uint32_t c = addr / 16; c <= (addr + bytes - 1) / 16; ++c)
    if (r.unfenced_owner[c] != 0) {
      std::ostringstream s;
      s << reader << " reads shared memory (byte " << addr << ") that thread " << r.unfenced_owner[c] - 1
        << " landed by cp.async without a following fence.proxy.async";
      fail(s.str());
    }
  if (std::memcmp(r.smem + addr, r.async_view.data() + addr, bytes) != 0) {
    std::ostringstream s;
    s << reader << " reads shared memory (byte " << addr
      << ") written by a plain store (st.shared) with no fence.proxy.async after it";
    fail(s.str());
  }
}

}  // namespace detail

using namespace detail;

void fence_proxy_async() {
  BlockRun& r = current_run();
  Fiber& f = *r.current;
  for (uint32_t c : f.unfenced_chunks)
    if (r.unfenced_owner[c] == f.linear + 1) r.unfenced_owner[c] = 0;
  f.unfenced_chunks.clear();
  // Publish every store made so far; compared page by page, copied where it changed
  // (most fences find most of shared memory as the last one left it).
  constexpr size_t kPage = 4096;
  for (size_t at = 0; at < r.smem_bytes; at += kPage) {
    const size_t n = std::min(kPage, r.smem_bytes - at);
    if (std::memcmp(r.smem + at, r.async_view.data() + at, n) != 0) std::memcpy(r.async_view.data() + at, r.smem + at, n);
  }
}

}  // namespace kdtrain::sim
