"""The decode thread tuner follows measured step times (no ggml needed)."""

from __future__ import annotations

from engine.backends.ggml.threads import PROBE_EVERY, PROBE_STEPS, RECENT, ThreadTuner

QUIET = {2: 0.010, 1: 0.018}
CONTENDED = {2: 0.120, 1: 0.020}  # a busy process took one of the two cores


def drive(tuner: ThreadTuner, times: dict[int, float], steps: int) -> list[int]:
    used = []
    for _ in range(steps):
        n = tuner.next_count()
        used.append(n)
        tuner.record(n, times[n])
    return used


def test_stays_on_all_cores_while_they_are_faster() -> None:
    tuner = ThreadTuner(2)
    used = drive(tuner, QUIET, 4 * PROBE_EVERY)
    assert tuner.current == 2
    # Routine comparisons only: each spends PROBE_STEPS steps on one thread.
    assert used.count(1) <= 4 * PROBE_STEPS


def test_a_sudden_slowdown_is_answered_within_a_few_steps() -> None:
    tuner = ThreadTuner(2)
    drive(tuner, QUIET, RECENT + 5)
    used = drive(tuner, CONTENDED, 3 * PROBE_STEPS)
    assert tuner.current == 1 and used[-1] == 1


def test_goes_back_to_all_cores_when_the_other_process_ends() -> None:
    tuner = ThreadTuner(2)
    drive(tuner, QUIET, RECENT + 5)
    drive(tuner, CONTENDED, PROBE_EVERY)
    assert tuner.current == 1
    drive(tuner, QUIET, PROBE_EVERY + 3 * PROBE_STEPS)
    assert tuner.current == 2
    assert tuner.describe()["threads"] == 2


def test_a_single_core_never_probes() -> None:
    tuner = ThreadTuner(1)
    assert set(drive(tuner, {1: 0.01}, 3 * PROBE_EVERY)) == {1}


def test_a_choice_of_fewer_threads_is_rechecked_and_batches_do_not_keep_it(monkeypatch) -> None:
    import engine.backends.ggml.threads as threads

    now = [1000.0]
    monkeypatch.setattr(threads.time, "monotonic", lambda: now[0])
    tuner = ThreadTuner(2)
    drive(tuner, QUIET, RECENT + 5)
    drive(tuner, CONTENDED, 3 * PROBE_STEPS)
    assert tuner.current == 1 and tuner.batch_count() == 1
    now[0] += threads.RECHECK_S + 1  # the busy process may be gone: a prefill uses all cores
    assert tuner.batch_count() == 2
    used = drive(tuner, QUIET, 2 * PROBE_STEPS)  # the next decode steps compare again
    assert 2 in used and tuner.current == 2


def test_a_longer_context_sets_off_one_comparison_not_one_after_another() -> None:
    """Steps that slow down for their own reasons (the ring went from 1 to 2,048 slots) are
    compared once; the stale median of the short steps must not set off more comparisons,
    each spending PROBE_STEPS steps on one thread."""
    tuner = ThreadTuner(2)
    drive(tuner, QUIET, RECENT + 5)
    longer = {2: 0.025, 1: 0.045}  # all cores still the faster
    used = drive(tuner, longer, 3 * RECENT)
    assert tuner.current == 2
    assert used.count(1) == PROBE_STEPS
