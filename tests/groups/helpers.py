"""What the consumer group tests share: coordinator lookups, committed offsets, the group's
records in `__consumer_offsets`, and polling several consumers until a condition."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from confluent_kafka import Consumer, Producer, TopicPartition

from gregor.broker.coordinator.partitioning import partition_for
from gregor.devcluster import BrokerProcess, LocalCluster
from gregor.protocol.apis.offset_fetch import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
)
from gregor.protocol.errors import ErrorCode
from gregor.protocol.group_records import (
    GroupMetadataKey,
    GroupMetadataValue,
    decode_group_metadata_value,
    decode_key,
)
from gregor.protocol.schema import Response
from gregor_testing import faults
from gregor_testing.cluster import WireClient, wait_for

R = TypeVar("R", bound=Response)
OFFSETS_TOPIC = "__consumer_offsets"
# librdkafka's settings for tests: members notice a rebalance within a second.
SESSION = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}
RETRIABLE = {
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.NOT_COORDINATOR,
}


def find_coordinator(cluster: LocalCluster, group: str, timeout: float = 60.0) -> BrokerProcess:
    """The live broker coordinating `group`, asked of the live brokers until one knows."""
    return faults.find_coordinator(cluster, group, faults.GROUP_KEY, timeout)


def committed_offsets(
    cluster: LocalCluster, group: str, timeout: float = 60.0
) -> dict[tuple[str, int], int]:
    """Every committed offset of the group, from its coordinator (OffsetFetch v8, all topics);
    retried while the coordinator moves or loads."""
    out: dict[tuple[str, int], int] = {}

    def ask() -> bool:
        coordinator = find_coordinator(cluster, group, timeout)
        try:
            with WireClient(coordinator) as conn:
                response = conn.request(
                    OffsetFetchRequest(
                        groups=[OffsetFetchRequestGroup(group_id=group, topics=None)]
                    ),
                    8,
                )
        except OSError:
            return False
        [answer] = response.groups
        if answer.error_code in RETRIABLE:
            return False
        assert answer.error_code == ErrorCode.NONE, answer
        out.clear()
        for topic in answer.topics:
            for p in topic.partitions:
                assert p.error_code == ErrorCode.NONE, p
                out[(topic.name, p.partition_index)] = p.committed_offset
        return True

    wait_for(ask, timeout, f"the committed offsets of group {group}")
    return out


def group_metadata_records(
    cluster: LocalCluster, group: str, partitions: int = 50
) -> list[GroupMetadataValue | None]:
    """The group's metadata records in its `__consumer_offsets` partition, oldest first
    (None for a tombstone), read with a plain consumer and decoded as Kafka's format."""
    partition = partition_for(group, partitions)
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": "group-records-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        consumer.assign([TopicPartition(OFFSETS_TOPIC, partition, 0)])
        out: list[GroupMetadataValue | None] = []
        while True:
            message = consumer.poll(10)
            assert message is not None, "no end of partition reached"
            if message.error() is not None:
                break  # the end of the partition
            key = decode_key(message.key())
            if key == GroupMetadataKey(group):
                value = message.value()
                out.append(None if value is None else decode_group_metadata_value(value)[1])
        return out
    finally:
        consumer.close()


def produce(cluster: LocalCluster, topic: str, values: Iterable[bytes], partitions: int) -> None:
    """Produce with acks=all, the i-th value to partition i % `partitions`."""
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    errors: list[object] = []
    for i, value in enumerate(values):
        producer.produce(
            topic,
            value=value,
            partition=i % partitions,
            on_delivery=lambda err, _m: errors.append(err) if err else None,
        )
        producer.poll(0)
    assert producer.flush(60) == 0
    assert not errors, errors


def poll_until(
    consumers: Sequence[Consumer],
    predicate: Callable[[], bool],
    timeout: float,
    what: str,
    on_message: Callable[[int, Any], None] | None = None,
) -> None:
    """Poll every consumer in turn (serving their rebalances) until `predicate()` holds;
    `on_message(index, message)` gets each record."""
    deadline = time.monotonic() + timeout
    while True:
        for i, consumer in enumerate(consumers):
            message = consumer.poll(0.05)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                assert error.retriable() or not error.fatal(), error
                continue
            if on_message is not None:
                on_message(i, message)
        if predicate():
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")


def assignment_of(consumer: Consumer) -> set[int]:
    return {tp.partition for tp in consumer.assignment()}


def assert_static_restart(
    before: GroupMetadataValue | None, after: GroupMetadataValue | None, kept: str, restarted: str
) -> None:
    """The group's records around a static member's restart: the same generation, the other
    member under its old member id, the restarted one known under a new one."""
    assert before is not None and after is not None
    assert after.generation == before.generation
    old_ids = {m.group_instance_id: m.member_id for m in before.members}
    new_ids = {m.group_instance_id: m.member_id for m in after.members}
    assert new_ids[kept] == old_ids[kept]
    assert new_ids[restarted] != old_ids[restarted]
