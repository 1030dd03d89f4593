// The emulator's bulk operations from shared to global memory (kernels/tc/sim/simt_bulk.cpp,
// kernels/tc/bulk.cuh), against the PTX ISA's rules for cp.async.bulk and
// cp.reduce.async.bulk with bulk-group completion: the global writes land no earlier than
// the wait_group that retires them (not at wait_group.read), the source must be proxy-fenced
// by its writers, must not change before the reads retire, and every group must be retired
// before the thread exits, and no two bulk writes to the same bytes may be in flight
// together (in the concurrent-blocks mode: a semaphore released before the bulk wait).
#include <catch2/catch.hpp>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/tc/bulk.cuh"
#include "kernels/tc/sync.cuh"
#include "kernels/tc/wgmma.cuh"

using namespace kdtrain;

namespace {

constexpr int kThreads = 64;
constexpr int kFloats = 4 * kThreads;  // one 16-byte chunk per thread

sim::LaunchConfig block_of(sim::Schedule s, unsigned blocks = 1, unsigned resident = 1) {
  sim::LaunchConfig c;
  c.grid = {blocks, 1, 1};
  c.block = {kThreads, 1, 1};
  c.shared_bytes = sizeof(float) * kFloats;
  c.schedule = s;
  c.seed = 11;
  c.resident_blocks = resident;
  return c;
}

// Every thread stages 4 floats (value base + index), fenced unless told otherwise.
void stage(unsigned char* smem, float base, bool fence = true) {
  const int t = static_cast<int>(tc::thread_idx().x);
  const float v[4] = {base + 4 * t, base + 4 * t + 1, base + 4 * t + 2, base + 4 * t + 3};
  tc::store_shared4(reinterpret_cast<float*>(smem) + 4 * t, v);
  if (fence) tc::fence_proxy_async();
  tc::sync_block();
}

std::string error_of(const sim::LaunchConfig& c, const std::function<void(unsigned char*)>& body) {
  try {
    sim::launch(c, body);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return {};
}

// The error of a block whose threads stage their floats, fenced, before thread 0 alone runs `thread0`.
std::string error_after_staging(const sim::LaunchConfig& c, const std::function<void(unsigned char*)>& thread0) {
  return error_of(c, [&](unsigned char* smem) {
    stage(smem, 0.f);
    if (tc::thread_idx().x == 0) thread0(smem);
  });
}

}  // namespace

TEST_CASE("sim bulk copies: a store and a reduction land at the full wait_group, not before", "[sim][bulk]") {
  for (sim::Schedule s : {sim::Schedule::forward, sim::Schedule::reverse, sim::Schedule::shuffled}) {
    std::vector<float> stored(kFloats, -1.f), summed(kFloats, 0.5f);
    float seen_after_read = 0, seen_after_wait = 0;
    sim::launch(block_of(s), [&](unsigned char* smem) {
      stage(smem, 1.f);
      if (tc::thread_idx().x != 0) return;
      const auto* src = reinterpret_cast<const float*>(smem);
      tc::bulk_store(stored.data(), src, sizeof(float) * kFloats);
      tc::bulk_reduce_add_f32(summed.data(), src, sizeof(float) * kFloats);
      tc::bulk_commit();
      tc::bulk_wait_read<0>();
      seen_after_read = stored[5];
      tc::bulk_wait<0>();
      seen_after_wait = stored[5];
    });
    INFO("schedule " << static_cast<int>(s));
    CHECK(seen_after_read == -1.f);  // .read retires the source reads only
    CHECK(seen_after_wait == 6.f);
    for (int k = 0; k < kFloats; ++k) {
      CHECK(stored[k] == 1.f + k);
      CHECK(summed[k] == 1.5f + k);
    }
  }
}

TEST_CASE("sim bulk copies: wait_group N leaves the N newest groups in flight", "[sim][bulk]") {
  std::vector<float> a(kFloats, 0.f), b(kFloats, 0.f);
  float b_after_first = -1;
  sim::launch(block_of(sim::Schedule::forward), [&](unsigned char* smem) {
    stage(smem, 0.f);
    if (tc::thread_idx().x != 0) return;
    const auto* src = reinterpret_cast<const float*>(smem);
    tc::bulk_store(a.data(), src, sizeof(float) * kFloats);
    tc::bulk_commit();
    tc::bulk_store(b.data(), src, sizeof(float) * kFloats);
    tc::bulk_commit();
    tc::bulk_wait<1>();
    b_after_first = b[3];
    tc::bulk_wait<0>();
  });
  CHECK(a[3] == 3.f);
  CHECK(b_after_first == 0.f);
  CHECK(b[3] == 3.f);
}

TEST_CASE("sim bulk copies: misuse the hardware forbids is an error", "[sim][bulk]") {
  const sim::LaunchConfig c = block_of(sim::Schedule::forward);
  std::vector<float> out(kFloats + 4, 0.f);
  float* dst = out.data();
  auto issue_all = [dst](unsigned char* smem) {
    tc::bulk_reduce_add_f32(dst, reinterpret_cast<const float*>(smem), sizeof(float) * kFloats);
    tc::bulk_commit();
  };
  // A writer that did not fence its st.shared before the barrier.
  CHECK_THAT(error_of(c,
                      [&](unsigned char* smem) {
                        stage(smem, 0.f, tc::thread_idx().x != 17);
                        if (tc::thread_idx().x == 0) {
                          issue_all(smem);
                          tc::bulk_wait<0>();
                        }
                      }),
             Catch::Contains("without a fence.proxy.async by that thread") && Catch::Contains("thread 17"));
  // A plain (untracked) store after the fences, read by the bulk copy.
  CHECK_THAT(error_after_staging(c,
                                 [&](unsigned char* smem) {
                                   reinterpret_cast<float*>(smem)[3] = 9.f;
                                   issue_all(smem);
                                   tc::bulk_wait<0>();
                                 }),
             Catch::Contains("plain store"));
  // The source rewritten before wait_group.read retired the reads.
  CHECK_THAT(error_after_staging(c,
                                 [&](unsigned char* smem) {
                                   issue_all(smem);
                                   tc::store_shared(reinterpret_cast<float*>(smem) + 9, 42.f);
                                   tc::bulk_wait<0>();
                                 }),
             Catch::Contains("source was written before"));
  // A thread that exits with a group in flight (its writes would never be ordered).
  CHECK_THAT(error_after_staging(c,
                                 [&](unsigned char* smem) {
                                   issue_all(smem);
                                   tc::bulk_wait_read<0>();
                                 }),
             Catch::Contains("never retired by cp.async.bulk.wait_group"));
  // Sizes and alignment.
  CHECK_THAT(error_after_staging(c, [&](unsigned char* smem) { tc::bulk_store(dst, smem, 24); }),
             Catch::Contains("not a positive multiple of 16"));
  CHECK_THAT(error_after_staging(c, [&](unsigned char* smem) { tc::bulk_store(dst + 1, smem, 16); }),
             Catch::Contains("not 16-byte aligned"));
}

TEST_CASE("sim bulk copies: a release before the bulk wait is caught between blocks running together",
          "[sim][bulk][concurrent]") {
  // Block 0 stores its tile (1, 2, ...), block 1 adds its own (1000, 1001, ...) after
  // acquiring the semaphore block 0 releases. Block 0 passes three barriers first, so block
  // 1 is already waiting when the release comes and runs at once: released before block
  // 0's bulk wait, block 1's reduction is issued while block 0's store is in flight.
  for (bool release_first : {false, true}) {
    std::vector<float> acc(kFloats, -7.f);
    int sem = 0, ticket = 0;
    const std::string error = error_of(block_of(sim::Schedule::forward, 2, 2), [&](unsigned char* smem) {
      int* t = reinterpret_cast<int*>(smem) + kFloats - 1;  // the ticket, past the staged data
      if (tc::thread_idx().x == 0) *t = tc::atomic_add(&ticket, 1);
      tc::sync_block();
      const int me = *t;
      tc::sync_block();
      const auto* src = reinterpret_cast<const float*>(smem);
      const uint32_t bytes = sizeof(float) * (kFloats - 4);
      if (me == 0) {
        for (int k = 0; k < 3; ++k) tc::sync_block();
        stage(smem, 1.f);
        if (tc::thread_idx().x != 0) return;
        tc::bulk_store(acc.data(), src, bytes);
        tc::bulk_commit();
        if (release_first) tc::store_release(&sem, 1);
        tc::bulk_wait<0>();
        if (!release_first) tc::store_release(&sem, 1);
      } else {
        stage(smem, 1000.f);
        if (tc::thread_idx().x != 0) return;
        tc::wait_equal(&sem, 1);
        tc::bulk_reduce_add_f32(acc.data(), src, bytes);
        tc::bulk_commit();
        tc::bulk_wait<0>();
      }
    });
    INFO("release before the bulk wait: " << release_first);
    if (release_first) {
      CHECK_THAT(error, Catch::Contains("overlaps a bulk write still in flight"));
      continue;
    }
    CHECK(error.empty());
    bool sums = true;
    for (int k = 0; k < kFloats - 4; ++k) sums = sums && acc[k] == 1001.f + 2 * k;
    CHECK(sums);
  }
}

TEST_CASE("sim bulk copies: two bulk writes to the same bytes need a wait between them", "[sim][bulk]") {
  std::vector<float> out(kFloats, 0.f);
  auto twice = [&](bool wait_between) {
    return error_of(block_of(sim::Schedule::forward), [&](unsigned char* smem) {
      stage(smem, 0.f);
      if (tc::thread_idx().x != 0) return;
      const auto* src = reinterpret_cast<const float*>(smem);
      tc::bulk_store(out.data(), src, 64);
      tc::bulk_commit();
      if (wait_between) tc::bulk_wait<0>();
      tc::bulk_reduce_add_f32(out.data() + 8, src, 64);  // bytes 32..95: overlaps 32..63
      tc::bulk_commit();
      tc::bulk_wait<0>();
    });
  };
  CHECK(twice(true).empty());
  CHECK_THAT(twice(false), Catch::Contains("overlaps a bulk write still in flight"));
}
