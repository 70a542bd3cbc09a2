"""Timeouts that cost a heap entry, not a cancel scope.

trio's `move_on_after` enters a cancel scope: a CancelStatus joined to the task's, a
context manager, and trio's deadline heap, on the way in and again on the way out. Around
every request a connection sends, every fetch a broker parks and every wait for a
connection's next request, that was 15-20% of a replication round's CPU (bench_round).
Those waits park on an event anyway, and nearly all end long before their timeout. So a
wait here only registers a callback that wakes it: one heap per trio run, served by one
system task that sleeps until the earliest live deadline and runs the callbacks whose
time has come. A cancelled entry stays in the heap until it surfaces or the heap is
rebuilt (once dead entries outnumber live ones two to one), so cancelling is cheap too.

    timeout = call_at(trio.current_time() + 5, waiter.expire)
    try:
        await waiter.event.wait()
    finally:
        timeout.cancel()
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
from collections.abc import Callable

import trio

log = logging.getLogger(__name__)

REBUILD_AFTER = 64  # dead entries tolerated before a rebuild is considered


class Timeout:
    """A callback registered for a deadline; `cancel()` first and it never runs."""

    __slots__ = ("_callback", "_timer", "deadline")

    def __init__(self, timer: _Timer, deadline: float, callback: Callable[[], object]) -> None:
        self._timer = timer
        self.deadline = deadline
        self._callback: Callable[[], object] | None = callback

    @property
    def pending(self) -> bool:
        """Neither run nor cancelled yet."""
        return self._callback is not None

    def cancel(self) -> None:
        if self._callback is not None:
            self._callback = None
            self._timer.cancelled()


class _Timer:
    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Timeout]] = []
        self._order = itertools.count()  # ties broken by registration, never by Timeout
        self._dead = 0  # cancelled entries still in the heap
        self._armed = math.inf  # the deadline the task sleeps until
        self._rearm = trio.Event()

    def add(self, deadline: float, callback: Callable[[], object]) -> Timeout:
        timeout = Timeout(self, deadline, callback)
        heapq.heappush(self._heap, (deadline, next(self._order), timeout))
        if deadline < self._armed:
            self._armed = deadline
            self._rearm.set()
        return timeout

    def cancelled(self) -> None:
        self._dead += 1
        heap = self._heap
        if self._dead > REBUILD_AFTER and 3 * self._dead > 2 * len(heap):
            heap[:] = [entry for entry in heap if entry[2].pending]
            heapq.heapify(heap)
            self._dead = 0

    async def run(self) -> None:
        heap = self._heap
        while True:
            now = trio.current_time()
            while heap and (heap[0][0] <= now or not heap[0][2].pending):
                timeout = heapq.heappop(heap)[2]
                callback = timeout._callback
                if callback is None:
                    self._dead -= 1
                    continue
                timeout._callback = None
                try:
                    callback()
                except Exception:  # a bug in one waiter must not stop every timeout
                    log.exception("a timeout's callback failed")
            self._armed = heap[0][0] if heap else math.inf
            self._rearm = trio.Event()
            with trio.move_on_at(self._armed):
                await self._rearm.wait()

    def __len__(self) -> int:
        return len(self._heap) - self._dead


_TIMER: trio.lowlevel.RunVar[_Timer] = trio.lowlevel.RunVar("gregor_timeouts")


def _timer() -> _Timer:
    try:
        return _TIMER.get()
    except LookupError:
        timer = _Timer()
        _TIMER.set(timer)
        trio.lowlevel.spawn_system_task(timer.run, name="gregor timeouts")
        return timer


def call_at(deadline: float, callback: Callable[[], object]) -> Timeout:
    """Run `callback` (from this trio run's timer task) once the trio clock reaches
    `deadline`, unless the returned Timeout is cancelled first. An infinite deadline
    registers nothing."""
    if deadline == math.inf:
        return NEVER
    return _timer().add(deadline, callback)


def pending_timeouts() -> int:
    """Live timeouts of this trio run (for tests)."""
    try:
        return len(_TIMER.get())
    except LookupError:
        return 0


class _Never(Timeout):
    def __init__(self) -> None:
        self.deadline = math.inf
        self._callback = None

    def cancel(self) -> None:
        pass


NEVER: Timeout = _Never()  # what an infinite deadline gets: it never runs
