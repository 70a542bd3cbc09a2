"""AsyncProducer, AsyncConsumer and AsyncAdminClient, natively under trio and through the
I/O-thread bridge under asyncio, against scripted brokers."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import pytest
import trio
from client_scripted import ScriptedCluster, fill

from gregor.client import (
    AsyncAdminClient,
    AsyncConsumer,
    AsyncProducer,
    ConsumerRecord,
    NewTopic,
    RecordMetadata,
    TopicPartition,
)
from gregor.client.runtime import ClientClosedError
from gregor.protocol.apis.list_offsets import ListOffsetsRequest
from gregor.protocol.errors import RequestTimedOutError

T0 = TopicPartition("t", 0)


def config(cluster: ScriptedCluster, **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": cluster.bootstrap, **extra}


async def produce_and_consume(cluster: ScriptedCluster) -> list[ConsumerRecord]:
    """The same code under either library."""
    delivered: list[int] = []
    async with AsyncProducer(config(cluster, **{"linger.ms": 5})) as producer:
        first = await producer.send("t", b"first", key=b"k", partition=0)
        assert first == RecordMetadata("t", 0, 0, first.timestamp)
        futures = [
            await producer.produce(
                "t",
                b"v%d" % i,
                partition=0,
                on_delivery=lambda err, meta: delivered.append(meta.offset),
            )
            for i in range(1, 20)
        ]
        assert await producer.flush(10) == 0
        assert [(await f).offset for f in futures] == list(range(1, 20))
        assert await producer.partitions_for("t") == [0]
    assert delivered == list(range(1, 20))
    async with AsyncConsumer(config(cluster, **{"auto.offset.reset": "earliest"})) as consumer:
        consumer.assign([T0])
        records: list[ConsumerRecord] = []
        while len(records) < 20:
            records += await consumer.getmany(timeout=5)
        assert await consumer.position(T0) == 20
        assert await consumer.end_offsets([T0]) == {T0: 20}
        consumer.seek(T0, 18)
        again = [r async for r in _take(consumer, 2)]
        assert [r.offset for r in again] == [18, 19]
        assert await consumer.getone(timeout=0.2) is None
    return records


async def _take(consumer: AsyncConsumer, count: int) -> Any:
    async for record in consumer:
        yield record
        count -= 1
        if count == 0:
            return


async def test_under_trio(cluster: ScriptedCluster) -> None:
    cluster.create_topic("t", 1)
    records = await produce_and_consume(cluster)
    assert [r.value for r in records] == [b"first"] + [b"v%d" % i for i in range(1, 20)]
    # Natively: no I/O thread was started for the async clients.
    assert not [t for t in threading.enumerate() if t.name.startswith("gregor-")]


def test_under_asyncio(cluster: ScriptedCluster) -> None:
    cluster.create_topic("t", 1)

    async def main() -> list[ConsumerRecord]:
        records = await produce_and_consume(cluster)
        return records

    records = asyncio.run(main())
    assert [r.offset for r in records] == list(range(20))


async def group_member(cluster: ScriptedCluster, events: list[str]) -> int:
    class Listener:
        async def on_assign(
            self, consumer: AsyncConsumer, partitions: list[TopicPartition]
        ) -> None:
            events.append(f"assign {len(partitions)}")

        def on_revoke(self, consumer: AsyncConsumer, partitions: list[TopicPartition]) -> None:
            events.append(f"revoke {len(partitions)}")

    async with AsyncConsumer(
        config(
            cluster,
            **{"group.id": "g", "auto.offset.reset": "earliest", "enable.auto.commit": False},
        )
    ) as consumer:
        consumer.subscribe(["t"], Listener())
        got: list[ConsumerRecord] = []
        while len(got) < 5:
            got += await consumer.getmany(timeout=5)
        await consumer.commit()
        committed = await consumer.committed([T0, TopicPartition("t", 1)])
        return sum(meta.offset for meta in committed.values() if meta is not None)


def _fill(cluster: ScriptedCluster) -> None:
    from gregor.protocol.records import BatchBuilder

    cluster.create_topic("t", 2)
    builder = BatchBuilder()
    for n in range(5):
        builder.append(b"%d" % n)
    cluster.append("t", 1, builder.build())


async def test_group_under_trio_with_an_async_listener(cluster: ScriptedCluster) -> None:
    _fill(cluster)
    events: list[str] = []
    assert await group_member(cluster, events) == 5
    assert events == ["assign 2", "revoke 2"]  # revoked on close


def test_group_under_asyncio(cluster: ScriptedCluster) -> None:
    _fill(cluster)
    events: list[str] = []
    assert asyncio.run(group_member(cluster, events)) == 5
    assert events[0] == "assign 2"


Spawn = Callable[[Callable[[], Awaitable[None]]], None]
Sleep = Callable[[float], Awaitable[None]]
Scenario = Callable[[Spawn, Sleep], Awaitable[None]]


async def under_trio(scenario: Scenario) -> None:
    async with trio.open_nursery() as nursery:
        await scenario(nursery.start_soon, trio.sleep)


def under_asyncio(scenario: Scenario) -> None:
    async def main() -> None:
        tasks: list[asyncio.Task[None]] = []
        await scenario(lambda fn: tasks.append(asyncio.create_task(fn())), asyncio.sleep)
        await asyncio.gather(*tasks)

    asyncio.run(main())


async def until(predicate: Callable[[], bool], sleep: Sleep, what: str) -> None:
    deadline = time.monotonic() + 20
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        await sleep(0.01)


class Reader:
    """A task iterating a consumer: what it saw, and what it would have died of."""

    def __init__(self, consumer: AsyncConsumer) -> None:
        self.consumer = consumer
        self.seen: list[int] = []
        self.errors: list[Exception] = []
        self.ended = False

    async def run(self) -> None:
        try:
            async for record in self.consumer:
                self.seen.append(record.offset)  # one at a time: the test reads it as it grows
        except Exception as exc:
            self.errors.append(exc)
        self.ended = True


async def close_and_check(reader: Reader, sleep: Sleep, seen: list[int]) -> None:
    await reader.consumer.close()
    await until(lambda: reader.ended, sleep, "the iteration to end")
    assert reader.errors == []
    assert reader.seen == seen
    with pytest.raises(ClientClosedError, match="the consumer is closed"):
        await reader.consumer.getmany()


async def close_while_iterating(
    cluster: ScriptedCluster, group: str | None, spawn: Spawn, sleep: Sleep
) -> None:
    """Close a consumer from one task while another iterates it, idle between records.
    Three times: the close meets the getmany at a different step each time."""
    cluster.create_topic("t", 1)
    for attempt in range(3):
        extra = {"group.id": f"{group}-{attempt}"} if group else {}
        consumer = AsyncConsumer(config(cluster, **{"auto.offset.reset": "earliest", **extra}))
        await consumer.start()
        if group:
            consumer.subscribe(["t"])
        else:
            consumer.assign([T0])
        reader = Reader(consumer)
        spawn(reader.run)
        total = 3 * attempt + 3
        fill(cluster, "t", 0, 3, start=3 * attempt)
        await until(lambda r=reader, n=total: len(r.seen) == n, sleep, "the records")
        await close_and_check(reader, sleep, list(range(total)))


async def close_while_a_getmany_waits_on_the_broker(
    cluster: ScriptedCluster, spawn: Spawn, sleep: Sleep
) -> None:
    """The iterating task is inside a request (its first position lookup, unanswered) when
    another task closes the consumer: the request is cut short, the iteration just ends."""
    from client_scripted import SILENT

    cluster.create_topic("t", 1)
    fill(cluster, "t", 0, 3)
    cluster.hooks[ListOffsetsRequest.api_key] = lambda broker, request, version: SILENT
    consumer = AsyncConsumer(config(cluster, **{"auto.offset.reset": "earliest"}))
    await consumer.start()
    consumer.assign([T0])
    reader = Reader(consumer)
    spawn(reader.run)
    await until(lambda: bool(cluster.sent("ListOffsets")), sleep, "the lookup")
    await close_and_check(reader, sleep, [])


@pytest.mark.parametrize("group", [None, "readers"], ids=["assigned", "in-a-group"])
async def test_close_in_another_task_ends_iteration_under_trio(
    cluster: ScriptedCluster, group: str | None
) -> None:
    await under_trio(partial(close_while_iterating, cluster, group))


@pytest.mark.parametrize("group", [None, "readers"], ids=["assigned", "in-a-group"])
def test_close_in_another_task_ends_iteration_under_asyncio(
    cluster: ScriptedCluster, group: str | None
) -> None:
    under_asyncio(partial(close_while_iterating, cluster, group))


async def test_close_cuts_short_a_getmany_waiting_on_the_broker_under_trio(
    cluster: ScriptedCluster,
) -> None:
    await under_trio(partial(close_while_a_getmany_waits_on_the_broker, cluster))


def test_close_cuts_short_a_getmany_waiting_on_the_broker_under_asyncio(
    cluster: ScriptedCluster,
) -> None:
    under_asyncio(partial(close_while_a_getmany_waits_on_the_broker, cluster))


async def admin_round(cluster: ScriptedCluster) -> list[str]:
    async with AsyncAdminClient(config(cluster)) as admin:
        await admin.create_topics([NewTopic("made", 2)])
        return await admin.list_topics()


async def test_admin_under_trio(cluster: ScriptedCluster) -> None:
    assert "made" in await admin_round(cluster)


def test_admin_under_asyncio(cluster: ScriptedCluster) -> None:
    assert "made" in asyncio.run(admin_round(cluster))


async def test_a_full_buffer_waits_on_the_loop_not_the_thread(cluster: ScriptedCluster) -> None:
    from client_scripted import SILENT

    cluster.create_topic("t", 1)
    cluster.hooks[0] = lambda broker, request, version: SILENT
    settings = {
        "buffer.memory": 1000,
        "max.block.ms": 300,
        "request.timeout.ms": 60_000,
        "delivery.timeout.ms": 120_000,
    }
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await trio.sleep(0.01)
            ticks += 1

    async with AsyncProducer(config(cluster, **settings)) as producer, trio.open_nursery() as n:
        n.start_soon(ticker)
        with pytest.raises(RequestTimedOutError, match=r"no room in buffer\.memory"):
            for _ in range(20):
                before = ticks
                await producer.produce("t", b"x" * 100, partition=0)
        # The ticker ran while the call that ran out of room waited (a thread blocked for
        # max.block.ms would have held it off until the call returned).
        assert ticks > before
        n.cancel_scope.cancel()
        await producer.close(0)
