"""The delayed-operation purgatory: requests that wait for something to happen to a partition.

A Produce with acks=all waits until the ISR has its records (the high watermark passes
them); a Fetch waits until `min_bytes` are there or `max_wait_ms` passes. Each waits on the
partitions it concerns: whoever changes a partition (an append, a high watermark or
leadership change, a follower's fetch) calls `notify(key)`, and every operation watching
that key checks again whether it can complete. Kafka's DelayedOperationPurgatory, on trio:
the waiting request is the handler itself, parked on an event. The check is told which keys
changed, so an operation over many partitions looks again only at those that moved. The
timeout is an entry in gregor.client.timeouts' heap, not a cancel scope per wait.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Iterable
from typing import Generic, TypeVar

import trio

from gregor.client.timeouts import call_at

K = TypeVar("K", bound=Hashable)


class _Waiter(Generic[K]):
    __slots__ = ("changed", "event", "expired")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.changed: set[K] = set()  # keys notified since the last check
        self.expired = False

    def expire(self) -> None:
        self.expired = True
        self.event.set()


class Purgatory(Generic[K]):
    def __init__(self, name: str) -> None:
        self.name = name
        self._watchers: dict[K, set[_Waiter[K]]] = {}

    def __len__(self) -> int:
        """How many operations are waiting (an operation on several keys counts once each)."""
        return sum(len(w) for w in self._watchers.values())

    def watched(self, key: K) -> int:
        return len(self._watchers.get(key, ()))

    async def wait(
        self,
        keys: Iterable[K],
        try_complete: Callable[[Collection[K]], bool],
        timeout: float,
    ) -> bool:
        """Wait until `try_complete(changed)` is true or `timeout` seconds pass; return
        whether it completed. It is tried now, with `changed` all of `keys`, and after each
        notification of some of them, with `changed` those notified since the last try."""
        watched = list(dict.fromkeys(keys))
        if try_complete(watched):
            return True
        if timeout <= 0:
            return False
        waiter: _Waiter[K] = _Waiter()
        for key in watched:
            self._watchers.setdefault(key, set()).add(waiter)
        expiry = call_at(trio.current_time() + timeout, waiter.expire)
        try:
            while True:
                await waiter.event.wait()
                waiter.event = trio.Event()
                changed, waiter.changed = waiter.changed, set()
                if changed and try_complete(changed):
                    return True
                if waiter.expired:
                    return False
        finally:
            expiry.cancel()
            for key in watched:
                waiters = self._watchers.get(key)
                if waiters is not None:
                    waiters.discard(waiter)
                    if not waiters:
                        del self._watchers[key]

    def notify(self, key: K) -> None:
        """Something changed for `key`: every operation watching it checks again."""
        waiters = self._watchers.get(key)
        if waiters:
            for waiter in waiters:
                waiter.changed.add(key)
                waiter.event.set()

    def notify_all(self) -> None:
        for key in list(self._watchers):
            self.notify(key)
