"""Group ids map to `__consumer_offsets` partitions exactly as Kafka maps them.

The hash values were printed by Java 17's String.hashCode; the partitions follow from Kafka's
`Utils.abs(hash) % partitions`, where abs(Integer.MIN_VALUE) is 0.
"""

from __future__ import annotations

import pytest
import trio
from trio.testing import MockClock

from gregor.broker.coordinator.partitioning import java_abs, java_string_hash, partition_for
from gregor.client.timeouts import TimerQueue

JAVA_HASHES = {
    "": 0,
    "hello": 99162322,
    "my-group": -1906497762,
    "test-group-1": 2060176936,
    "polygenelubricants": -(2**31),  # Integer.MIN_VALUE
    "é€😀": 16752006,  # the emoji is two UTF-16 code units
}


@pytest.mark.parametrize(("text", "expected"), JAVA_HASHES.items())
def test_java_string_hash(text: str, expected: int) -> None:
    assert java_string_hash(text) == expected


def test_java_abs_of_the_smallest_int_is_zero() -> None:
    assert java_abs(-(2**31)) == 0
    assert java_abs(-5) == 5
    assert java_abs(2**31 - 1) == 2**31 - 1


@pytest.mark.parametrize(
    ("group", "partitions", "expected"),
    [
        ("my-group", 50, 1906497762 % 50),
        ("hello", 50, 99162322 % 50),
        ("polygenelubricants", 50, 0),
        ("test-group-1", 7, 2060176936 % 7),
        ("", 50, 0),
    ],
)
def test_partition_for(group: str, partitions: int, expected: int) -> None:
    assert partition_for(group, partitions) == expected


async def test_timers_fire_in_deadline_order_and_can_be_cancelled(
    autojump_clock: MockClock, nursery: trio.Nursery
) -> None:
    timers = TimerQueue("test")
    await nursery.start(timers.run)
    fired: list[tuple[str, float]] = []
    start = trio.current_time()

    def record(name: str) -> None:
        fired.append((name, trio.current_time() - start))

    timers.call_later(5, record, "five")
    cancelled = timers.call_later(1, record, "one")
    timers.call_later(3, record, "three")
    cancelled.cancel()
    assert len(timers) == 2
    await trio.sleep(2)
    timers.call_later(0.5, record, "two-and-a-half")  # earlier than the one the loop awaits
    await trio.sleep(10)
    assert fired == [("two-and-a-half", 2.5), ("three", 3.0), ("five", 5.0)]
    assert len(timers) == 0


async def test_a_failing_timer_does_not_stop_the_others(
    autojump_clock: MockClock, nursery: trio.Nursery
) -> None:
    timers = TimerQueue("test")
    await nursery.start(timers.run)
    fired: list[int] = []

    def boom() -> None:
        raise ValueError("boom")

    timers.call_later(1, boom)
    timers.call_later(2, fired.append, 2)
    await trio.sleep(3)
    assert fired == [2]
