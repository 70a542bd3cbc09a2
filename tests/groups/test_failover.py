"""The coordinator broker dies (SIGKILL) while a group consumes and commits: the group
re-forms on the new coordinator, which has every committed offset, and consumption goes on
without skipping a record."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException
from groups.helpers import (
    SESSION,
    committed_offsets,
    find_coordinator,
    poll_until,
    produce,
)

from gregor.devcluster import LocalCluster
from gregor.protocol.apis.describe_groups import DescribeGroupsRequest
from gregor.protocol.errors import ErrorCode
from gregor_testing.cluster import WireClient, create_topic, unique_topic, wait_for

PARTITIONS = 6
RECORDS = 3000
FAILOVER_PROPERTIES = {
    "replica.lag.time.max.ms": "3000",
    "group.initial.rebalance.delay.ms": "500",
    "group.min.session.timeout.ms": "1000",
}


def commit(consumer: Consumer) -> None:
    """Commit the consumer's positions; nothing new to commit is fine."""
    try:
        consumer.commit(asynchronous=False)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError._NO_OFFSET:
            raise


def test_coordinator_failover(cluster_factory: Callable[..., LocalCluster]) -> None:
    cluster = cluster_factory(3, **FAILOVER_PROPERTIES)
    topic = unique_topic("failover")
    create_topic(cluster, topic, partitions=PARTITIONS, replication_factor=3)
    values = [f"r-{i}".encode() for i in range(RECORDS)]
    produce(cluster, topic, values, PARTITIONS)
    group = unique_topic("g-failover")
    members = [
        Consumer(
            {
                "bootstrap.servers": cluster.bootstrap_servers,
                "group.id": group,
                "client.id": f"member-{i}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                **SESSION,
            }
        )
        for i in range(2)
    ]
    seen: list[bytes] = []
    since_commit = [0, 0]

    def record(index: int, message: Any) -> None:
        seen.append(message.value())
        since_commit[index] += 1
        if since_commit[index] >= 50:
            # A commit may fail while the coordinator moves; the next one covers it.
            try:
                members[index].commit(asynchronous=False)
            except Exception:
                return
            since_commit[index] = 0

    try:
        for consumer in members:
            consumer.subscribe([topic])
        poll_until(
            members, lambda: len(seen) >= RECORDS // 3, 120, "a third of the records", record
        )
        for consumer in members:
            commit(consumer)
        before = committed_offsets(cluster, group)
        assert sum(before.values()) >= RECORDS // 3 - 2 * 50
        coordinator = find_coordinator(cluster, group)
        coordinator.kill()

        # The new coordinator has loaded every committed offset.
        successor = find_coordinator(cluster, group)
        assert successor.broker_id != coordinator.broker_id
        assert committed_offsets(cluster, group) == before

        poll_until(members, lambda: set(seen) >= set(values), 180, "every record", record)

        def reformed() -> bool:
            poll_until(members, lambda: True, 1, "a poll")
            with WireClient(find_coordinator(cluster, group)) as conn:
                response = conn.request(DescribeGroupsRequest(groups=[group]), 5)
            [described] = response.groups
            return (
                described.error_code == ErrorCode.NONE
                and described.group_state == "Stable"
                and len(described.members) == 2
            )

        wait_for(reformed, 60, "the group to be stable with both members again")
        for consumer in members:
            commit(consumer)
    finally:
        for consumer in members:
            consumer.close()
    # Nothing skipped (records read again after the failover are fine), all committed.
    assert set(seen) == set(values)
    after = committed_offsets(cluster, group)
    assert after == {(topic, p): RECORDS // PARTITIONS for p in range(PARTITIONS)}
    assert all(after[tp] >= offset for tp, offset in before.items())
