"""Consumer groups with kafka-python and aiokafka (commits and resuming where they left off),
a group mixing kafka-python and confluent-kafka members that together read every record
exactly once, kafka-python's cooperative-sticky rebalancing and static members, and
aiokafka's static members."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.abc import ConsumerRebalanceListener as AioRebalanceListener
from aiokafka.coordinator.assignors.range import RangePartitionAssignor as AioRangeAssignor
from aiokafka.structs import TopicPartition as AioTopicPartition
from confluent_kafka import Consumer
from groups.helpers import (
    SESSION,
    assert_static_restart,
    assignment_of,
    committed_offsets,
    group_metadata_records,
    produce,
)
from kafka import ConsumerRebalanceListener, KafkaConsumer
from kafka import TopicPartition as KpTopicPartition
from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
from kafka.coordinator.assignors.range import RangePartitionAssignor

from gregor.devcluster import LocalCluster
from gregor_testing.cluster import create_topic, unique_topic, wait_for

PARTITIONS = 3
RECORDS = 300
GROUP_TIMEOUTS = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 500}


def kafka_python_consumer(cluster: LocalCluster, group: str, **conf: object) -> KafkaConsumer:
    return KafkaConsumer(
        bootstrap_servers=cluster.bootstrap_servers,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        **{**GROUP_TIMEOUTS, **conf},
    )


def read(
    consumer: KafkaConsumer, count: int, timeout: float = 60.0
) -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) of `count` records (or all there are once none come)."""
    out: list[tuple[int, int, bytes]] = []

    def more() -> bool:
        for records in consumer.poll(timeout_ms=200, max_records=count - len(out)).values():
            out.extend((r.partition, r.offset, r.value) for r in records)
        return len(out) >= count

    wait_for(more, timeout, f"{count} records")
    return out


@pytest.mark.interop("kafka-python", "groups")
def test_kafka_python_group_with_commits(group_cluster: LocalCluster) -> None:
    topic = unique_topic("kp-group")
    create_topic(group_cluster, topic, partitions=PARTITIONS, replication_factor=3)
    values = [f"kp-{i}".encode() for i in range(RECORDS)]
    produce(group_cluster, topic, values, PARTITIONS)
    group = unique_topic("g-kp")

    first = kafka_python_consumer(group_cluster, group)
    first.subscribe([topic])
    try:
        seen = read(first, 200)
        first.commit()
        positions = {p: first.committed(KpTopicPartition(topic, p)) for p in range(PARTITIONS)}
    finally:
        first.close(autocommit=False)
    expected = {(topic, p): o for p, o in positions.items() if o is not None}
    assert committed_offsets(group_cluster, group) == expected

    second = kafka_python_consumer(group_cluster, group)
    second.subscribe([topic])
    try:
        rest = read(second, RECORDS - 200)
    finally:
        second.close(autocommit=False)
    assert all(offset >= (positions[p] or 0) for p, offset, _ in rest)
    assert sorted(v for _, _, v in seen + rest) == sorted(values)


@pytest.mark.interop("aiokafka", "groups")
def test_aiokafka_group_with_commits(group_cluster: LocalCluster) -> None:
    topic = unique_topic("aio-group")
    create_topic(group_cluster, topic, partitions=PARTITIONS, replication_factor=3)
    values = [f"aio-{i}".encode() for i in range(RECORDS)]
    produce(group_cluster, topic, values, PARTITIONS)
    group = unique_topic("g-aio")

    async def consume(count: int) -> tuple[list[tuple[int, int, bytes]], dict[int, int | None]]:
        consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=group_cluster.bootstrap_servers,
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            **GROUP_TIMEOUTS,
        )
        await consumer.start()
        try:
            out: list[tuple[int, int, bytes]] = []
            async with asyncio.timeout(60):
                while len(out) < count:
                    batches = await consumer.getmany(timeout_ms=200, max_records=count - len(out))
                    for records in batches.values():
                        out.extend((r.partition, r.offset, r.value) for r in records)
            await consumer.commit()
            committed = {
                p: await consumer.committed(AioTopicPartition(topic, p)) for p in range(PARTITIONS)
            }
            return out, committed
        finally:
            await consumer.stop()

    seen, positions = asyncio.run(consume(180))
    assert committed_offsets(group_cluster, group) == {
        (topic, p): o for p, o in positions.items() if o is not None
    }
    rest, final = asyncio.run(consume(RECORDS - 180))
    assert all(offset >= (positions[p] or 0) for p, offset, _ in rest)
    assert sorted(v for _, _, v in seen + rest) == sorted(values)
    counts = {p: sum(1 for q, _, _ in seen + rest if q == p) for p in range(PARTITIONS)}
    assert {p: o for p, o in final.items() if o is not None} == {
        p: n for p, n in counts.items() if n
    }


class Member:
    """A group member reading in a thread of its own, as an application's poll loop does:
    `read()` returns (partition, value) pairs and commits them at once (so a rebalance
    re-reads none); the loop also records the member's current partitions."""

    def __init__(
        self,
        name: str,
        read: Callable[[], list[tuple[int, bytes]]],
        assignment: Callable[[], set[int]],
        close: Callable[[], object],
    ) -> None:
        self.name = name
        self.read = read
        self.current = assignment
        self.close = close
        self.got: list[tuple[str, int, bytes]] = []
        self.partitions: set[int] = set()
        self.error: Exception | None = None
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            while not self.stopping.is_set():
                self.got += [(self.name, p, value) for p, value in self.read()]
                self.partitions = self.current()
        except Exception as exc:  # the test fails on it through `check`
            self.error = exc

    def check(self) -> None:
        if self.error is not None:
            raise AssertionError(f"{self.name} failed") from self.error

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(60)
        self.close()


def test_kafka_python_and_confluent_share_a_group(group_cluster: LocalCluster) -> None:
    # Each member polls in a thread of its own. Interleaving short polls of both in one
    # thread made the group rebalance without end: kafka-python (3.0.12) drops a join and
    # sync that completes between two of its polls and joins again, and a leader that
    # rejoins a Stable group starts a rebalance (as in Kafka), which again completes while
    # the other member is being polled.
    topic = unique_topic("mixed")
    create_topic(group_cluster, topic, partitions=6, replication_factor=3)
    group = unique_topic("g-mixed")
    kp = kafka_python_consumer(
        group_cluster, group, partition_assignment_strategy=[RangePartitionAssignor]
    )
    ck = Consumer(
        {
            "bootstrap.servers": group_cluster.bootstrap_servers,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "partition.assignment.strategy": "range",
            **SESSION,
        }
    )

    def kp_read() -> list[tuple[int, bytes]]:
        records = [r for batch in kp.poll(timeout_ms=500).values() for r in batch]
        if records:
            kp.commit()
        return [(r.partition, r.value) for r in records]

    def ck_read() -> list[tuple[int, bytes]]:
        messages = [m for m in ck.consume(num_messages=500, timeout=0.5) if m.error() is None]
        if messages:
            ck.commit(asynchronous=False)
        return [(m.partition(), m.value()) for m in messages]

    kp.subscribe([topic])
    ck.subscribe([topic])
    members = [
        Member(
            "kafka-python",
            kp_read,
            lambda: {tp.partition for tp in kp.assignment()},
            lambda: kp.close(autocommit=False),
        ),
        Member("confluent", ck_read, lambda: assignment_of(ck), ck.close),
    ]
    try:

        def split() -> bool:
            for member in members:
                member.check()
            mine, theirs = (member.partitions for member in members)
            return len(mine) == 3 and len(theirs) == 3 and not mine & theirs

        wait_for(split, 60, "the range assignment of 6 partitions to both members")
        values = [f"mixed-{i}".encode() for i in range(600)]
        produce(group_cluster, topic, values, 6)

        def all_read() -> bool:
            for member in members:
                member.check()
            return sum(len(member.got) for member in members) >= len(values)

        wait_for(all_read, 60, "every record")
    finally:
        for member in members:
            member.stop()
    got = [record for member in members for record in member.got]
    assert sorted(v for _, _, v in got) == sorted(values)  # each record exactly once
    readers = {reader for reader, _, _ in got}
    assert readers == {"kafka-python", "confluent"}
    # Each partition was read by one member alone.
    owners = {p: {reader for reader, q, _ in got if q == p} for p in range(6)}
    assert all(len(o) <= 1 for o in owners.values()), owners


class RebalanceEvents:
    """Records a member's rebalance callbacks that name partitions: ("assign"|"revoke",
    partitions). (An eager member is told of revoking nothing before its first join.)"""

    def __init__(self) -> None:
        self.events: list[tuple[str, set[int]]] = []

    def on_partitions_revoked(self, revoked: Any) -> None:
        if revoked:
            self.events.append(("revoke", {tp.partition for tp in revoked}))

    def on_partitions_assigned(self, assigned: Any) -> None:
        if assigned:
            self.events.append(("assign", {tp.partition for tp in assigned}))


class Listener(RebalanceEvents, ConsumerRebalanceListener):
    """A kafka-python member's rebalance callbacks."""


def kafka_python_member(name: str, consumer: KafkaConsumer) -> Member:
    """A kafka-python consumer polling in a thread of its own (see the mixed group's test)."""

    def poll() -> list[tuple[int, bytes]]:
        batches = consumer.poll(timeout_ms=200).values()
        return [(r.partition, r.value) for batch in batches for r in batch]

    return Member(
        name,
        poll,
        lambda: {tp.partition for tp in consumer.assignment()},
        lambda: consumer.close(autocommit=False),
    )


def wait_members(members: list[Member], condition: Callable[[], bool], what: str) -> None:
    def check() -> bool:
        for member in members:
            member.check()
        return condition()

    wait_for(check, 60, what)


@pytest.mark.interop("kafka-python", "static-coop")
def test_kafka_python_cooperative_sticky_rebalances_incrementally(
    group_cluster: LocalCluster,
) -> None:
    """KIP-429 with kafka-python's CooperativeStickyAssignor: a second member takes half of
    the first one's partitions; the first gives up exactly those and keeps the rest."""
    topic = unique_topic("kp-coop")
    create_topic(group_cluster, topic, partitions=6, replication_factor=3)
    group = unique_topic("g-kp-coop")
    listeners = {"a": Listener(), "b": Listener()}
    members: list[Member] = []

    def join(name: str) -> Member:
        consumer = kafka_python_consumer(
            group_cluster, group, partition_assignment_strategy=[CooperativeStickyAssignor]
        )
        consumer.subscribe([topic], listener=listeners[name])
        members.append(kafka_python_member(name, consumer))
        return members[-1]

    try:
        a = join("a")
        wait_members(members, lambda: a.partitions == set(range(6)), "all 6 partitions for a")
        b = join("b")
        wait_members(
            members,
            lambda: len(a.partitions) == 3 and len(b.partitions) == 3,
            "3 partitions for each member",
        )
        # (as they are now: stopping one rebalances the other, and closing revokes)
        kept, taken = a.partitions, b.partitions
        events = {name: list(listener.events) for name, listener in listeners.items()}
    finally:
        for member in members:
            member.stop()
    assert not kept & taken
    revoked = set().union(*(ps for kind, ps in events["a"] if kind == "revoke"))
    assert revoked == taken  # exactly what b took; nothing a kept was ever revoked
    assert all(kind == "assign" for kind, _ in events["b"])


@pytest.mark.interop("kafka-python", "static-coop")
def test_kafka_python_static_member_restart_causes_no_rebalance(
    group_cluster: LocalCluster,
) -> None:
    """KIP-345 with kafka-python's group_instance_id: a static member that closes does not
    leave; restarted under the same instance id it gets its partitions back in the same
    generation, and the other member sees no rebalance."""
    topic = unique_topic("kp-static")
    create_topic(group_cluster, topic, partitions=4, replication_factor=3)
    group = unique_topic("g-kp-static")
    listeners = {"instance-1": Listener(), "instance-2": Listener()}
    members: dict[str, Member] = {}

    def start(instance: str) -> Member:
        consumer = kafka_python_consumer(
            group_cluster,
            group,
            group_instance_id=instance,
            session_timeout_ms=30000,
            partition_assignment_strategy=[RangePartitionAssignor],
        )
        consumer.subscribe([topic], listener=listeners[instance])
        members[instance] = kafka_python_member(instance, consumer)
        return members[instance]

    try:
        first, second = start("instance-1"), start("instance-2")
        wait_members(
            [first, second],
            lambda: len(first.partitions) == 2 and len(second.partitions) == 2,
            "2 partitions for each member",
        )
        owned = second.partitions
        before = group_metadata_records(group_cluster, group)[-1]
        assert before is not None
        second.stop()  # a static member sends no LeaveGroup when it closes
        for listener in listeners.values():
            listener.events.clear()
        restarted = start("instance-2")
        wait_members(
            [first, restarted], lambda: restarted.partitions == owned, "the same partitions back"
        )
        events = {name: list(listener.events) for name, listener in listeners.items()}
    finally:
        for member in members.values():
            if not member.stopping.is_set():
                member.stop()
    after = group_metadata_records(group_cluster, group)[-1]
    assert_static_restart(before, after, "instance-1", "instance-2")
    assert events["instance-1"] == []  # the other member saw no rebalance
    assert events["instance-2"] == [("assign", owned)]


class AioListener(RebalanceEvents, AioRebalanceListener):
    """An aiokafka member's rebalance callbacks."""


@pytest.mark.interop("aiokafka", "static-coop")
def test_aiokafka_static_member_restart_causes_no_rebalance(group_cluster: LocalCluster) -> None:
    """KIP-345 with aiokafka's group_instance_id (it has no cooperative protocol): a static
    member that stops does not leave; restarted under the same instance id it gets its
    partitions back in the same generation, and the other member sees no rebalance."""
    topic = unique_topic("aio-static")
    create_topic(group_cluster, topic, partitions=4, replication_factor=3)
    group = unique_topic("g-aio-static")
    listeners = {"instance-1": AioListener(), "instance-2": AioListener()}

    async def start(instance: str) -> AIOKafkaConsumer:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=group_cluster.bootstrap_servers,
            group_id=group,
            group_instance_id=instance,
            session_timeout_ms=30000,
            heartbeat_interval_ms=500,
            enable_auto_commit=False,
            partition_assignment_strategy=(AioRangeAssignor,),
        )
        consumer.subscribe([topic], listener=listeners[instance])
        await consumer.start()
        return consumer

    def owned(consumer: AIOKafkaConsumer) -> set[int]:
        return {tp.partition for tp in consumer.assignment()}

    async def until(condition: Callable[[], bool]) -> None:
        async with asyncio.timeout(60):
            while not condition():
                await asyncio.sleep(0.1)

    async def run() -> tuple[Any, Any, set[int], dict[str, list[tuple[str, set[int]]]]]:
        first = await start("instance-1")
        second = await start("instance-2")
        restarted = None
        try:
            await until(lambda: len(owned(first)) == 2 and len(owned(second)) == 2)
            mine = owned(second)
            before = (await asyncio.to_thread(group_metadata_records, group_cluster, group))[-1]
            await second.stop()  # a static member sends no LeaveGroup when it stops
            for listener in listeners.values():
                listener.events.clear()
            restarted = await start("instance-2")
            await until(lambda: owned(restarted) == mine)
            events = {name: list(listener.events) for name, listener in listeners.items()}
            after = (await asyncio.to_thread(group_metadata_records, group_cluster, group))[-1]
            return before, after, mine, events
        finally:
            await first.stop()
            if restarted is not None:
                await restarted.stop()

    before, after, mine, events = asyncio.run(run())
    assert_static_restart(before, after, "instance-1", "instance-2")
    assert events["instance-1"] == []  # the other member saw no rebalance
    assert events["instance-2"] == [("assign", mine)]
