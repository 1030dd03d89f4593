"""scripts/data/cache_verify_stall.py, the checksum-wait model of docs/distillation.md:
cases whose answer is known by hand, and verifier threads never adding to the wait."""
import pytest

from cache_verify_stall import micro_batches, total_wait


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
