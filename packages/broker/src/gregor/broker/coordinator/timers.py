"""Deadlines for the coordinators, on trio's clock.

Kafka's coordinators keep their timeouts (a member's session, a rebalance, a pending sync) in
delayed-operation purgatories. Here one task per coordinator sleeps until the earliest
deadline and runs the callbacks that are due; scheduling returns a `Timer` that can be
cancelled. Callbacks are plain functions run on the event loop, so they see the coordinator's
state between two requests, never in the middle of one. Tests drive the clock with
`trio.testing.MockClock`.
"""

from __future__ import annotations

import heapq
import itertools
import logging
from collections.abc import Callable
from typing import Any

import trio

log = logging.getLogger(__name__)


class Timer:
    __slots__ = ("args", "callback", "cancelled", "deadline")

    def __init__(self, deadline: float, callback: Callable[..., Any], args: tuple[Any, ...]):
        self.deadline = deadline
        self.callback = callback
        self.args = args
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class TimerQueue:
    def __init__(self, name: str) -> None:
        self.name = name
        self._heap: list[tuple[float, int, Timer]] = []
        self._sequence = itertools.count()
        self._wakeup = trio.Event()

    def __len__(self) -> int:
        return sum(1 for _, _, timer in self._heap if not timer.cancelled)

    def call_later(self, delay_s: float, callback: Callable[..., Any], *args: Any) -> Timer:
        """Run `callback(*args)` once `delay_s` seconds from now, unless cancelled."""
        timer = Timer(trio.current_time() + max(0.0, delay_s), callback, args)
        earliest = self._heap[0][0] if self._heap else None
        heapq.heappush(self._heap, (timer.deadline, next(self._sequence), timer))
        if earliest is None or timer.deadline < earliest:
            self._wakeup.set()
        return timer

    def run_due(self) -> int:
        """Run every callback whose deadline has passed; how many ran."""
        now = trio.current_time()
        ran = 0
        while self._heap and self._heap[0][0] <= now:
            _, _, timer = heapq.heappop(self._heap)
            if timer.cancelled:
                continue
            ran += 1
            try:
                timer.callback(*timer.args)
            except Exception:
                log.exception("%s: timer callback %r failed", self.name, timer.callback)
        return ran

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            while self._heap and self._heap[0][2].cancelled:
                heapq.heappop(self._heap)
            self._wakeup = trio.Event()
            if self._heap:
                with trio.move_on_at(self._heap[0][0]):
                    await self._wakeup.wait()
            else:
                await self._wakeup.wait()
            self.run_due()
