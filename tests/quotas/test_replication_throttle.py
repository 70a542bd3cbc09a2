"""Replication throttles hold a reassignment's new replica to the rate, as Kafka's do: first
leader.replication.throttled.rate on the leader, then follower.replication.throttled.rate on
the new follower, each with its topic's *.replication.throttled.replicas, set at run time
through the admin API. The rate is measured from the new replica's log files on disk (the
broker's own progress); the burst (quota.window.num x size = 2 s here) is left out."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import confluent_kafka

from gregor.client import AdminClient
from gregor.client.admin import ConfigResource, ResourceType
from gregor.client.types import TopicPartition
from gregor.devcluster import LocalCluster
from gregor_testing.cluster import create_topic, metadata, unique_topic, wait_for

RATE = 2_000_000  # bytes per second
TOTAL = 24_000_000
TOLERANCE = 0.25


def fill(bootstrap: str, topic: str) -> None:
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 65536}
    )
    value = b"r" * 1000
    for _ in range(TOTAL // len(value)):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0


def log_bytes(directory: Path) -> int:
    return sum(f.stat().st_size for f in directory.glob("*.log")) if directory.exists() else 0


def replication_rate(measure: Callable[[], int]) -> float:
    """Bytes per second while the replica goes from 6 MB (past its burst) to 18 MB."""
    marks: dict[int, float] = {}
    deadline = time.monotonic() + 120
    while len(marks) < 2:
        size = measure()
        for mark in (6_000_000, 18_000_000):
            if size >= mark and mark not in marks:
                marks[mark] = time.monotonic()
        assert time.monotonic() < deadline, f"the replica has only {size} bytes"
        time.sleep(0.05)
    return 12_000_000 / (marks[18_000_000] - marks[6_000_000])


def in_sync(cluster: LocalCluster, topic: str, replicas: set[int]) -> bool:
    (found,) = metadata(cluster, [topic]).topics
    return set(found.partitions[0].isr_nodes) == replicas


def test_leader_and_follower_throttles_hold_a_reassignment_to_the_rate(
    cluster_factory: Callable[..., LocalCluster],
) -> None:
    cluster = cluster_factory(
        3, quota_window_num=2, replica_fetch_max_bytes=65536, replica_lag_time_max_ms=60000
    )
    topic = unique_topic("throttled")
    create_topic(cluster, topic, 1, 1, assignment={0: [0]})
    fill(cluster.bootstrap_servers, topic)
    tp = TopicPartition(topic, 0)
    with AdminClient({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
        # The leader (broker 0) sends partition 0 to out-of-sync followers at RATE.
        admin.alter_configs(
            {
                ConfigResource(ResourceType.BROKER, "0"): {
                    "leader.replication.throttled.rate": str(RATE)
                },
                ConfigResource(ResourceType.TOPIC, topic): {
                    "leader.replication.throttled.replicas": "0:0"
                },
            }
        )
        admin.alter_partition_reassignments({tp: [0, 1]})
        leader_side = replication_rate(lambda: log_bytes(cluster.broker(1).data_dir / f"{topic}-0"))
        wait_for(lambda: in_sync(cluster, topic, {0, 1}), 60, "broker 1 in sync")

        # Then the new follower (broker 2) fetches it at RATE, the leader unthrottled.
        admin.alter_configs(
            {
                ConfigResource(ResourceType.BROKER, "0"): {
                    "leader.replication.throttled.rate": None
                },
                ConfigResource(ResourceType.BROKER, "2"): {
                    "follower.replication.throttled.rate": str(RATE)
                },
                ConfigResource(ResourceType.TOPIC, topic): {
                    "leader.replication.throttled.replicas": None,
                    "follower.replication.throttled.replicas": "0:2",
                },
            }
        )
        admin.alter_partition_reassignments({tp: [0, 1, 2]})
        follower_side = replication_rate(
            lambda: log_bytes(cluster.broker(2).data_dir / f"{topic}-0")
        )
        wait_for(lambda: in_sync(cluster, topic, {0, 1, 2}), 60, "broker 2 in sync")
    print(
        f"replication: {leader_side:.0f} B/s (leader throttle), {follower_side:.0f} B/s (follower)"
    )
    for rate in (leader_side, follower_side):
        assert abs(rate / RATE - 1) <= TOLERANCE, (leader_side, follower_side)
