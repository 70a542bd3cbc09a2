"""A flow task that fails starts over after a backoff: 0.5 s doubling to 30 s, back to
0.5 s after a run that lasted longer than that, each failure logged with its delay, and no
backoff once the mirror is stopping (issue 14: an unreachable cluster is retried with
backoff and reported; the mirror never crashes on it).

On trio's MockClock (autojump), so the delays are the ones asked for, not the machine's.
"""

from __future__ import annotations

import logging

import pytest
import trio
import trio.testing

from gregor.mirror.flow import keep_running


class Failing:
    """A task that fails `times` times (each run lasting `runs[i]` s, default 0), then
    returns; the clock's reading at each start."""

    def __init__(self, times: int, runs: dict[int, float] | None = None) -> None:
        self.times = times
        self.runs = runs or {}
        self.starts: list[float] = []

    async def __call__(self) -> None:
        self.starts.append(trio.current_time())
        await trio.sleep(self.runs.get(len(self.starts) - 1, 0))
        if len(self.starts) <= self.times:
            raise ConnectionError(f"cluster B unreachable (attempt {len(self.starts)})")

    def gaps(self) -> list[float]:
        return [b - a for a, b in zip(self.starts, self.starts[1:], strict=False)]


def run(task: Failing) -> None:
    async def main() -> None:
        await keep_running("A->B", task, lambda: len(task.starts) > task.times)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_the_delay_doubles_up_to_30_seconds_and_each_failure_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    task = Failing(9)
    with caplog.at_level(logging.ERROR, "gregor.mirror"):
        run(task)
    assert task.gaps() == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == (
        "A->B failed (ConnectionError: cluster B unreachable (attempt 1)); starting over in 0.5s"
    )
    assert [line.rsplit(" ", 1)[1] for line in lines] == [
        "0.5s", "1.0s", "2.0s", "4.0s", "8.0s", "16.0s", "30.0s", "30.0s", "30.0s"
    ]  # fmt: skip


def test_a_run_longer_than_the_longest_delay_starts_the_backoff_again() -> None:
    # Failures 1-3 at once, then a run of 31 s that fails, then two more at once.
    task = Failing(6, runs={3: 31.0})
    run(task)
    gaps = task.gaps()
    assert gaps[:3] == [0.5, 1.0, 2.0]
    assert gaps[3] == 31.0 + 0.5  # the long run, then the first delay again
    assert gaps[4:] == [1.0, 2.0]


def test_a_failure_while_stopping_ends_the_task_without_a_backoff(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stopping = False

    async def task() -> None:
        nonlocal stopping
        stopping = True
        raise ConnectionError("B went away during the drain")

    async def main() -> float:
        await keep_running("A->B", task, lambda: stopping)
        return trio.current_time()

    with caplog.at_level(logging.WARNING, "gregor.mirror"):
        ended = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert ended == 0.0
    assert [r.getMessage() for r in caplog.records] == [
        "A->B stopped with an error (ConnectionError: B went away during the drain)"
    ]
