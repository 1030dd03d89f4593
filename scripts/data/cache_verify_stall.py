#!/usr/bin/env python3
"""A model of the time a run waits for teacher-cache shard checksums
(docs/distillation.md, "Reading during training"): an estimate, not a measurement.

A shard's checksum (one pass over every byte, v seconds per shard on one core)
is summed before the first read of a window of it returns. The sampler shuffles
every window of the cache, so early micro-batches touch shards not summed yet.
The model draws micro-batches of B windows uniformly over S shards; each
computes for c seconds. The reader thread reads (and sums the new shards of)
micro-batch m+1 while m computes; the step waits for what is left.

  reader: only the reader thread sums (kdtrain before the verifier thread).
  ahead:  a verifier thread also sums, in the order the run first reads them,
          the shards of later micro-batches; the reader sums the shards of its
          micro-batch no thread has taken, and waits for one the verifier is at.

Prints the total wait per run for each (S, c) given.
"""
import argparse
import random

INF = float("inf")


def micro_batches(shards, batch, seed):
    """Micro-batches of `batch` window shards until about every shard was read."""
    rng = random.Random(seed)
    return [[rng.randrange(shards) for _ in range(batch)] for _ in range(int(shards * 12 / batch))]


def total_wait(shards, batch, compute_s, sum_s, ahead, seed=1):
    """Seconds the steps wait for checksums over the run's first epoch-like stretch."""
    seq = micro_batches(shards, batch, seed)
    order = list(dict.fromkeys(s for mb in seq for s in mb))  # first-read order
    done = [INF] * shards  # when each shard's sum is (or will be) finished
    v = {"next": 0, "free": 0.0, "shard": None, "end": 0.0}  # the verifier thread

    def advance(until):
        """The verifier's work up to time `until`."""
        while ahead:
            if v["shard"] is not None:
                if v["end"] > until:
                    return
                done[v["shard"]] = min(done[v["shard"]], v["end"])
                v["free"], v["shard"] = v["end"], None
            while v["next"] < len(order) and done[order[v["next"]]] != INF:
                v["next"] += 1
            if v["next"] == len(order) or v["free"] > until:
                return
            v["shard"], v["end"] = order[v["next"]], v["free"] + sum_s
            v["next"] += 1

    start_compute = reader_free = wait = 0.0
    for m, mb in enumerate(seq):
        t = max(reader_free, start_compute - compute_s if m else 0.0)
        while True:  # the reader sums the shards no thread has taken
            advance(t)
            free = [s for s in dict.fromkeys(mb) if done[s] == INF and s != v["shard"]]
            if not free:
                break
            t += sum_s
            done[free[0]] = t
        ready = max([t] + [done[s] for s in mb if done[s] != INF] + ([v["end"]] if v["shard"] in mb else []))
        advance(ready)
        reader_free = ready
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
    a = p.parse_args()
    print("shards  compute_s  all_sums_s  wait_reader_s  wait_ahead_s")
    for s in a.shards:
        for c in a.compute_s:
            print(f"{s:6d}  {c:9.3f}  {s * a.sum_s:10.0f}  {total_wait(s, a.batch, c, a.sum_s, False):13.0f}  "
                  f"{total_wait(s, a.batch, c, a.sum_s, True):12.0f}")


if __name__ == "__main__":
    main()
