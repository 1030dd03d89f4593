#!/usr/bin/env python3
"""A model of the time a run waits for teacher-cache shard checksums
(docs/cache_checksums.md): an estimate, not a measurement.

A shard's checksum (one pass over every byte, v seconds per shard on one core)
is summed before the first read of a window of it returns. The sampler shuffles
every window of the cache, so early micro-batches touch shards not summed yet.
The model draws micro-batches of B windows uniformly over S shards; each
computes for c seconds. The reader thread reads (and sums the new shards of)
micro-batch m+1 while m computes; the step waits for what is left.

N verifier threads (kd.cache_verify_threads; N = 0: the reader alone, kdtrain
before the verifier) each take, as soon as they are free, the next shard no
thread has taken, in the order the run first reads them; the reader sums the
shards of its micro-batch no thread has taken, and waits for those a verifier
is at. A shard is taken once: its finishing time is fixed when it is taken.

The disk (optional, --disk-gbs): when the cache is not in the page cache, every
sum also reads its shard, and the ranks of a node share the node's disk (each
rank sums every shard it reads: nearly all of them, so R ranks read the cache R
times over, unless they share one table: --node-shared). A sum then takes the
longer of v and the shard's bytes at the rank's share divided among the N threads
summing at once (the reader alone when N = 0): sum_seconds.

--node-shared: the R ranks of a node share one table (data/shard_checks.h), so the
node sums each shard once, on whichever rank's thread or reader takes it first; the
ranks are simulated together, each with its own micro-batches, stepping together.

Prints the total wait per run for each (S, c) and each N given.
"""
import argparse
import heapq
import random

INF = float("inf")


def micro_batches(shards, batch, seed):
    """Micro-batches of `batch` window shards until about every shard was read."""
    rng = random.Random(seed)
    return [[rng.randrange(shards) for _ in range(batch)] for _ in range(int(shards * 12 / batch))]


def sum_seconds(core_s, shard_gb, disk_gbs, ranks_per_node, threads):
    """Seconds to sum one shard: core_s on one core, or, with a disk of disk_gbs GB/s
    shared by ranks_per_node ranks each running max(threads, 1) sums at once, the
    shard's read at that share when longer. disk_gbs None: the cache is in memory. The
    reader's own sums (shards no thread has taken: early in a run) are not counted
    against the disk beside the threads', an underestimate of the wait there, and the
    share is assumed reachable by any number of readers."""
    if not disk_gbs:
        return core_s
    return max(core_s, shard_gb * max(threads, 1) * ranks_per_node / disk_gbs)


def total_wait(shards, batch, compute_s, sum_s, threads, seed=1, ranks=1):
    """Seconds the steps wait for checksums over the run's first epoch-like stretch,
    with `threads` verifier threads beside each rank's reader. ranks > 1: the ranks of
    a node share one table of summed shards (kdtrain's node table): a shard any rank's
    thread or reader took is taken for all. Each rank draws its own micro-batches and
    its threads follow its own first-read order; the ranks step together (the gradient
    reduction), so a micro-batch starts when every rank's is ready."""
    seqs = [micro_batches(shards, batch, seed + r) for r in range(ranks)]
    orders = [list(dict.fromkeys(s for mb in seq for s in mb)) for seq in seqs]  # first-read orders
    done = [INF] * shards  # when each taken shard's sum is (or will be) finished
    free = [[0.0] * threads for _ in range(ranks)]  # when each rank's threads are next free (heaps)
    nxt = [0] * ranks  # per rank, the first of its order no verifier of it has passed

    def advance(r, until):
        """Rank r's verifiers' takes up to time `until`."""
        order, heap = orders[r], free[r]
        while heap and heap[0] <= until:
            while nxt[r] < len(order) and done[order[nxt[r]]] != INF:
                nxt[r] += 1
            if nxt[r] == len(order):
                return
            end = heapq.heappop(heap) + sum_s
            done[order[nxt[r]]] = end
            heapq.heappush(heap, end)

    start_compute = wait = 0.0
    reader_free = [0.0] * ranks
    for m in range(len(seqs[0])):
        # The readers sum the shards of their micro-batch no thread has taken, in
        # time order across the ranks (the earliest reader takes the next shard).
        t = [max(reader_free[r], start_compute - compute_s if m else 0.0) for r in range(ranks)]
        pending = set(range(ranks))
        while pending:
            r = min(pending, key=lambda q: (t[q], q))
            for q in range(ranks):
                advance(q, t[r])
            untaken = [s for s in dict.fromkeys(seqs[r][m]) if done[s] == INF]
            if not untaken:
                pending.discard(r)
                continue
            t[r] += sum_s
            done[untaken[0]] = t[r]
        for r in range(ranks):
            reader_free[r] = max([t[r]] + [done[s] for s in seqs[r][m]])
        ready = max(reader_free)
        wait += max(0.0, ready - start_compute)
        start_compute = max(start_compute, ready) + compute_s
    return wait


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shards", type=int, nargs="+", default=[5000, 1000])
    p.add_argument("--compute-s", type=float, nargs="+", default=[0.115, 0.31, 0.8],
                   help="seconds per micro-batch (8 x 2048 tokens: 0.5B, 1B, 3B at the cost model's rate)")
    p.add_argument("--batch", type=int, default=8, help="windows per micro-batch")
    p.add_argument("--sum-s", type=float, default=0.22, help="seconds to sum one shard on one core")
    p.add_argument("--threads", type=int, nargs="+", default=[0, 1, 2, 4],
                   help="verifier threads beside the reader (0: the reader alone)")
    p.add_argument("--disk-gbs", type=float, help="the node's disk read rate, GB/s (default: the cache is in memory)")
    p.add_argument("--ranks-per-node", type=int, default=8,
                   help="ranks sharing the node's disk (with --disk-gbs) and its table (with --node-shared)")
    p.add_argument("--node-shared", action="store_true",
                   help="the node's ranks share one table of summed shards (kdtrain since 2026-11-28): "
                        "simulate them together")
    p.add_argument("--shard-gb", type=float, default=1.074, help="bytes per shard, GB (with --disk-gbs; 1 GiB)")
    a = p.parse_args()
    if a.disk_gbs:
        print(f"disk {a.disk_gbs} GB/s shared by {a.ranks_per_node} ranks, {a.shard_gb} GB shards")
    if a.node_shared:
        print(f"one table of summed shards for the node's {a.ranks_per_node} ranks")
    ranks = a.ranks_per_node if a.node_shared else 1
    print("shards  compute_s  all_sums_s  " + "  ".join(f"wait_{n}_verifiers_s" for n in a.threads))
    for s in a.shards:
        for c in a.compute_s:
            waits = []
            for n in a.threads:
                sum_s = sum_seconds(a.sum_s, a.shard_gb, a.disk_gbs, a.ranks_per_node, n)
                waits.append(f"{total_wait(s, a.batch, c, sum_s, n, ranks=ranks):{len(f'wait_{n}_verifiers_s')}.0f}")
            waits = "  ".join(waits)
            print(f"{s:6d}  {c:9.3f}  {s * a.sum_s:10.0f}  {waits}")


if __name__ == "__main__":
    main()
