"""gregor-client through broker failures on a real cluster (each test has its own):
a broker SIGKILLed during acks=all production loses nothing, a leader that moves during
consumption leaves no gap, and a coordinator that moves makes the consumer rejoin without
skipping a record."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from gregor.client import Consumer, ConsumerRecord, Producer, RecordFuture, TopicPartition
from gregor.client.network import COORDINATOR_BASE
from gregor.devcluster import LocalCluster
from gregor_testing.cluster import create_topic, partitions_of, wait_for

pytestmark = pytest.mark.slow


def leader_of(cluster: LocalCluster, topic: str, partition: int) -> int:
    live = next(b.broker_id for b in cluster.brokers if b.is_running())
    return partitions_of(cluster, topic, live)[partition].leader_id


def test_a_broker_killed_during_acks_all_production_loses_nothing(
    cluster_factory: Callable[..., LocalCluster],
) -> None:
    cluster = cluster_factory(3)
    topic = "kill-during-produce"
    create_topic(
        cluster, topic, partitions=2, replication_factor=3, configs={"min.insync.replicas": "2"}
    )
    victim = leader_of(cluster, topic, 0)
    futures: list[RecordFuture] = []
    with Producer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "acks": "all",
            "linger.ms": 2,
            "retry.backoff.ms": 50,
        }
    ) as producer:
        for i in range(3000):
            futures.append(producer.produce(topic, b"%d" % i, key=b"%d" % i))
            if i == 1000:
                producer.flush(60)
                cluster.broker(victim).kill()
            if i % 100 == 0:
                time.sleep(0.01)  # keep producing while the cluster fails over
        assert producer.flush(120) == 0
        for f in futures:
            f.result()  # every record acknowledged by the surviving replicas
    assert leader_of(cluster, topic, 0) != victim
    with Consumer(
        {"bootstrap.servers": cluster.bootstrap_servers, "auto.offset.reset": "earliest"}
    ) as consumer:
        consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        values: set[bytes] = set()
        deadline = time.monotonic() + 60
        while len(values) < 3000 and time.monotonic() < deadline:
            values.update(r.value for r in consumer.consume(1000, timeout=1))
    assert values == {b"%d" % i for i in range(3000)}


def test_a_leader_that_moves_during_consumption_leaves_no_gap(
    cluster_factory: Callable[..., LocalCluster],
) -> None:
    cluster = cluster_factory(3)
    topic = "move-during-consume"
    create_topic(cluster, topic, partitions=1, replication_factor=3)
    with Producer(
        {"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "linger.ms": 5}
    ) as producer:
        for i in range(2000):
            producer.produce(topic, b"%d" % i, partition=0)
        assert producer.flush(60) == 0
    victim = leader_of(cluster, topic, 0)
    got: list[ConsumerRecord] = []
    with Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "auto.offset.reset": "earliest",
            "max.partition.fetch.bytes": 4096,
        }
    ) as c:
        c.assign([TopicPartition(topic, 0)])
        deadline = time.monotonic() + 90
        while len(got) < 2000 and time.monotonic() < deadline:
            got += c.consume(50, timeout=1)
            if len(got) >= 700 and cluster.broker(victim).is_running():
                cluster.broker(victim).kill()
    assert not cluster.broker(victim).is_running()
    assert [r.offset for r in got] == list(range(2000))
    assert [r.value for r in got] == [b"%d" % i for i in range(2000)]


def test_a_coordinator_that_moves_makes_the_consumer_rejoin(
    cluster_factory: Callable[..., LocalCluster],
) -> None:
    cluster = cluster_factory(3)
    topic = "coordinator-moves"
    create_topic(cluster, topic, partitions=3, replication_factor=3)
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": "movers",
            "auto.offset.reset": "earliest",
            "auto.commit.interval.ms": 100,
            "session.timeout.ms": 10_000,
            "heartbeat.interval.ms": 500,
        }
    )
    consumer.subscribe([topic])
    values: list[bytes] = []
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            values.extend(r.value for r in consumer.consume(100, timeout=0.2))

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    coordinator = consumer._core.coordinator
    assert coordinator is not None
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    try:
        wait_for(lambda: coordinator.generation > 0, 60, "the consumer to join")
        for i in range(300):
            producer.produce(topic, b"%d" % i, partition=i % 3)
        producer.flush(60)
        wait_for(lambda: len(set(values)) >= 300, 60, "the first records")
        node = coordinator._coordinator
        assert node is not None
        old = COORDINATOR_BASE - node
        generation = coordinator.generation
        cluster.broker(old).kill()
        wait_for(
            lambda: (
                coordinator._coordinator is not None
                and COORDINATOR_BASE - coordinator._coordinator != old
                and coordinator.state.value == "stable"
            ),
            90,
            "a new coordinator and a stable membership",
        )
        for i in range(300, 600):
            producer.produce(topic, b"%d" % i, partition=i % 3)
        producer.flush(60)
        wait_for(lambda: len(set(values)) >= 600, 90, "every record")
        assert coordinator.generation >= generation  # a member of the group again
    finally:
        stop.set()
        thread.join(30)
        producer.close(10)
        consumer.close()
    assert set(values) == {b"%d" % i for i in range(600)}  # none skipped
