"""The delayed-operation purgatory: requests that wait for something to happen to a partition.

A Produce with acks=all waits until the ISR has its records (the high watermark passes
them); a Fetch waits until `min_bytes` are there or `max_wait_ms` passes. Each waits on the
partitions it concerns: whoever changes a partition (an append, a high watermark or
leadership change, a follower's fetch) calls `notify(key)`, and every operation watching
that key checks again whether it can complete. Kafka's DelayedOperationPurgatory, on trio,
in two phases: the handler registers the operation (`register`, giving a `Delayed`) and
returns; the check runs in the task that notifies (Kafka's tryComplete); and once the
operation completes, fails or expires it leaves the purgatory and calls back whoever waits
for it, once. That is the connection's writer, which then builds the answer (`finish`,
Kafka's onComplete): no task is parked on the operation, and none wakes for a
notification that leaves it incomplete. `wait` parks a task on it instead, for the
callers that have one waiting anyway (the coordinators). The check is told which keys
changed, so an operation over many partitions looks again only at those that moved. The
timeout is an entry in gregor.client.timeouts' heap, not a cancel scope per wait.

An operation that comes back on the same keys again and again (the fetches of an incremental
fetch session) can keep a standing `Subscription` instead: it is registered on its keys once,
collects the keys notified between operations too, and `register_on` registers on it. A
fetch of a session of many partitions then neither registers on them all nor looks at them
all.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Iterable
from typing import Any, Generic, TypeVar

import trio

from gregor.client.timeouts import NEVER, call_at

K = TypeVar("K", bound=Hashable)


class Waiter(Generic[K]):
    """One registered operation. Its check runs in the task that notifies (Kafka's
    tryComplete); once it completes, fails or expires it leaves the purgatory and calls
    `on_done`, so whoever waits for it wakes once, and not for each notification that
    leaves it incomplete."""

    __slots__ = (
        "changed",
        "completed",
        "done",
        "error",
        "expiry",
        "keys",
        "on_done",
        "purgatory",
        "subscription",
        "try_complete",
    )

    def __init__(
        self,
        purgatory: Purgatory[K],
        try_complete: Callable[[Collection[K]], bool],
        keys: Collection[K] = (),
        subscription: Subscription[K] | None = None,
    ) -> None:
        # While registered, the purgatory and this waiter refer to each other; `_end`
        # breaks that, so reference counting frees it. (No bound method of its own is kept
        # here for good: that would leave a cycle for the garbage collector, whose full
        # passes stalled the broker.)
        self.purgatory = purgatory
        self.try_complete = try_complete
        self.keys = keys  # watched (a `register`), or none (a `register_on`)
        self.subscription = subscription
        self.changed: set[K] = set()  # the keys notified since the last check
        self.done = False
        self.completed = False
        self.error: Exception | None = None
        self.on_done: Callable[[], object] | None = None
        self.expiry = NEVER

    def check(self) -> None:
        if self.done:
            return
        try:
            if self.subscription is None:
                changed, self.changed = self.changed, set()
            else:
                changed = self.subscription.take()
            if changed and self.try_complete(changed):
                self.completed = True
                self._end()
        except Exception as exc:  # the operation's to raise, not the notifier's
            self.error = exc
            self._end()

    def expire(self) -> None:
        self.check()  # a notification not yet checked still counts
        if not self.done:
            self._end()

    def cancel(self) -> None:
        """Not wanted any more (its connection closed): it leaves the purgatory, and
        `on_done` is not called."""
        if not self.done:
            self.on_done = None
            self._end()

    def _end(self) -> None:
        self.done = True
        self.expiry.cancel()
        self.expiry = NEVER
        self.purgatory._unregister(self)
        on_done, self.on_done = self.on_done, None
        if on_done is not None:
            on_done()

    async def park(self) -> None:
        """Until the operation is done; a cancelled park cancels the operation."""
        if not self.done:
            event = trio.Event()
            self.on_done = event.set
            try:
                await event.wait()
            finally:
                self.cancel()  # nothing when it ended

    def outcome(self) -> bool:
        """Whether it completed (else it expired); what its check raised, if it raised."""
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
        self.waiter: Waiter[K] | None = None  # the operation registered on it

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
        self._watchers: dict[K, set[Waiter[K]]] = {}
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

    def register(
        self,
        keys: Iterable[K],
        try_complete: Callable[[Collection[K]], bool],
        timeout: float,
        *,
        tried: bool = False,
    ) -> Waiter[K] | None:
        """Register an operation that completes once `try_complete(changed)` is true, or
        expires after `timeout` seconds; None when it completed at once. It is tried now,
        with `changed` all of `keys` (unless the caller just `tried`), and after each
        notification of some of them, with `changed` those notified since the last try."""
        watched = list(dict.fromkeys(keys))
        if not tried and try_complete(watched):
            return None
        waiter = Waiter(self, try_complete, watched)
        if timeout <= 0:
            waiter.done = True  # expired, and never registered
            return waiter
        for key in watched:
            self._watchers.setdefault(key, set()).add(waiter)
        waiter.expiry = call_at(trio.current_time() + timeout, waiter.expire)
        return waiter

    def register_on(
        self,
        subscription: Subscription[K],
        try_complete: Callable[[Collection[K]], bool],
        timeout: float,
    ) -> Waiter[K] | None:
        """`register` on a subscription's keys: tried now with the keys notified since the
        last take (if any), then after each notification with those notified since."""
        changed = subscription.take()
        if changed and try_complete(changed):
            return None
        waiter = Waiter(self, try_complete, subscription=subscription)
        if timeout <= 0:
            waiter.done = True
            return waiter
        subscription.waiter = waiter
        self._parked.add(subscription)
        waiter.expiry = call_at(trio.current_time() + timeout, waiter.expire)
        return waiter

    def _unregister(self, waiter: Waiter[K]) -> None:
        subscription = waiter.subscription
        if subscription is None:
            watchers = self._watchers
            for key in waiter.keys:
                waiters = watchers.get(key)
                if waiters is not None:
                    waiters.discard(waiter)
                    if not waiters:
                        del watchers[key]
        elif subscription.waiter is waiter:
            subscription.waiter = None
            self._parked.discard(subscription)

    async def wait(
        self,
        keys: Iterable[K],
        try_complete: Callable[[Collection[K]], bool],
        timeout: float,
    ) -> bool:
        """`register`, and wait until the operation completes (True) or expires (False)."""
        waiter = self.register(keys, try_complete, timeout)
        if waiter is None:
            return True
        await waiter.park()
        return waiter.outcome()

    def notify(self, key: K) -> None:
        """Something changed for `key`: every operation watching it checks again, now."""
        waiters = self._watchers.get(key)
        if waiters:
            for waiter in [*waiters]:  # one that completes leaves the set
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


R = TypeVar("R")


class Delayed(Generic[R]):
    """A registered operation and what it results in: Kafka's DelayedOperation, whose
    onComplete runs when the answer is sent. `finish(completed)` builds the result once
    the operation is `done`, told whether it completed or expired; `on_cancel` undoes
    what registering did, should the result never be wanted (its connection closed)."""

    __slots__ = ("_finish", "_on_cancel", "waiter")

    def __init__(
        self,
        waiter: Waiter[Any] | None,
        finish: Callable[[bool], R],
        on_cancel: Callable[[], object] | None = None,
    ) -> None:
        self.waiter = waiter  # None: it completed when registered
        self._finish = finish
        self._on_cancel = on_cancel

    @property
    def done(self) -> bool:
        return self.waiter is None or self.waiter.done

    def finish(self) -> R:
        """The result, once `done`; what the check raised, if it raised."""
        waiter = self.waiter
        return self._finish(waiter is None or waiter.outcome())

    def on_done(self, callback: Callable[[], object]) -> None:
        """Call `callback` once it is done (not when cancelled); nothing if done already."""
        waiter = self.waiter
        if waiter is not None and not waiter.done:
            waiter.on_done = callback

    def cancel(self) -> None:
        if self.waiter is not None:
            self.waiter.cancel()
        if self._on_cancel is not None:
            self._on_cancel()

    async def result(self) -> R:
        """Wait until `done`, then `finish`."""
        waiter = self.waiter
        if waiter is not None and not waiter.done:
            try:
                await waiter.park()
            except BaseException:
                self.cancel()
                raise
        return self.finish()
