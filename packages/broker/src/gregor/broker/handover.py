"""Handover: items passed in order from one task to another, at no turn of the loop.

A connection's processor gives its answers to the connection's writer. trio's memory
channel would do, but each of its `send` and `receive` ends in a checkpoint even when it
need not wait: the task yields, and runs again only in the next batch of trio's loop. In a
replication round (bench_round) that was a quarter of the leader's task steps: 12.9 a
round, 9.9 without. Here a task parks only when it must: the taker on an empty handover,
the giver on a full one. Both waits can be cancelled, and neither is a checkpoint
otherwise, so each side must have checkpoints of its own (the processor waits for the
socket, the writer for its answers).

An item may be given before it is ready to take (a `Later` answer whose operation is not
done yet): the taker then waits until the item at the head is `ready`, and whoever makes
it so calls `wake`. Giving an item that is not ready wakes nobody.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

import trio

T = TypeVar("T")


class Handover(Generic[T]):
    """A bounded FIFO between one giver and one taker; `close` ends it once drained."""

    __slots__ = ("_giver", "_items", "_limit", "_ready", "_taker", "closed")

    def __init__(self, limit: int, ready: Callable[[T], bool] | None = None) -> None:
        self._items: deque[T] = deque()
        self._limit = limit
        self._ready = ready  # None: every item is ready when given
        self._giver: trio.lowlevel.Task | None = None  # parked on a full handover
        self._taker: trio.lowlevel.Task | None = None  # parked on an empty one
        self.closed = False

    def __len__(self) -> int:
        return len(self._items)

    async def give(self, item: T) -> None:
        """Behind the items given before; waits while `limit` are not yet taken."""
        if self.closed:
            raise trio.ClosedResourceError("the handover is closed")
        while len(self._items) >= self._limit:
            self._giver = trio.lowlevel.current_task()
            await trio.lowlevel.wait_task_rescheduled(self._abort_giver)
        self._items.append(item)
        if self._taker is not None and self._head_ready():
            self._wake_taker()

    async def take(self) -> T | None:
        """The next item, once it is ready; None once closed and every item taken."""
        items, ready = self._items, self._ready
        while not items or (ready is not None and not ready(items[0])):
            if self.closed and not items:
                return None
            self._taker = trio.lowlevel.current_task()
            await trio.lowlevel.wait_task_rescheduled(self._abort_taker)
        item = self._items.popleft()
        if self._giver is not None:
            giver, self._giver = self._giver, None
            trio.lowlevel.reschedule(giver)
        return item

    def wake(self) -> None:
        """An item may have become ready: the taker takes it if it is at the head."""
        if self._taker is not None and self._head_ready():
            self._wake_taker()

    def drain(self) -> list[T]:
        """The items not taken, taken away (the taker gone, what is left is dropped)."""
        items = list(self._items)
        self._items.clear()
        return items

    def _head_ready(self) -> bool:
        items = self._items
        return bool(items) and (self._ready is None or self._ready(items[0]))

    def close(self) -> None:
        """No more items: the taker gets None once it has taken those given."""
        self.closed = True
        if self._taker is not None:
            self._wake_taker()

    def _wake_taker(self) -> None:
        taker, self._taker = self._taker, None
        assert taker is not None
        trio.lowlevel.reschedule(taker)

    def _abort_giver(self, _: object) -> trio.lowlevel.Abort:
        self._giver = None
        return trio.lowlevel.Abort.SUCCEEDED

    def _abort_taker(self, _: object) -> trio.lowlevel.Abort:
        self._taker = None
        return trio.lowlevel.Abort.SUCCEEDED
