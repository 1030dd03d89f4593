"""scripts/data/cache_verify_stall.py, the checksum-wait model of docs/distillation.md:
cases whose answer is known by hand, verifier threads never adding to the wait while the
cores set the pace, the disk term (sum_seconds) once the disk does, and the ranks of a
node sharing one table of summed shards (ranks > 1)."""
import pytest

from cache_verify_stall import micro_batches, sum_seconds, total_wait


def test_one_shard_is_summed_once_before_the_first_step():
    # Nothing computes before the first micro-batch: its shard's sum is all waited for.
    for threads in (0, 1, 4):
        assert total_wait(1, 1, 1.0, 0.25, threads) == pytest.approx(0.25)


def test_sums_shorter_than_a_step_hide_behind_it_after_the_first():
    # Each micro-batch's new shards (at most 2, 0.1 s each) take less than a step (1 s):
    # only the first micro-batch waits, for its own shards (the verifier sums one of two
    # beside the reader).
    first = total_wait(20, 2, 1.0, 0.1, 0, seed=3)
    assert 0.1 - 1e-9 <= first <= 0.2 + 1e-9
    assert 0.1 - 1e-9 <= total_wait(20, 2, 1.0, 0.1, 1, seed=3) <= first + 1e-9


def test_the_first_micro_batch_sums_its_shards_on_the_reader_and_every_thread_at_once():
    # 3 shards, all in the first micro-batch; a step hides everything after it.
    assert set(micro_batches(3, 32, 1)[0]) == {0, 1, 2}
    assert total_wait(3, 32, 100.0, 0.25, 0) == pytest.approx(0.75)  # one after another
    assert total_wait(3, 32, 100.0, 0.25, 1) == pytest.approx(0.5)   # two at once, then one
    assert total_wait(3, 32, 100.0, 0.25, 2) == pytest.approx(0.25)  # all three at once
    assert total_wait(3, 32, 100.0, 0.25, 4) == pytest.approx(0.25)  # idle threads add nothing


@pytest.mark.parametrize("compute_s", [0.05, 0.2, 1.0])
def test_verifier_threads_never_make_the_wait_longer(compute_s):
    waits = [total_wait(300, 8, compute_s, 0.22, n) for n in (0, 1, 2, 4)]
    assert all(more <= fewer + 1e-9 for fewer, more in zip(waits, waits[1:]))
    assert waits[0] <= 300 * 0.22  # never more than summing every shard in turn


def test_reader_only_waits_for_every_sum_that_a_step_does_not_hide():
    # Compute takes no time: the run waits for every shard's sum, one after another.
    assert total_wait(50, 4, 0.0, 0.1, 0) == pytest.approx(50 * 0.1)


def test_a_sum_takes_the_longer_of_the_core_and_the_ranks_share_of_the_disk():
    assert sum_seconds(0.22, 1.0, None, 8, 4) == 0.22  # the cache in memory
    assert sum_seconds(0.22, 1.0, 1000.0, 8, 4) == 0.22  # 125 GB/s a rank: the core is slower
    # 16 GB/s over 8 ranks: 2 GB/s a rank, split among 4 threads: 2 s a 1 GB shard.
    assert sum_seconds(0.22, 1.0, 16.0, 8, 4) == pytest.approx(2.0)
    assert sum_seconds(0.22, 1.0, 16.0, 8, 0) == pytest.approx(0.5)  # the reader alone


def test_on_a_slow_disk_more_threads_finish_the_first_shards_later():
    # The three-shard case above with a disk of 4 GB/s (one rank, 1 GB shards): the
    # reader alone reads at 4 GB/s (0.25 s a shard, one after another); 2 threads read at
    # 2 GB/s each (0.5 s, the reader's third shard alongside: the model does not charge the
    # reader's own sums to the disk); 4 threads at 1 GB/s (1 s, all three at once).
    def wait(threads):
        return total_wait(3, 32, 100.0, sum_seconds(0.25, 1.0, 4.0, 1, threads), threads)
    assert wait(0) == pytest.approx(0.75)
    assert wait(2) == pytest.approx(0.5)
    assert wait(4) == pytest.approx(1.0)


def test_ranks_sharing_a_table_split_the_first_shards_between_their_readers_and_threads():
    # The three-shard case above on 2 ranks of a node sharing one table: the two readers
    # take a shard each, then one takes the third (0.5 s, against 0.75 for one rank); with
    # a thread per rank, the two threads and a reader take all three at once.
    assert total_wait(3, 32, 100.0, 0.25, 0, ranks=2) == pytest.approx(0.5)
    assert total_wait(3, 32, 100.0, 0.25, 1, ranks=2) == pytest.approx(0.25)
    assert total_wait(3, 32, 100.0, 0.25, 0, ranks=3) == pytest.approx(0.25)


@pytest.mark.parametrize("threads", [0, 1, 4])
def test_a_node_sharing_its_table_waits_no_longer_than_one_rank_summing_alone(threads):
    # 8 ranks share the sums one rank would do by itself: the node, stepping with its
    # slowest rank, still waits less than one rank that sums every shard it reads.
    alone = total_wait(400, 8, 0.1, 0.22, threads)
    shared = total_wait(400, 8, 0.1, 0.22, threads, ranks=8)
    assert shared < alone
