"""confluent-kafka (librdkafka) against a real three-broker cluster: a Producer with acks=all
and every codec, a Consumer with assign and seek (groups come with the next issue)."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

from gregor.devcluster import LocalCluster
from gregor_testing.cluster import create_topic, unique_topic

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def produce_all(
    cluster: LocalCluster, topic: str, records: list[tuple[bytes, bytes]], **conf: object
) -> list[Message]:
    """Produce, flush, and return the delivery reports in production order."""
    reports: list[Message] = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", **conf})
    for key, value in records:
        producer.produce(
            topic,
            value=value,
            key=key,
            headers=[("h", key)],
            on_delivery=lambda err, msg: reports.append(msg),
        )
        producer.poll(0)
    assert producer.flush(60) == 0
    assert len(reports) == len(records)
    assert all(r.error() is None for r in reports), [r.error() for r in reports if r.error()]
    return reports


def consume(cluster: LocalCluster, partitions: list[TopicPartition], count: int) -> list[Message]:
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": "unused-no-commits",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        consumer.assign(partitions)
        out: list[Message] = []
        eof: set[int] = set()
        while len(out) < count or len(eof) < len(partitions):
            message = consumer.poll(10)
            assert message is not None, f"no message after {len(out)} of {count}"
            error = message.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error
                eof.add(message.partition())
                continue
            out.append(message)
        return out
    finally:
        consumer.close()


@pytest.mark.parametrize("codec", CODECS)
def test_producer_acks_all_every_codec(shared_cluster: LocalCluster, codec: str) -> None:
    topic = unique_topic(f"ck-{codec}")
    create_topic(shared_cluster, topic, partitions=3, replication_factor=3)
    records = [(f"k{i}".encode(), f"value {i} {codec}".encode() * (1 + i % 7)) for i in range(3000)]
    reports = produce_all(
        shared_cluster, topic, records, **{"compression.type": codec, "linger.ms": 5}
    )
    by_partition: dict[int, list[tuple[int, bytes, bytes]]] = {}
    for report in reports:
        by_partition.setdefault(report.partition(), []).append(
            (report.offset(), report.key(), report.value())
        )
    consumed = consume(
        shared_cluster, [TopicPartition(topic, p, 0) for p in range(3)], len(records)
    )
    got: dict[int, list[tuple[int, bytes, bytes]]] = {}
    for message in consumed:
        got.setdefault(message.partition(), []).append(
            (message.offset(), message.key(), message.value())
        )
        assert message.headers() == [("h", message.key())]
    assert got == by_partition
    for reports_of_partition in by_partition.values():
        assert [offset for offset, _, _ in reports_of_partition] == list(
            range(len(reports_of_partition))
        )


def test_consumer_assign_and_seek(shared_cluster: LocalCluster) -> None:
    topic = unique_topic("ck-seek")
    create_topic(shared_cluster, topic, partitions=1, replication_factor=2)
    produce_all(shared_cluster, topic, [(b"k", str(i).encode()) for i in range(200)])
    consumer = Consumer(
        {
            "bootstrap.servers": shared_cluster.bootstrap_servers,
            "group.id": "unused-no-commits",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 150)])
        first = consumer.poll(10)
        assert first is not None and first.error() is None
        assert (first.offset(), first.value()) == (150, b"150")
        consumer.seek(TopicPartition(topic, 0, 42))
        values = []
        while len(values) < 10:
            message = consumer.poll(10)
            assert message is not None and message.error() is None
            values.append((message.offset(), message.value()))
        assert values == [(i, str(i).encode()) for i in range(42, 52)]
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        assert (low, high) == (0, 200)
        (by_time,) = consumer.offsets_for_times([TopicPartition(topic, 0, 0)], timeout=10)
        assert by_time.offset == 0
    finally:
        consumer.close()


def test_seek_beyond_the_end_is_out_of_range(shared_cluster: LocalCluster) -> None:
    topic = unique_topic("ck-range")
    create_topic(shared_cluster, topic, partitions=1, replication_factor=1)
    produce_all(shared_cluster, topic, [(b"k", b"v")] * 5)
    consumer = Consumer(
        {
            "bootstrap.servers": shared_cluster.bootstrap_servers,
            "group.id": "unused-no-commits",
            "enable.auto.commit": False,
            "auto.offset.reset": "error",
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 1000)])
        message = consumer.poll(15)
        assert message is not None and message.error() is not None
        assert message.error().code() == KafkaError._AUTO_OFFSET_RESET
    finally:
        consumer.close()
