"""The delayed-operation purgatory: requests that wait for something to happen to a partition.

A Produce with acks=all waits until the ISR has its records (the high watermark passes
them); a Fetch waits until `min_bytes` are there or `max_wait_ms` passes. Each waits on the
partitions it concerns: whoever changes a partition (an append, a high watermark or
leadership change, a follower's fetch) calls `notify(key)`, and every operation watching
that key checks again whether it can complete. Kafka's DelayedOperationPurgatory, on trio:
the waiting request is the handler itself, parked on an event, and the check runs in the
task that notifies (Kafka's tryComplete), so the handler wakes only to finish. The check is
told which keys changed, so an operation over many partitions looks again only at those
that moved. The timeout is an entry in gregor.client.timeouts' heap, not a cancel scope per
wait.

An operation that comes back on the same keys again and again (the fetches of an incremental
fetch session) can keep a standing `Subscription` instead: it is registered on its keys once,
collects the keys notified between operations too, and `wait_on` parks on it. A fetch of a
session of many partitions then neither registers on them all nor looks at them all.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Iterable
from typing import Generic, TypeVar

import trio

from gregor.client.timeouts import call_at

K = TypeVar("K", bound=Hashable)


class _Waiter(Generic[K]):
    """One parked operation. Its check runs in the task that notifies (Kafka's
    tryComplete), so the operation's own task wakes once, when it completes, fails or
    expires, and not for each notification that leaves it incomplete."""

    __slots__ = ("changed", "completed", "error", "event", "subscription", "try_complete")

    def __init__(
        self,
        try_complete: Callable[[Collection[K]], bool],
        subscription: Subscription[K] | None = None,
    ) -> None:
        self.event = trio.Event()
        self.try_complete = try_complete
        # The keys notified since the last check: a `wait`'s own, or its subscription's.
        # (Not a bound method kept here: that would make every waiter a reference cycle,
        # left to the garbage collector, whose full passes then stalled the broker.)
        self.changed: set[K] = set()
        self.subscription = subscription
        self.completed = False
        self.error: Exception | None = None

    def check(self) -> None:
        if self.event.is_set():
            return
        try:
            if self.subscription is None:
                changed, self.changed = self.changed, set()
            else:
                changed = self.subscription.take()
            if changed and self.try_complete(changed):
                self.completed = True
                self.event.set()
        except Exception as exc:  # the operation's to raise, not the notifier's
            self.error = exc
            self.event.set()

    def expire(self) -> None:
        self.check()  # a notification not yet checked still counts
        self.event.set()

    async def park(self) -> bool:
        """Until the operation completes (True) or expires (False)."""
        await self.event.wait()
        if self.error is not None:
            raise self.error
        return self.completed


class Subscription(Generic[K]):
    """A standing watch on some keys: `changed` collects those notified until `take`
    empties it, whether or not an operation is waiting on it."""

    __slots__ = ("_purgatory", "changed", "keys", "waiter")

    def __init__(self, purgatory: Purgatory[K]) -> None:
        self._purgatory = purgatory
        self.keys: set[K] = set()
        self.changed: set[K] = set()
        self.waiter: _Waiter[K] | None = None  # the operation parked on it (`wait_on`)

    def watch(self, keys: Iterable[K]) -> None:
        subscribers = self._purgatory.subscribers
        for key in keys:
            if key not in self.keys:
                self.keys.add(key)
                subscribers.setdefault(key, set()).add(self)

    def unwatch(self, keys: Iterable[K]) -> None:
        subscribers = self._purgatory.subscribers
        for key in keys:
            if key not in self.keys:
                continue
            self.keys.discard(key)
            self.changed.discard(key)
            subscription = subscribers.get(key)
            if subscription is not None:
                subscription.discard(self)
                if not subscription:
                    del subscribers[key]

    def close(self) -> None:
        self.unwatch(list(self.keys))

    def take(self) -> set[K]:
        """The keys notified since the last take."""
        changed, self.changed = self.changed, set()
        return changed


class Purgatory(Generic[K]):
    def __init__(self, name: str) -> None:
        self.name = name
        self._watchers: dict[K, set[_Waiter[K]]] = {}
        self.subscribers: dict[K, set[Subscription[K]]] = {}
        self._parked: set[Subscription[K]] = set()  # subscriptions an operation waits on

    def __len__(self) -> int:
        """How many operations are waiting (an operation on several keys counts once each)."""
        return sum(len(w) for w in self._watchers.values()) + sum(len(s.keys) for s in self._parked)

    def subscribe(self, keys: Iterable[K] = ()) -> Subscription[K]:
        subscription = Subscription(self)
        subscription.watch(keys)
        return subscription

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
        waiter = _Waiter(try_complete)
        for key in watched:
            self._watchers.setdefault(key, set()).add(waiter)
        expiry = call_at(trio.current_time() + timeout, waiter.expire)
        try:
            return await waiter.park()
        finally:
            expiry.cancel()
            for key in watched:
                waiters = self._watchers.get(key)
                if waiters is not None:
                    waiters.discard(waiter)
                    if not waiters:
                        del self._watchers[key]

    async def wait_on(
        self,
        subscription: Subscription[K],
        try_complete: Callable[[Collection[K]], bool],
        timeout: float,
    ) -> bool:
        """`wait` on a subscription's keys: tried now with the keys notified since the last
        take (if any), then after each notification with those notified since."""
        changed = subscription.take()
        if changed and try_complete(changed):
            return True
        if timeout <= 0:
            return False
        waiter = _Waiter(try_complete, subscription)
        subscription.waiter = waiter
        self._parked.add(subscription)
        expiry = call_at(trio.current_time() + timeout, waiter.expire)
        try:
            return await waiter.park()
        finally:
            expiry.cancel()
            if subscription.waiter is waiter:
                subscription.waiter = None
                self._parked.discard(subscription)

    def notify(self, key: K) -> None:
        """Something changed for `key`: every operation watching it checks again, now."""
        waiters = self._watchers.get(key)
        if waiters:
            for waiter in waiters:
                waiter.changed.add(key)
                waiter.check()
        subscriptions = self.subscribers.get(key)
        if subscriptions:
            for subscription in subscriptions:
                subscription.changed.add(key)
                if subscription.waiter is not None:
                    subscription.waiter.check()

    def notify_all(self) -> None:
        for key in [*self._watchers, *self.subscribers]:
            self.notify(key)
