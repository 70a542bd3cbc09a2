"""Handover: a connection's answers from its processor to its writer, in order, parking a
task only when it must, and costing no turn of trio's loop when it need not wait."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from gregor.broker.handover import Handover


class Turns(trio.abc.Instrument):
    """Counts the turns of trio's loop (each waits for I/O, if only for no time)."""

    def __init__(self) -> None:
        self.count = 0

    def before_io_wait(self, timeout: float) -> None:
        self.count += 1


async def test_items_come_out_in_order_and_none_once_closed_and_drained() -> None:
    handover = Handover[int](4)
    for item in (1, 2, 3):
        await handover.give(item)
    handover.close()
    assert len(handover) == 3
    assert [await handover.take() for _ in range(4)] == [1, 2, 3, None]
    with pytest.raises(trio.ClosedResourceError):
        await handover.give(4)


async def test_giving_and_taking_without_waiting_turn_no_loop() -> None:
    turns = Turns()
    trio.lowlevel.add_instrument(turns)
    try:
        handover = Handover[int](16)
        for item in range(10):
            await handover.give(item)
        taken = [await handover.take() for _ in range(10)]
        assert turns.count == 0
    finally:
        trio.lowlevel.remove_instrument(turns)
    assert taken == list(range(10))


async def test_a_parked_taker_wakes_for_an_item_and_for_close() -> None:
    handover = Handover[str](4)
    taken: list[str | None] = []

    async def taker() -> None:
        while (item := await handover.take()) is not None:
            taken.append(item)
        taken.append(None)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(taker)
        await trio.testing.wait_all_tasks_blocked()
        await handover.give("a")
        await trio.testing.wait_all_tasks_blocked()
        assert taken == ["a"]
        await handover.give("b")
        handover.close()
    assert taken == ["a", "b", None]


async def test_a_full_handover_parks_the_giver_until_an_item_is_taken() -> None:
    handover = Handover[int](2)
    given: list[int] = []

    async def giver() -> None:
        for item in range(4):
            await handover.give(item)
            given.append(item)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(giver)
        await trio.testing.wait_all_tasks_blocked()
        assert given == [0, 1] and len(handover) == 2  # the third waits for room
        assert await handover.take() == 0
        await trio.testing.wait_all_tasks_blocked()
        assert given == [0, 1, 2]
        assert [await handover.take() for _ in range(2)] == [1, 2]
    assert given == [0, 1, 2, 3]
    assert await handover.take() == 3


async def test_parked_tasks_can_be_cancelled_and_the_handover_goes_on() -> None:
    handover = Handover[int](1)
    with trio.move_on_after(0.01) as waited:
        await handover.take()  # nothing to take
    assert waited.cancelled_caught
    await handover.give(1)
    with trio.move_on_after(0.01) as waited:
        await handover.give(2)  # full
    assert waited.cancelled_caught
    assert len(handover) == 1
    assert await handover.take() == 1
    await handover.give(3)  # the cancelled giver left no trace
    assert await handover.take() == 3


async def test_the_taker_wakes_only_when_the_item_at_the_head_is_ready() -> None:
    """A connection's `Later` answers: given when registered, taken in order once done. A
    ready item behind one that is not waits for it; giving an item that is not ready, or
    `wake` while the head is not ready, costs the taker no step."""
    ready: set[str] = {"ready"}
    handover = Handover[str](4, lambda item: item in ready)
    taken: list[str | None] = []
    steps: list[str] = []

    class Steps(trio.abc.Instrument):
        def before_task_step(self, task: trio.lowlevel.Task) -> None:
            steps.append(task.name)

    async def taker() -> None:
        while (item := await handover.take()) is not None:
            taken.append(item)
        taken.append(None)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(taker, name="taker")
        await trio.testing.wait_all_tasks_blocked()
        instrument = Steps()
        trio.lowlevel.add_instrument(instrument)
        try:
            await handover.give("later")  # not ready
            await handover.give("ready")  # ready, but behind it
            handover.wake()  # nothing became ready
            await trio.testing.wait_all_tasks_blocked()
            assert taken == [] and "taker" not in steps
            ready.add("later")
            handover.wake()
            await trio.testing.wait_all_tasks_blocked()
            assert taken == ["later", "ready"] and steps.count("taker") == 1
        finally:
            trio.lowlevel.remove_instrument(instrument)
        await handover.give("last")  # not ready: closing leaves it to wait
        handover.close()
        await trio.testing.wait_all_tasks_blocked()
        assert taken == ["later", "ready"]
        ready.add("last")
        handover.wake()
    assert taken == ["later", "ready", "last", None]


async def test_drain_takes_away_what_was_not_taken() -> None:
    handover = Handover[int](4, lambda item: item != 1)
    for item in (1, 2):
        await handover.give(item)
    assert handover.drain() == [1, 2] and len(handover) == 0
