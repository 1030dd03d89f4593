"""scripts/data/cache_verify_stall.py, the checksum-wait model of docs/distillation.md:
cases whose answer is known by hand, and the verifier never adding to the wait."""
import pytest

from cache_verify_stall import total_wait


def test_one_shard_is_summed_once_before_the_first_step():
    # Nothing computes before the first micro-batch: its shard's sum is all waited for.
    for ahead in (False, True):
        assert total_wait(1, 1, 1.0, 0.25, ahead) == pytest.approx(0.25)


def test_sums_shorter_than_a_step_hide_behind_it_after_the_first():
    # Each micro-batch's new shards (at most 2, 0.1 s each) take less than a step (1 s):
    # only the first micro-batch waits, for its own shards (the verifier sums one of two
    # beside the reader).
    first = total_wait(20, 2, 1.0, 0.1, False, seed=3)
    assert 0.1 - 1e-9 <= first <= 0.2 + 1e-9
    assert 0.1 - 1e-9 <= total_wait(20, 2, 1.0, 0.1, True, seed=3) <= first + 1e-9


@pytest.mark.parametrize("compute_s", [0.05, 0.2, 1.0])
def test_the_verifier_never_makes_the_wait_longer(compute_s):
    reader = total_wait(300, 8, compute_s, 0.22, False)
    ahead = total_wait(300, 8, compute_s, 0.22, True)
    assert ahead <= reader + 1e-9
    assert reader <= 300 * 0.22  # never more than summing every shard in turn


def test_reader_only_waits_for_every_sum_that_a_step_does_not_hide():
    # Compute takes no time: the run waits for every shard's sum, one after another.
    assert total_wait(50, 4, 0.0, 0.1, False) == pytest.approx(50 * 0.1)
