"""Timeouts as heap entries served by one task per trio run: each callback runs once, at
its deadline and in deadline order, never after it was cancelled, and cancelled entries
do not pile up; and a Wakeup's wait, which uses them."""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable

import pytest
import trio
import trio.testing

from gregor.client import timeouts
from gregor.client.timeouts import call_at, pending_timeouts
from gregor.client.wakeup import Wakeup


def run(test: Callable[[], Awaitable[None]]) -> None:
    trio.run(test, clock=trio.testing.MockClock(autojump_threshold=0))


def test_callbacks_run_at_their_deadlines_in_order_and_once() -> None:
    async def main() -> None:
        fired: list[tuple[str, float]] = []
        start = trio.current_time()

        def note(name: str) -> None:
            fired.append((name, trio.current_time() - start))

        call_at(start + 5, lambda: note("five"))
        await trio.sleep(1)
        # Earlier than the deadline the timer sleeps until: it wakes for this one first.
        call_at(start + 2, lambda: note("two"))
        cancelled = call_at(start + 3, lambda: note("cancelled"))
        assert pending_timeouts() == 3
        cancelled.cancel()
        cancelled.cancel()  # a second cancel is a no-op
        assert not cancelled.pending and pending_timeouts() == 2
        await trio.sleep(10)
        assert fired == [("two", 2.0), ("five", 5.0)]
        assert pending_timeouts() == 0

    run(main)


def test_a_wait_woken_by_its_timeout() -> None:
    async def main() -> None:
        done = trio.Event()
        start = trio.current_time()
        timeout = call_at(start + 0.5, done.set)
        await done.wait()
        assert trio.current_time() - start == 0.5 and not timeout.pending

    run(main)


def test_cancelled_entries_are_dropped_from_the_heap() -> None:
    async def main() -> None:
        now = trio.current_time()
        keep = call_at(now + 100, lambda: None)
        for _ in range(10_000):
            call_at(now + 30, lambda: None).cancel()
        heap = timeouts._QUEUE.get()._heap
        assert pending_timeouts() == 1 and len(heap) < 3 * timeouts.REBUILD_AFTER
        assert any(entry[2] is keep for entry in heap)

    run(main)


def test_an_infinite_deadline_registers_nothing() -> None:
    async def main() -> None:
        never = call_at(math.inf, lambda: None)
        assert never is timeouts.NEVER and not never.pending
        never.cancel()
        assert pending_timeouts() == 0

    run(main)


def test_a_failing_callback_is_logged_and_the_others_still_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def fail() -> None:
        raise RuntimeError("broken waiter")

    async def main() -> None:
        done = trio.Event()
        now = trio.current_time()
        call_at(now + 1, fail)
        call_at(now + 1, done.set)
        await done.wait()

    with caplog.at_level(logging.ERROR, logger="gregor.client.timeouts"):
        run(main)
    assert "a timeout's callback" in caplog.text and "broken waiter" in caplog.text


def test_each_trio_run_has_its_own_timer() -> None:
    async def main() -> None:
        done = trio.Event()
        call_at(trio.current_time() + 1, done.set)
        await done.wait()

    run(main)
    run(main)  # a timer task of the first run would be gone: this one starts its own


def test_a_wakeup_wait_ends_when_set_or_at_its_timeout() -> None:
    async def main() -> None:
        wakeup = Wakeup()
        wakeup.bind()
        start = trio.current_time()
        assert await wakeup.wait(2) is False  # nobody set it
        assert trio.current_time() - start == 2 and pending_timeouts() == 0
        wakeup.clear()
        assert await wakeup.wait(0) is False  # just a look
        async with trio.open_nursery() as nursery:
            nursery.start_soon(wakeup.wait, 30)
            await trio.sleep(1)
            wakeup.set()
        assert trio.current_time() - start == 3 and pending_timeouts() == 0
        assert await wakeup.wait(30) is True  # still set: at once
        assert trio.current_time() - start == 3

    run(main)
