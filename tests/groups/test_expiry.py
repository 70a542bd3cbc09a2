"""Offsets of an empty group expire `offsets.retention.minutes` after it became empty (here
the smallest value Kafka allows, one minute, checked every second), and the group goes with
them; a group that still has members keeps the offsets of the topics it consumes."""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import Consumer
from groups.helpers import SESSION, committed_offsets, poll_until, produce

from gregor.devcluster import LocalCluster
from gregor.protocol.apis.list_groups import ListGroupsRequest
from gregor_testing.cluster import WireClient, create_topic, unique_topic, wait_for

RETENTION_S = 60
EXPIRY_PROPERTIES = {
    "offsets.retention.minutes": "1",
    "offsets.retention.check.interval.ms": "1000",
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
}


def consume_and_commit(cluster: LocalCluster, topic: str, group: str, count: int) -> Consumer:
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **SESSION,
        }
    )
    consumer.subscribe([topic])
    read: list[object] = []
    poll_until(
        [consumer], lambda: len(read) >= count, 60, f"{count} records", lambda _i, m: read.append(m)
    )
    consumer.commit(asynchronous=False)
    return consumer


def listed_groups(cluster: LocalCluster) -> set[str]:
    names: set[str] = set()
    for broker in cluster.brokers:
        with WireClient(broker) as conn:
            response = conn.request(ListGroupsRequest(), 4)
        names |= {g.group_id for g in response.groups}
    return names


def test_offsets_of_an_empty_group_expire(cluster_factory: Callable[..., LocalCluster]) -> None:
    cluster = cluster_factory(3, **EXPIRY_PROPERTIES)
    topic = unique_topic("expiry")
    create_topic(cluster, topic, partitions=2, replication_factor=3)
    produce(cluster, topic, [f"e-{i}".encode() for i in range(20)], 2)
    leaving, staying = unique_topic("g-leaving"), unique_topic("g-staying")
    alive = consume_and_commit(cluster, topic, staying, 20)
    try:
        consume_and_commit(cluster, topic, leaving, 20).close()  # the group is empty now
        empty_since = time.monotonic()
        expected = {(topic, 0): 10, (topic, 1): 10}
        assert committed_offsets(cluster, leaving) == expected
        assert {leaving, staying} <= listed_groups(cluster)
        wait_for(lambda: not committed_offsets(cluster, leaving), 3 * RETENTION_S, "the expiry")
        # Not before the retention time (the group became empty before `empty_since`).
        assert time.monotonic() - empty_since >= RETENTION_S - 1
        assert leaving not in listed_groups(cluster)
        # The group with a member keeps its offsets.
        assert committed_offsets(cluster, staying) == expected
        assert staying in listed_groups(cluster)
    finally:
        alive.close()
