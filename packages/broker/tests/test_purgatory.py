"""The purgatory: waiting operations complete when their keys are notified, or time out."""

from __future__ import annotations

import gc
from collections.abc import Callable, Collection

import trio
import trio.testing

from gregor.broker.purgatory import Delayed, Purgatory, Subscription
from gregor.client.timeouts import call_at, pending_timeouts


async def wait_on(
    purgatory: Purgatory[str],
    subscription: Subscription[str],
    try_complete: Callable[[Collection[str]], bool],
    timeout: float,
) -> bool:
    """Register on the subscription and wait: whether the operation completed."""
    return await Delayed(purgatory.register_on(subscription, try_complete, timeout), bool).result()


async def test_completes_on_notification_of_a_watched_key() -> None:
    purgatory: Purgatory[tuple[str, int]] = Purgatory("test")
    state = {"done": False}
    told: list[set[tuple[str, int]]] = []
    results: list[bool] = []

    def check(changed: Collection[tuple[str, int]]) -> bool:
        told.append(set(changed))
        return state["done"]

    async def waiter() -> None:
        results.append(await purgatory.wait([("t", 0), ("t", 1), ("t", 0)], check, 10))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        assert told == [{("t", 0), ("t", 1)}]  # the first try is told every key
        assert purgatory.watched(("t", 1)) == 1
        purgatory.notify(("t", 1))  # not done yet: it goes back to waiting
        await trio.testing.wait_all_tasks_blocked()
        assert results == []
        assert told[1:] == [{("t", 1)}]  # told only the key that changed
        state["done"] = True
        purgatory.notify(("other", 0))  # not its key: nothing happens
        await trio.testing.wait_all_tasks_blocked()
        assert results == []
        assert len(told) == 2
        purgatory.notify(("t", 0))  # tried in this task, at once: it completes
        assert told[2:] == [{("t", 0)}]
        purgatory.notify(("t", 1))  # completed already: not tried again
    assert results == [True]
    assert len(told) == 3
    assert len(purgatory) == 0  # unwatched on the way out


async def test_the_check_runs_in_the_notifier_and_wakes_the_waiter_only_to_finish() -> None:
    """Kafka's tryComplete: notifications that leave the operation incomplete cost its task
    no step; an error in the check is raised in the waiting task, not in the notifier."""
    purgatory: Purgatory[str] = Purgatory("test")
    steps: list[str] = []

    class Steps(trio.abc.Instrument):
        def before_task_step(self, task: trio.lowlevel.Task) -> None:
            steps.append(task.name)

    tries: list[trio.lowlevel.Task] = []
    done: dict[str, object] = {"k": False}

    def check(_changed: Collection[str]) -> bool:
        tries.append(trio.lowlevel.current_task())
        if done["k"] == "fail":
            raise ValueError("a broken check")
        return bool(done["k"])

    results: list[object] = []

    async def waiter() -> None:
        try:
            results.append(await purgatory.wait(["k"], check, 30))
        except ValueError as exc:
            results.append(exc)

    for outcome in (True, "fail"):
        done["k"] = False
        tries.clear()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiter, name="the-waiter")
            await trio.testing.wait_all_tasks_blocked()
            steps.clear()
            instrument = Steps()
            trio.lowlevel.add_instrument(instrument)
            try:
                for _ in range(5):
                    purgatory.notify("k")  # incomplete: the waiter is not woken
                    await trio.testing.wait_all_tasks_blocked()
                assert "the-waiter" not in steps
                done["k"] = outcome
                purgatory.notify("k")
                await trio.testing.wait_all_tasks_blocked()
            finally:
                trio.lowlevel.remove_instrument(instrument)
        assert steps.count("the-waiter") == 1
        assert set(tries[1:]) == {trio.lowlevel.current_task()}  # all but the first, here
        assert len(tries) == 7 and len(purgatory) == 0
    assert results[0] is True
    assert isinstance(results[1], ValueError)


async def test_times_out_and_completes_at_once_when_already_done() -> None:
    purgatory: Purgatory[str] = Purgatory("test")
    assert await purgatory.wait(["k"], lambda _: True, 0) is True
    assert await purgatory.wait(["k"], lambda _: False, 0) is False
    started = trio.current_time()
    assert await purgatory.wait(["k"], lambda _: False, 0.05) is False
    assert trio.current_time() - started >= 0.05
    assert len(purgatory) == 0


async def test_its_timeout_is_an_entry_that_goes_when_the_wait_ends() -> None:
    """A wait's timeout is a gregor.client.timeouts entry, not a cancel scope: gone once
    the wait completes, is cancelled or times out."""
    purgatory: Purgatory[str] = Purgatory("test")
    done = {"k": False}
    results: list[bool] = []

    async def waiter(timeout: float) -> None:
        results.append(await purgatory.wait(["k"], lambda _: done["k"], timeout))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter, 30)
        await trio.testing.wait_all_tasks_blocked()
        assert pending_timeouts() == 1
        done["k"] = True
        purgatory.notify("k")
    assert results == [True] and pending_timeouts() == 0

    with trio.move_on_after(0.01):  # the caller cancelled: no entry left behind
        await purgatory.wait(["k"], lambda _: False, 30)
    assert pending_timeouts() == 0 and len(purgatory) == 0

    done["k"] = False
    assert await purgatory.wait(["k"], lambda _: done["k"], 0.05) is False
    assert pending_timeouts() == 0 and len(purgatory) == 0


async def test_a_subscription_keeps_what_was_notified_between_its_waits() -> None:
    """A standing watch (an incremental fetch session's): notifications of its keys collect
    whether or not an operation waits on it; `register_on` first tries with those collected,
    registers on the subscription (counted as one operation per key), and is told only the keys
    notified since; unwatched and closed keys collect nothing."""
    purgatory: Purgatory[str] = Purgatory("test")
    subscription = purgatory.subscribe(["a", "b", "c"])
    purgatory.notify("a")
    purgatory.notify("other")
    assert subscription.take() == {"a"} and subscription.take() == set()

    told: list[set[str]] = []
    results: list[bool] = []

    def check(changed: Collection[str]) -> bool:
        told.append(set(changed))
        return "b" in changed

    async def waiter() -> None:
        results.append(await wait_on(purgatory, subscription, check, 30))

    purgatory.notify("c")  # before the wait: its first try is told
    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        assert told == [{"c"}] and results == []
        assert len(purgatory) == 3 and purgatory.watched("a") == 0  # no waiter per key
        assert pending_timeouts() == 1
        purgatory.notify("a")
        await trio.testing.wait_all_tasks_blocked()
        assert told[1:] == [{"a"}] and results == []
        purgatory.notify("b")
    assert results == [True] and told[2:] == [{"b"}]
    assert len(purgatory) == 0 and pending_timeouts() == 0

    # No first try when nothing was notified; a timeout leaves the keys notified after it.
    told.clear()
    assert await wait_on(purgatory, subscription, check, 0.01) is False
    assert told == [] and pending_timeouts() == 0
    purgatory.notify("c")

    subscription.unwatch(["c", "a"])
    purgatory.notify("a")
    purgatory.notify("b")
    assert subscription.take() == {"b"}  # "c" went with its key
    subscription.close()
    purgatory.notify("b")
    assert subscription.take() == set() and purgatory.subscribers == {}


async def test_notify_all_wakes_an_operation_parked_on_a_subscription() -> None:
    """The broker's shutdown: every parked fetch looks again, sessions' too."""
    purgatory: Purgatory[str] = Purgatory("test")
    subscription = purgatory.subscribe(["a"])
    told: list[set[str]] = []

    def check(changed: Collection[str]) -> bool:
        told.append(set(changed))
        return True

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait_on, purgatory, subscription, check, 30)
        await trio.testing.wait_all_tasks_blocked()
        purgatory.notify_all()
    assert told == [{"a"}] and len(purgatory) == 0


async def test_a_registered_operation_tells_whoever_waits_once_when_it_is_done() -> None:
    """Kafka's two-phase delayed operation: registered where the request is handled, with
    no task parked on it; `on_done` is called once, by the notifier or the expiry, and the
    result is built afterwards, told whether the operation completed."""
    purgatory: Purgatory[str] = Purgatory("test")
    state = {"done": False}
    tries: list[set[str]] = []
    calls: list[str] = []

    def check(changed: Collection[str]) -> bool:
        tries.append(set(changed))
        return state["done"]

    delayed = Delayed(purgatory.register(["a", "b"], check, 30), lambda completed: completed)
    delayed.on_done(lambda: calls.append("done"))
    assert tries == [{"a", "b"}] and not delayed.done
    assert purgatory.watched("a") == purgatory.watched("b") == 1 and pending_timeouts() == 1
    purgatory.notify("a")
    assert calls == [] and not delayed.done
    state["done"] = True
    purgatory.notify("b")
    assert calls == ["done"] and delayed.done and delayed.finish() is True
    purgatory.notify("a")  # gone from the purgatory: not tried again
    assert tries == [{"a", "b"}, {"a"}, {"b"}]
    assert len(purgatory) == 0 and pending_timeouts() == 0

    # Expired: on_done from the timer, and the result is told it did not complete.
    state["done"] = False
    expiring = Delayed(purgatory.register(["a"], check, 0.01), lambda completed: completed)
    ended = trio.Event()
    expiring.on_done(ended.set)
    with trio.fail_after(10):
        await ended.wait()
    assert expiring.finish() is False and len(purgatory) == 0 and pending_timeouts() == 0

    # Done at once: nothing registered; a timeout of 0 expires at once.
    assert Delayed(purgatory.register(["a"], lambda _: True, 30), bool).done
    now = Delayed(purgatory.register(["a"], check, 0), lambda completed: completed)
    assert now.done and now.finish() is False and len(purgatory) == 0

    # Registered by a caller that has just looked: no first try.
    tries.clear()
    waiter = purgatory.register(["a"], check, 30, tried=True)
    assert tries == [] and waiter is not None
    waiter.cancel()


async def test_a_cancelled_operation_leaves_the_purgatory_and_tells_nobody() -> None:
    """Its connection closed: the operation goes at once, not at its timeout; `on_done` is
    not called, and `on_cancel` hands back what it had taken from a subscription."""
    purgatory: Purgatory[str] = Purgatory("test")
    subscription = purgatory.subscribe(["a", "b"])
    calls: list[str] = []
    for register in (
        lambda: purgatory.register(["a"], lambda _: False, 30),
        lambda: purgatory.register_on(subscription, lambda _: False, 30),
    ):
        delayed = Delayed(register(), bool, lambda: calls.append("on_cancel"))
        delayed.on_done(lambda: calls.append("on_done"))
        assert len(purgatory) in (1, 2) and pending_timeouts() == 1
        delayed.cancel()
        assert len(purgatory) == 0 and pending_timeouts() == 0
        purgatory.notify("a")
        assert subscription.waiter is None
    assert calls == ["on_cancel", "on_cancel"]


async def test_a_wait_leaves_nothing_for_the_garbage_collector() -> None:
    """A waiter that refers to itself (a bound method of its own kept on it) is freed only
    by the cyclic collector; a broker parks thousands a second, and the full collections
    they brought stalled it for 30 ms. Every kind of wait is freed by reference counting."""
    purgatory: Purgatory[str] = Purgatory("test")
    subscription = purgatory.subscribe(["s"])

    async def waits() -> None:
        assert await purgatory.wait(["k"], lambda _: False, 0.001) is False  # expires
        assert await wait_on(purgatory, subscription, lambda _: False, 0.001) is False
        # Completed by a notification (from the timer task: no nursery, which makes garbage).
        notifying = call_at(trio.current_time(), lambda: purgatory.notify("k"))
        assert await purgatory.wait(["k"], lambda _: True, 30) is True
        notifying.cancel()
        # Registered with a callback that refers back to it (a connection's queue holds
        # its answer, whose operation calls the queue), done, and cancelled.
        queue: list[Delayed[bool]] = []
        done = {"k": False}
        delayed = Delayed(purgatory.register(["k"], lambda _: done["k"], 30), bool)
        queue.append(delayed)
        delayed.on_done(queue.clear)
        done["k"] = True
        purgatory.notify("k")
        assert queue == []
        cancelled = Delayed(purgatory.register_on(subscription, lambda _: False, 30), bool)
        queue.append(cancelled)
        cancelled.on_done(queue.clear)
        cancelled.cancel()

    await waits()  # trio's one-time objects
    gc.collect()
    gc.disable()
    try:
        for _ in range(20):
            await waits()
        assert gc.collect() == 0
    finally:
        gc.enable()
