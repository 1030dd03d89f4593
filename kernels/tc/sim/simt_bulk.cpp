// SIMT emulator: bulk copies and reductions from shared to global memory with bulk-group
// completion (kernels/tc/bulk.cuh). Model: simt_bulk.h.
#include "kernels/tc/sim/simt_bulk.h"

#include <cstring>
#include <deque>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/tc/sim/simt_internal.h"

namespace kdtrain::sim {
namespace detail {

namespace {

struct BulkCopy {
  unsigned char* dst;
  const unsigned char* src;
  std::vector<unsigned char> data;  // the source as captured at issue
  BulkOp op;
  uint64_t id;  // its entry in the launch's in-flight writes
  bool read_retired = false;
};

using BulkGroup = std::vector<BulkCopy>;

struct ThreadBulk {
  BulkGroup open;
  std::deque<BulkGroup> groups;  // committed, oldest first
};

}  // namespace

struct BulkState {
  std::vector<ThreadBulk> threads;
};

namespace {

// Global bytes that issued bulk operations of any block of the launch will write and no
// full wait_group has completed yet: another bulk operation to any of them is unordered
// with it (a data race; for two reductions, an order that depends on timing).
struct InFlight {
  const unsigned char *lo, *hi;
  uint64_t id;
};
thread_local std::vector<InFlight> g_in_flight;
thread_local uint64_t g_next_id = 0;

void check_unordered(const unsigned char* lo, const unsigned char* hi) {
  for (const InFlight& w : g_in_flight)
    if (lo < w.hi && w.lo < hi)
      fail("bulk copy: its global destination overlaps a bulk write still in flight (issued, not yet retired by a "
           "cp.async.bulk.wait_group): the two are unordered, e.g. a semaphore released before the bulk wait");
}

void forget(const BulkCopy& c) {
  for (size_t k = 0; k < g_in_flight.size(); ++k)
    if (g_in_flight[k].id == c.id) {
      g_in_flight[k] = g_in_flight.back();
      g_in_flight.pop_back();
      return;
    }
}

ThreadBulk& thread_bulk(BlockRun& r) {
  if (!r.bulk) r.bulk = std::make_shared<BulkState>();
  if (r.bulk->threads.size() < r.fibers->size()) r.bulk->threads.resize(r.fibers->size());
  return r.bulk->threads[r.current->linear];
}

void retire_read(const BulkCopy& c) {
  if (std::memcmp(c.src, c.data.data(), c.data.size()) != 0)
    fail("bulk copy: its shared-memory source was written before cp.async.bulk.wait_group(.read) retired it");
}

void perform_writes(const BulkCopy& c) {
  forget(c);
  if (c.op == BulkOp::store) {
    std::memcpy(c.dst, c.data.data(), c.data.size());
    return;
  }
  for (size_t k = 0; k < c.data.size(); k += 4) {
    float acc, add;
    std::memcpy(&acc, c.dst + k, 4);
    std::memcpy(&add, c.data.data() + k, 4);
    acc += add;
    std::memcpy(c.dst + k, &acc, 4);
  }
}

}  // namespace

void begin_bulk_launch() { g_in_flight.clear(); }

void reset_bulk(BlockRun& r) { r.bulk.reset(); }

void finish_bulk(BlockRun& r) {
  if (!r.bulk) return;
  for (size_t t = 0; t < r.bulk->threads.size(); ++t) {
    const ThreadBulk& b = r.bulk->threads[t];
    if (b.open.empty() && b.groups.empty()) continue;
    std::ostringstream s;
    s << "sim: block (" << r.block.x << "," << r.block.y << "," << r.block.z << ") thread " << t
      << " exited with bulk copies never retired by cp.async.bulk.wait_group";
    throw std::runtime_error(s.str());
  }
}

}  // namespace detail

using namespace detail;

void note_shared_store(const void* smem, size_t bytes) {
  BlockRun& r = current_run();
  check_shared(smem, bytes, "shared store");
  const auto* p = static_cast<const unsigned char*>(smem);
  const size_t first = static_cast<size_t>(p - r.smem) / 16, last = static_cast<size_t>(p + bytes - 1 - r.smem) / 16;
  for (size_t c = first; c <= last; ++c) note_cp_async_landing(r, *r.current, r.smem + 16 * c);
}

void bulk_shared_to_global(void* gmem, const void* smem, uint32_t bytes, BulkOp op) {
  BlockRun& r = current_run();
  if (bytes == 0 || bytes % 16 != 0) fail("bulk copy: size " + std::to_string(bytes) + " is not a positive multiple of 16");
  check_shared(smem, bytes, "bulk copy source");
  check_aligned16(smem, "bulk copy source");
  check_aligned16(gmem, "bulk copy destination");
  const auto* src = static_cast<const unsigned char*>(smem);
  const size_t first = static_cast<size_t>(src - r.smem) / 16;
  for (size_t c = first; c < first + bytes / 16; ++c)
    if (r.unfenced_owner[c] != 0) {
      std::ostringstream s;
      s << "bulk copy: shared bytes [" << 16 * c << ", +16) written by thread " << r.unfenced_owner[c] - 1
        << " are read by the async proxy without a fence.proxy.async by that thread";
      fail(s.str());
    }
  // Untracked plain stores too: the source must equal what the last fence published.
  check_async_proxy_read(r, static_cast<uint32_t>(src - r.smem), bytes, "bulk copy");
  auto* dst = static_cast<unsigned char*>(gmem);
  check_unordered(dst, dst + bytes);
  ThreadBulk& t = thread_bulk(r);
  const uint64_t id = g_next_id++;
  t.open.push_back(BulkCopy{dst, src, std::vector<unsigned char>(src, src + bytes), op, id});
  g_in_flight.push_back(InFlight{dst, dst + bytes, id});
}

void bulk_commit() {
  ThreadBulk& t = thread_bulk(current_run());
  t.groups.push_back(std::move(t.open));
  t.open.clear();
}

void bulk_wait(int pending_groups, bool read_only) {
  ThreadBulk& t = thread_bulk(current_run());
  const size_t keep = static_cast<size_t>(pending_groups);
  for (size_t g = 0; g + keep < t.groups.size(); ++g)
    for (BulkCopy& c : t.groups[g])
      if (!c.read_retired) {
        retire_read(c);
        c.read_retired = true;
      }
  if (read_only) return;
  while (t.groups.size() > keep) {
    for (const BulkCopy& c : t.groups.front()) perform_writes(c);
    t.groups.pop_front();
  }
}

}  // namespace kdtrain::sim
