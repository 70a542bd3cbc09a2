"""The purgatory: waiting operations complete when their keys are notified, or time out."""

from __future__ import annotations

import trio
import trio.testing

from gregor.broker.purgatory import Purgatory


async def test_completes_on_notification_of_a_watched_key() -> None:
    purgatory = Purgatory("test")
    state = {"done": False}
    results: list[bool] = []

    async def waiter() -> None:
        results.append(await purgatory.wait([("t", 0), ("t", 1)], lambda: state["done"], 10))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        assert purgatory.watched(("t", 1)) == 1
        purgatory.notify(("t", 1))  # not done yet: it goes back to waiting
        await trio.testing.wait_all_tasks_blocked()
        assert results == []
        state["done"] = True
        purgatory.notify(("other", 0))  # not its key: nothing happens
        await trio.testing.wait_all_tasks_blocked()
        assert results == []
        purgatory.notify(("t", 0))
    assert results == [True]
    assert len(purgatory) == 0  # unwatched on the way out


async def test_times_out_and_completes_at_once_when_already_done() -> None:
    purgatory = Purgatory("test")
    assert await purgatory.wait(["k"], lambda: True, 0) is True
    assert await purgatory.wait(["k"], lambda: False, 0) is False
    started = trio.current_time()
    assert await purgatory.wait(["k"], lambda: False, 0.05) is False
    assert trio.current_time() - started >= 0.05
    assert len(purgatory) == 0
