"""The decode thread tuner follows measured step times (no ggml needed)."""

from __future__ import annotations

from engine.backends.ggml.threads import PROBE_EVERY, PROBE_STEPS, ThreadTuner


def drive(tuner: ThreadTuner, seconds_for, steps: int) -> list[int]:
    used = []
    for _ in range(steps):
        n = tuner.next_count()
        used.append(n)
        tuner.record(n, seconds_for(n))
    return used


def test_stays_on_all_cores_while_they_are_faster() -> None:
    tuner = ThreadTuner(2)
    used = drive(tuner, lambda n: 0.010 if n == 2 else 0.018, 4 * PROBE_EVERY)
    assert tuner.current == 2
    # Probes cost only their few steps.
    assert 3 * PROBE_STEPS <= used.count(1) <= 4 * PROBE_STEPS


def test_drops_to_one_thread_under_contention_and_comes_back() -> None:
    tuner = ThreadTuner(2)
    drive(tuner, lambda n: 0.010 if n == 2 else 0.018, PROBE_EVERY)
    contended = lambda n: 0.120 if n == 2 else 0.020  # noqa: E731 - a busy process took a core
    drive(tuner, contended, 2 * PROBE_EVERY)
    assert tuner.current == 1
    drive(tuner, lambda n: 0.010 if n == 2 else 0.018, 2 * PROBE_EVERY)
    assert tuner.current == 2
    assert set(tuner.describe()["step_ms"]) == {1, 2}


def test_a_single_core_never_probes() -> None:
    tuner = ThreadTuner(1)
    assert set(drive(tuner, lambda n: 0.01, 3 * PROBE_EVERY)) == {1}
