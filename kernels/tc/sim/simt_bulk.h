// Host SIMT emulator: the sm_90 bulk operations from shared to global memory
// (kernels/tc/bulk.cuh), modelled on the PTX ISA's cp.async.bulk / cp.reduce.async.bulk
// with .bulk_group completion. Implementation: simt_bulk.cpp; the rest of the model: simt.h.
//
// Model:
// - A bulk operation is issued by one thread; it joins that thread's open bulk group,
//   which bulk_commit() closes. Source and destination 16-byte aligned, size a positive
//   multiple of 16, the source inside the block's shared memory.
// - Source: read through the async proxy. Every 16-byte chunk of it written by a tracked
//   generic store (note_shared_store: tc::store_shared4 / store_shared) or landed by
//   cp.async must have been followed by fence.proxy.async in the writing thread before the
//   issue, else the issue is an error; untracked plain stores are caught by the async
//   proxy's image of shared memory (simt_async_proxy.cpp: a fence by any thread publishes). The source is captured at issue and compared when
//   the group's reads retire (wait_group.read or wait_group): a change in between is an
//   error (hardware may read it at any time until then).
// - Destination: the global writes (store, or one fp32 round-to-nearest addition per
//   element for add_f32) are performed when a full wait_group retires the group, the
//   latest time the ISA allows, so a semaphore released before that wait lets the next
//   contributor's operation land first (the concurrent-blocks mode then shows it).
// - Issuing a bulk operation whose global destination overlaps one still in flight (issued
//   by any thread of any resident block, not yet retired by a full wait_group) is an
//   error: the two writes are unordered. Between blocks this is what a semaphore released
//   before the bulk wait allows.
// - A thread that exits with bulk groups not retired by a full wait_group is an error.
// - Not modelled: subnormal handling of .add.f32 (flush to zero or not is not stated here).
#pragma once
#include <cstddef>
#include <cstdint>

namespace kdtrain::sim {

enum class BulkOp { store, add_f32 };

void note_shared_store(const void* smem, size_t bytes);
void bulk_shared_to_global(void* gmem, const void* smem, uint32_t bytes, BulkOp op);
void bulk_commit();
void bulk_wait(int pending_groups, bool read_only);

}  // namespace kdtrain::sim
