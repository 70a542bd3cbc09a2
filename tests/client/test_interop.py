"""Interop, both directions, on a real Gregor cluster: records gregor-client produces are
read byte-identical (key, value, headers, timestamp) by confluent-kafka, kafka-python and
kcat, and theirs by gregor-client; keys land where kafka-python puts them; a gregor-client
consumer and a kafka-python consumer share one group."""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from typing import Any

import confluent_kafka
import kafka
import pytest

from gregor.client import Consumer, ConsumerRecord, Producer, TopicPartition
from gregor.devcluster import LocalCluster
from gregor_testing.cluster import create_topic, unique_topic, wait_for

# (key, value, headers, timestamp): binary, empty and absent keys and values; no tab or
# newline in what kcat prints (its output is split on them).
Row = tuple[bytes | None, bytes | None, list[tuple[str, bytes]], int]
BASE = 1_600_000_000_000


def rows(count: int) -> list[Row]:
    out: list[Row] = []
    for i in range(count):
        key = None if i % 7 == 0 else b"key-\x01\xfe-%d" % i
        value = b"" if i % 11 == 0 else bytes(range(32, 127)) + b"\x00\xc3\xa9%d" % i
        headers = [("trace", b"t-%d" % i), ("bin", b"\x00\x01\x02")] if i % 2 else []
        out.append((key, value, headers, BASE + i * 1000))
    return out


def gregor_produce(cluster: LocalCluster, topic: str, data: list[Row]) -> None:
    with Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 5}) as p:
        for key, value, headers, ts in data:
            p.produce(topic, value, key=key, headers=headers, timestamp=ts, partition=0)
        assert p.flush(60) == 0


def gregor_read(cluster: LocalCluster, topic: str, count: int) -> list[Row]:
    with Consumer(
        {"bootstrap.servers": cluster.bootstrap_servers, "auto.offset.reset": "earliest"}
    ) as c:
        c.assign([TopicPartition(topic, 0)])
        got: list[ConsumerRecord] = []
        deadline = time.monotonic() + 60
        while len(got) < count and time.monotonic() < deadline:
            got += c.consume(count, timeout=1)
    return [(r.key, r.value, list(r.headers), r.timestamp) for r in got]


def test_confluent_reads_what_gregor_wrote_and_the_other_way(shared_cluster: LocalCluster) -> None:
    data = rows(60)
    topic = unique_topic("to-confluent")
    create_topic(shared_cluster, topic, partitions=1, replication_factor=3)
    gregor_produce(shared_cluster, topic, data)
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": shared_cluster.bootstrap_servers,
            "group.id": unique_topic("c"),
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign(
            [confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)]
        )
        messages = []
        deadline = time.monotonic() + 60
        while len(messages) < len(data) and time.monotonic() < deadline:
            messages += [m for m in consumer.consume(100, 1) if m.error() is None]
    finally:
        consumer.close()
    seen = [(m.key(), m.value(), list(m.headers() or []), m.timestamp()[1]) for m in messages]
    assert seen == data

    topic = unique_topic("from-confluent")
    create_topic(shared_cluster, topic, partitions=1, replication_factor=3)
    producer = confluent_kafka.Producer({"bootstrap.servers": shared_cluster.bootstrap_servers})
    for key, value, headers, ts in data:
        producer.produce(
            topic, value=value, key=key, headers=headers or None, timestamp=ts, partition=0
        )
    assert producer.flush(60) == 0
    assert gregor_read(shared_cluster, topic, len(data)) == data


def test_kafka_python_reads_what_gregor_wrote_and_the_other_way(
    shared_cluster: LocalCluster,
) -> None:
    data = rows(60)
    topic = unique_topic("to-kp")
    create_topic(shared_cluster, topic, partitions=1, replication_factor=3)
    gregor_produce(shared_cluster, topic, data)
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=shared_cluster.bootstrap_servers,
        enable_auto_commit=False,
        consumer_timeout_ms=20_000,
    )
    try:
        consumer.assign([kafka.TopicPartition(topic, 0)])
        consumer.seek_to_beginning()
        seen = []
        for m in consumer:
            seen.append((m.key, m.value, [(n, v) for n, v in m.headers], m.timestamp))
            if len(seen) == len(data):
                break
    finally:
        consumer.close()
    assert seen == data

    topic = unique_topic("from-kp")
    create_topic(shared_cluster, topic, partitions=1, replication_factor=3)
    producer = kafka.KafkaProducer(
        bootstrap_servers=shared_cluster.bootstrap_servers, enable_idempotence=False
    )
    try:
        for key, value, headers, ts in data:
            producer.send(
                topic, value=value, key=key, headers=headers, timestamp_ms=ts, partition=0
            )
        producer.flush(60)
    finally:
        producer.close(10)
    assert gregor_read(shared_cluster, topic, len(data)) == data


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_kcat_reads_what_gregor_wrote_and_the_other_way(shared_cluster: LocalCluster) -> None:
    # kcat prints and reads text: printable keys and values, no separators inside.
    data: list[Row] = [
        (b"k%d" % i, b"value \xc3\xa9 %d" % i, [("h", b"v%d" % i)], BASE + i) for i in range(40)
    ]
    topic = unique_topic("to-kcat")
    create_topic(shared_cluster, topic, partitions=1, replication_factor=3)
    gregor_produce(shared_cluster, topic, data)
    out = subprocess.run(
        [
            "kcat",
            "-b",
            shared_cluster.bootstrap_servers,
            "-C",
            "-t",
            topic,
            "-p",
            "0",
            "-o",
            "beginning",
            "-e",
            "-f",
            "%k\t%s\t%h\t%T\n",
        ],
        capture_output=True,
        timeout=60,
        check=True,
    ).stdout
    seen = []
    for line in out.split(b"\n")[:-1]:
        key, value, header, ts = line.split(b"\t")
        name, _, header_value = header.partition(b"=")
        seen.append((key, value, [(name.decode(), header_value)], int(ts)))
    assert seen == data

    topic = unique_topic("from-kcat")
    create_topic(shared_cluster, topic, partitions=1, replication_factor=3)
    lines = b"".join(b"%s\t%s\n" % (k, v) for k, v, _, _ in data if k is not None and v)
    subprocess.run(
        [
            "kcat",
            "-b",
            shared_cluster.bootstrap_servers,
            "-P",
            "-t",
            topic,
            "-p",
            "0",
            "-K",
            "\t",
            "-H",
            "h=from-kcat",
        ],
        input=lines,
        capture_output=True,
        timeout=60,
        check=True,
    )
    got = gregor_read(shared_cluster, topic, len(data))
    assert [(k, v, h) for k, v, h, _ in got] == [
        (k, v, [("h", b"from-kcat")]) for k, v, _, _ in data
    ]


def test_keys_land_in_the_partitions_kafka_python_picks(shared_cluster: LocalCluster) -> None:
    keys = [b"customer-%d" % i for i in range(1000)]
    ours, theirs = unique_topic("keys-gregor"), unique_topic("keys-kp")
    for topic in (ours, theirs):
        create_topic(shared_cluster, topic, partitions=12, replication_factor=1)
    with Producer({"bootstrap.servers": shared_cluster.bootstrap_servers, "linger.ms": 5}) as p:
        futures = [p.produce(ours, b"v", key=key) for key in keys]
        p.flush(60)
        gregor = [f.result().partition for f in futures]
    producer = kafka.KafkaProducer(
        bootstrap_servers=shared_cluster.bootstrap_servers, enable_idempotence=False, linger_ms=5
    )
    try:
        kp_futures = [producer.send(theirs, value=b"v", key=key) for key in keys]
        producer.flush(60)
        kafka_python = [f.get(30).partition for f in kp_futures]
    finally:
        producer.close(10)
    assert gregor == kafka_python
    assert len(set(gregor)) == 12


class _Member:
    """A group member polling on a thread of its own; subclasses say how to poll."""

    def __init__(self, consumer: Any) -> None:
        self.consumer = consumer
        self.values: list[bytes] = []
        self.stopped = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def poll(self) -> list[bytes]:
        raise NotImplementedError

    def _run(self) -> None:
        while not self.stopped:
            self.values += self.poll()

    def assignment(self) -> set[Any]:
        return set(self.consumer.assignment())

    def stop(self) -> None:
        self.stopped = True
        self.thread.join(30)
        self.consumer.close()


class _KafkaPythonMember(_Member):
    def __init__(self, cluster: LocalCluster, group: str, topic: str) -> None:
        super().__init__(
            kafka.KafkaConsumer(
                topic,
                bootstrap_servers=cluster.bootstrap_servers,
                group_id=group,
                auto_offset_reset="earliest",
                enable_auto_commit=True,
                auto_commit_interval_ms=200,
                partition_assignment_strategy=[
                    kafka.coordinator.assignors.range.RangePartitionAssignor
                ],
            )
        )

    def poll(self) -> list[bytes]:
        return [r.value for batch in self.consumer.poll(200).values() for r in batch]


class _GregorMember(_Member):
    def __init__(self, cluster: LocalCluster, group: str, topic: str) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": cluster.bootstrap_servers,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "auto.commit.interval.ms": 200,
            }
        )
        consumer.subscribe([topic])
        super().__init__(consumer)

    def poll(self) -> list[bytes]:
        return [r.value for r in self.consumer.consume(100, timeout=0.2)]


def test_gregor_and_kafka_python_consumers_share_one_group(shared_cluster: LocalCluster) -> None:
    topic, group = unique_topic("mixed"), unique_topic("mixed-group")
    create_topic(shared_cluster, topic, partitions=4, replication_factor=3)
    ours = _GregorMember(shared_cluster, group, topic)
    theirs = _KafkaPythonMember(shared_cluster, group, topic)
    try:
        wait_for(
            lambda: len(ours.assignment()) == 2 and len(theirs.assignment()) == 2,
            90,
            "two partitions each",
        )
        with Producer({"bootstrap.servers": shared_cluster.bootstrap_servers}) as p:
            for i in range(400):
                p.produce(topic, b"%d" % i, partition=i % 4)
        wait_for(lambda: len(ours.values) + len(theirs.values) >= 400, 60, "every record")
    finally:
        ours.stop()
        theirs.stop()
    assert ours.values and theirs.values
    assert sorted(ours.values + theirs.values) == sorted(b"%d" % i for i in range(400))
