"""The delayed-operation purgatory: requests that wait for something to happen to a partition.

A Produce with acks=all waits until the ISR has its records (the high watermark passes
them); a Fetch waits until `min_bytes` are there or `max_wait_ms` passes. Each waits on the
partitions it concerns: whoever changes a partition (an append, a high watermark or
leadership change, a follower's fetch) calls `notify(key)`, and every operation watching
that key checks again whether it can complete. Kafka's DelayedOperationPurgatory, on trio:
the waiting request is the handler itself, parked on an event.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable

import trio


class _Waiter:
    __slots__ = ("event",)

    def __init__(self) -> None:
        self.event = trio.Event()


class Purgatory:
    def __init__(self, name: str) -> None:
        self.name = name
        self._watchers: dict[Hashable, set[_Waiter]] = {}

    def __len__(self) -> int:
        """How many operations are waiting (an operation on several keys counts once each)."""
        return sum(len(w) for w in self._watchers.values())

    def watched(self, key: Hashable) -> int:
        return len(self._watchers.get(key, ()))

    async def wait(
        self, keys: Iterable[Hashable], try_complete: Callable[[], bool], timeout: float
    ) -> bool:
        """Wait until `try_complete()` is true (checked now and after each notification of
        one of `keys`) or `timeout` seconds pass; return whether it completed."""
        if try_complete():
            return True
        if timeout <= 0:
            return False
        waiter = _Waiter()
        watched = list(dict.fromkeys(keys))
        for key in watched:
            self._watchers.setdefault(key, set()).add(waiter)
        try:
            with trio.move_on_after(timeout):
                while True:
                    await waiter.event.wait()
                    waiter.event = trio.Event()
                    if try_complete():
                        return True
            return False
        finally:
            for key in watched:
                waiters = self._watchers.get(key)
                if waiters is not None:
                    waiters.discard(waiter)
                    if not waiters:
                        del self._watchers[key]

    def notify(self, key: Hashable) -> None:
        """Something changed for `key`: every operation watching it checks again."""
        waiters = self._watchers.get(key)
        if waiters:
            for waiter in waiters:
                waiter.event.set()

    def notify_all(self) -> None:
        for waiters in self._watchers.values():
            for waiter in waiters:
                waiter.event.set()
