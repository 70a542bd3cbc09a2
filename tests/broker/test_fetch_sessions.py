"""Incremental fetch sessions (KIP-227) on real brokers.

kafka-python is the client of the five that speaks them (aiokafka and KafkaJS send session
id 0 and epoch -1, librdkafka too): its consumer reads every record once, in order, across
incremental fetches, a partition added to and one removed from its assignment, and a
leader killed under it. The followers' replica fetchers hold sessions on their leaders too
(the broker's fetch session gauge counts them), and so does gregor-client's consumer.
"""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Callable

from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as Tp

from gregor.client import Consumer as GregorConsumer
from gregor.client import Producer as GregorProducer
from gregor.client import TopicPartition as GregorTp
from gregor.devcluster import BrokerProcess, LocalCluster
from gregor_testing.cluster import (
    create_topic,
    leader_of,
    partitions_of,
    unique_topic,
    wait_for,
    wait_for_log,
)

Factory = Callable[..., LocalCluster]
SESSIONS = "kafka_server_fetchsessioncache_numincrementalfetchsessions"


def sessions_on(broker: BrokerProcess) -> int:
    line = wait_for_log(broker, "serving Prometheus metrics on", 0)
    found = re.search(r"serving Prometheus metrics on (http://\S+)", line)
    assert found is not None, line
    with urllib.request.urlopen(found[1], timeout=10) as answer:
        text = answer.read().decode()
    gauge = re.search(rf"^{SESSIONS} (\S+)$", text, re.MULTILINE)
    assert gauge is not None, text
    return int(float(gauge[1]))


def produce(producer: KafkaProducer, sent: dict[Tp, list[bytes]], tps: list[Tp], n: int) -> None:
    futures = []
    for tp in tps:
        values = sent.setdefault(tp, [])
        for _ in range(n):
            value = f"{tp.topic}-{tp.partition}-{len(values)}".encode()
            values.append(value)
            futures.append(producer.send(tp.topic, value=value, partition=tp.partition))
    producer.flush(60)
    for future in futures:
        future.get(timeout=60)


def read(consumer: KafkaConsumer, got: dict[Tp, list[bytes]], until: dict[Tp, int]) -> None:
    """Poll until each partition of `until` has that many records read."""

    def done() -> bool:
        for records in consumer.poll(timeout_ms=200).values():
            for record in records:
                got.setdefault(Tp(record.topic, record.partition), []).append(record.value)
        return all(len(got.get(tp, [])) >= n for tp, n in until.items())

    wait_for(done, 60, f"records {until}")


def session_ids(consumer: KafkaConsumer) -> set[int]:
    handlers = consumer._fetcher._session_handlers.values()  # kafka-python's own
    return {h.next_metadata.session_id for h in handlers} - {0}


def test_kafka_python_reads_through_incremental_fetch_sessions(cluster_factory: Factory) -> None:
    cluster = cluster_factory(
        **{
            "metrics.prometheus.listener": "http://127.0.0.1:0",
            "unclean.leader.election.enable": "false",
        }
    )
    a, b = unique_topic("sess-a"), unique_topic("sess-b")
    create_topic(cluster, a, partitions=2, replication_factor=3)
    create_topic(cluster, b, partitions=1, replication_factor=3)
    a0, a1, b0 = Tp(a, 0), Tp(a, 1), Tp(b, 0)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all", retries=20)
    consumer = KafkaConsumer(
        bootstrap_servers=cluster.bootstrap_servers,
        enable_auto_commit=False,
        fetch_max_wait_ms=100,
        enable_incremental_fetch_sessions=True,
    )
    sent: dict[Tp, list[bytes]] = {}
    got: dict[Tp, list[bytes]] = {}
    try:
        consumer.assign([a0, a1])
        consumer.seek_to_beginning()
        for _ in range(3):  # rounds of incremental fetches, each with some new records
            produce(producer, sent, [a0, a1], 30)
            read(consumer, got, {tp: len(sent[tp]) for tp in (a0, a1)})
        assert session_ids(consumer), "kafka-python fetched without a session"
        # Each follower fetches from each of its leaders in a session of its own.
        led = {partitions_of(cluster, t)[i].leader_id for t, i in ((a, 0), (a, 1), (b, 0))}
        followers = 2 * len(led)
        consumers = len(session_ids(consumer))

        def counted() -> bool:
            return sum(sessions_on(x) for x in cluster.brokers) >= followers + consumers

        wait_for(counted, 30, f"{followers} follower sessions")

        # A partition added: the session grows by it.
        consumer.assign([a0, a1, b0])
        consumer.seek_to_beginning(b0)
        produce(producer, sent, [a0, a1, b0], 20)
        read(consumer, got, {tp: len(sent[tp]) for tp in (a0, a1, b0)})

        # A partition removed: it is forgotten, and nothing more of it arrives.
        consumer.assign([a1, b0])
        produce(producer, sent, [a0, a1, b0], 20)
        read(consumer, got, {tp: len(sent[tp]) for tp in (a1, b0)})
        assert len(got[a0]) == len(sent[a0]) - 20

        # The leader of b-0 dies: the consumer follows the new leader in a new session.
        old = leader_of(cluster, b, 0)
        live = next(x for x in cluster.brokers if x is not old)
        old.kill()

        def moved() -> bool:
            leader = partitions_of(cluster, b, live.broker_id)[0].leader_id
            return leader not in (-1, old.broker_id)

        wait_for(moved, 60, "a new leader for b-0")
        produce(producer, sent, [a1, b0], 20)
        read(consumer, got, {tp: len(sent[tp]) for tp in (a1, b0)})
        assert session_ids(consumer)
    finally:
        consumer.close()
        producer.close(10)
    # Every record once, in order.
    assert got[a0] == sent[a0][: len(got[a0])]
    assert got[a1] == sent[a1]
    assert got[b0] == sent[b0]


def test_gregor_client_reads_through_incremental_fetch_sessions(
    shared_cluster: LocalCluster,
) -> None:
    """gregor-client's consumer fetches in sessions too: records across incremental
    fetches, a partition added and one removed, every one once and in order."""
    topic = unique_topic("sess-gc")
    create_topic(shared_cluster, topic, partitions=3, replication_factor=3)
    bootstrap = {"bootstrap.servers": shared_cluster.bootstrap_servers}
    sent: dict[int, list[bytes]] = {0: [], 1: [], 2: []}
    got: dict[int, list[bytes]] = {0: [], 1: [], 2: []}

    def produce(partitions: list[int]) -> None:
        with GregorProducer({**bootstrap, "acks": "all"}) as producer:
            for p in partitions:
                for _ in range(25):
                    sent[p].append(b"%d-%d" % (p, len(sent[p])))
                    producer.produce(topic, sent[p][-1], partition=p)
            assert producer.flush(60) == 0

    def read(partitions: list[int]) -> None:
        def done() -> bool:
            for record in consumer.consume(100, timeout=0.2):
                got[record.partition].append(record.value)
            return all(len(got[p]) >= len(sent[p]) for p in partitions)

        wait_for(done, 60, f"records of {partitions}")

    with GregorConsumer({**bootstrap, "auto.offset.reset": "earliest"}) as consumer:
        consumer.assign([GregorTp(topic, 0), GregorTp(topic, 1)])
        for _ in range(3):
            produce([0, 1])
            read([0, 1])
        consumer.assign([GregorTp(topic, 1), GregorTp(topic, 2)])
        produce([0, 1, 2])
        read([1, 2])
    assert got[0] == sent[0][:75]
    assert got[1] == sent[1] and got[2] == sent[2]
