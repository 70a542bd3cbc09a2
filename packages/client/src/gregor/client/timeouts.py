"""Timeouts that cost a heap entry, not a cancel scope.

trio's `move_on_after` enters a cancel scope: a CancelStatus joined to the task's, a
context manager, and trio's deadline heap, on the way in and again on the way out. Around
every request a connection sends, every fetch a broker parks and every wait for a
connection's next request, that was 15-20% of a replication round's CPU (bench_round).
Those waits park on an event anyway, and nearly all end long before their timeout. So a
wait here only registers a callback that wakes it, in a TimerQueue: a heap served by one
task that sleeps until the earliest live deadline and runs the callbacks whose time has
come, on the event loop between two steps of other tasks. A cancelled entry stays in the
heap until it surfaces or the heap is rebuilt (once dead entries outnumber live ones two
to one), so cancelling is cheap too.

`call_at` uses one queue per trio run, started on first use as a system task. Kafka's
coordinators keep their timeouts (a member's session, a rebalance) in purgatories; the
broker's coordinators keep theirs in a TimerQueue of their own, run in their nursery.

    timeout = call_at(trio.current_time() + 5, waiter.event.set)
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
from typing import Any

import trio

log = logging.getLogger(__name__)

REBUILD_AFTER = 64  # dead entries tolerated before a rebuild is considered


class Timeout:
    """A callback registered for a deadline (trio clock); `cancel()` first and it never
    runs."""

    __slots__ = ("_args", "_callback", "_queue", "deadline")

    def __init__(
        self,
        queue: TimerQueue | None,
        deadline: float,
        callback: Callable[..., object] | None,
        args: tuple[Any, ...] = (),
    ) -> None:
        self._queue = queue
        self.deadline = deadline
        self._callback = callback
        self._args = args

    @property
    def pending(self) -> bool:
        """Neither run nor cancelled yet."""
        return self._callback is not None

    def cancel(self) -> None:
        if self._callback is not None:
            self._callback = None
            if self._queue is not None:
                self._queue.cancelled()


NEVER = Timeout(None, math.inf, None)  # what an infinite deadline gets: it never runs


class TimerQueue:
    def __init__(self, name: str) -> None:
        self.name = name
        self._heap: list[tuple[float, int, Timeout]] = []
        self._order = itertools.count()  # ties go by registration, never by Timeout
        self._dead = 0  # cancelled entries still in the heap
        self._armed = math.inf  # the deadline the task sleeps until
        self._rearm = trio.Event()

    def __len__(self) -> int:
        """Timeouts waiting to run."""
        return len(self._heap) - self._dead

    def call_at(self, deadline: float, callback: Callable[..., object], *args: Any) -> Timeout:
        """Run `callback(*args)` once the trio clock reaches `deadline`, unless cancelled.
        An infinite deadline registers nothing."""
        if deadline == math.inf:
            return NEVER
        timeout = Timeout(self, deadline, callback, args)
        heapq.heappush(self._heap, (deadline, next(self._order), timeout))
        if deadline < self._armed:
            self._armed = deadline
            self._rearm.set()
        return timeout

    def call_later(self, delay: float, callback: Callable[..., object], *args: Any) -> Timeout:
        """Run `callback(*args)` `delay` seconds from now, unless cancelled."""
        return self.call_at(trio.current_time() + max(0.0, delay), callback, *args)

    def cancelled(self) -> None:
        self._dead += 1
        heap = self._heap
        if self._dead > REBUILD_AFTER and 3 * self._dead > 2 * len(heap):
            heap[:] = [entry for entry in heap if entry[2].pending]
            heapq.heapify(heap)
            self._dead = 0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the callbacks as they fall due, until cancelled."""
        task_status.started()
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
                    callback(*timeout._args)
                except Exception:  # one broken callback must not stop the others
                    log.exception("%s: a timeout's callback %r failed", self.name, callback)
            self._armed = heap[0][0] if heap else math.inf
            self._rearm = trio.Event()
            with trio.move_on_at(self._armed):
                await self._rearm.wait()


_QUEUE: trio.lowlevel.RunVar[TimerQueue] = trio.lowlevel.RunVar("gregor_timeouts")


def _queue() -> TimerQueue:
    try:
        return _QUEUE.get()
    except LookupError:
        queue = TimerQueue("timeouts")
        _QUEUE.set(queue)
        trio.lowlevel.spawn_system_task(queue.run, name="gregor timeouts")
        return queue


def call_at(deadline: float, callback: Callable[..., object], *args: Any) -> Timeout:
    """`TimerQueue.call_at` on this trio run's own queue."""
    return _queue().call_at(deadline, callback, *args)


def pending_timeouts() -> int:
    """Timeouts waiting to run in this trio run's own queue (for tests)."""
    try:
        return len(_QUEUE.get())
    except LookupError:
        return 0
