"""df.write.format("gregor") and df.writeStream.format("gregor"): Spark writes rows,
confluent-kafka reads them back; a write the broker refuses fails the job with the broker's
error; a streaming copy resumes from its checkpoint."""

from __future__ import annotations

from pathlib import Path

import confluent_kafka
import pytest
from pyspark.sql import SparkSession

from gregor.client import Consumer, TopicPartition
from gregor.devcluster import LocalCluster
from gregor.protocol.records import Compression
from gregor_testing.cluster import create_topic, unique_topic

PARTITIONS = 3


def read_back(bootstrap: str, topic: str, count: int) -> list[tuple[object, ...]]:
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": unique_topic("g"), "enable.auto.commit": False}
    )
    consumer.assign(
        [
            confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
            for p in range(PARTITIONS)
        ]
    )
    out: list[tuple[object, ...]] = []
    try:
        for _ in range(600):
            if len(out) >= count:
                break
            for msg in consumer.consume(count, timeout=0.5):
                assert msg.error() is None, msg.error()
                headers = [(k, v) for k, v in msg.headers() or []]
                out.append((msg.key(), msg.value(), msg.partition(), headers))
    finally:
        consumer.close()
    return sorted(out, key=lambda r: str(r[1]))


def test_write_then_read_with_confluent(spark: SparkSession, shared_cluster: LocalCluster) -> None:
    bootstrap = shared_cluster.bootstrap_servers
    topic = unique_topic("write")
    create_topic(shared_cluster, topic, partitions=PARTITIONS)
    rows = [
        (
            None if n % 5 == 0 else f"key-{n}",
            f"value-{n:04d}".encode(),
            n % PARTITIONS,
            [("n", str(n).encode()), ("none", None)] if n % 2 else [],
        )
        for n in range(300)
    ]
    df = spark.createDataFrame(
        rows,
        "key string, value binary, partition int, "
        "headers array<struct<key: string, value: binary>>",
    ).repartition(4)
    df.write.format("gregor").option("kafka.bootstrap.servers", bootstrap).option(
        "topic", topic
    ).option("kafka.compression.type", "zstd").mode("append").save()
    want = [(None if k is None else k.encode(), v, p, h) for k, v, p, h in rows]
    assert read_back(bootstrap, topic, len(rows)) == want
    # A kafka.* option reaches the producer: every batch on the broker is zstd.
    assert compressions(bootstrap, topic, len(rows)) == {Compression.ZSTD}


def compressions(bootstrap: str, topic: str, count: int) -> set[Compression]:
    """The codecs of the topic's record batches, as fetched (`count` records in all)."""
    found: set[Compression] = set()
    seen = 0
    with Consumer({"bootstrap.servers": bootstrap, "enable.auto.commit": False}) as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        for p in range(PARTITIONS):
            consumer.seek(TopicPartition(topic, p), 0)
        while seen < count:
            batches = consumer.consume_batches(timeout=30)
            assert batches, f"{seen} of {count} records fetched"
            found |= {b.header.compression for b in batches}
            seen += sum(b.header.records_count for b in batches)
    return found


def test_topic_column_and_broker_errors(spark: SparkSession, shared_cluster: LocalCluster) -> None:
    bootstrap = shared_cluster.bootstrap_servers
    small = unique_topic("small")
    create_topic(
        shared_cluster, small, partitions=PARTITIONS, configs={"max.message.bytes": "2000"}
    )
    ok = spark.createDataFrame(
        [(small, "a", 0), (small, "b", 1)], "topic string, value string, partition int"
    )
    ok.write.format("gregor").option("kafka.bootstrap.servers", bootstrap).mode("append").save()
    assert [r[1] for r in read_back(bootstrap, small, 2)] == [b"a", b"b"]
    # A record over the topic's max.message.bytes: the broker's MESSAGE_TOO_LARGE fails it.
    big = spark.createDataFrame([(small, "x" * 10_000)], "topic string, value string")
    with pytest.raises(Exception, match=r"MESSAGE_TOO_LARGE|MessageSizeTooLarge"):
        big.write.format("gregor").option("kafka.bootstrap.servers", bootstrap).mode(
            "append"
        ).save()
    # Columns checked before anything runs.
    no_topic = spark.createDataFrame([("a",)], "value string")
    with pytest.raises(Exception, match="topic option required"):
        no_topic.write.format("gregor").option("kafka.bootstrap.servers", bootstrap).mode(
            "append"
        ).save()


def test_a_streaming_copy_resumes_from_its_checkpoint(
    spark: SparkSession, shared_cluster: LocalCluster, tmp_path: Path
) -> None:
    """readStream from one topic, writeStream into another (Trigger.AvailableNow), twice:
    the second run copies only what came since, each record into the same partition."""
    bootstrap = shared_cluster.bootstrap_servers
    source, target = unique_topic("stream-in"), unique_topic("stream-out")
    for topic in (source, target):
        create_topic(shared_cluster, topic, partitions=PARTITIONS)
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})

    def produce(first: int, count: int) -> None:
        for n in range(first, first + count):
            producer.produce(source, f"v-{n:04d}".encode(), f"k-{n}".encode(), n % PARTITIONS)
        assert producer.flush(30) == 0

    def copy() -> None:
        query = (
            spark.readStream.format("gregor")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", source)
            .option("startingOffsets", "earliest")
            .load()
            .select("key", "value", "partition")
            .writeStream.format("gregor")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", target)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(300)
        assert query.exception() is None, query.exception()

    def want(count: int) -> list[tuple[object, ...]]:
        rows = [
            (f"k-{n}".encode(), f"v-{n:04d}".encode(), n % PARTITIONS, []) for n in range(count)
        ]
        return sorted(rows, key=lambda r: str(r[1]))

    produce(0, 90)
    copy()
    assert read_back(bootstrap, target, 90) == want(90)
    produce(90, 30)
    copy()
    assert read_back(bootstrap, target, 120) == want(120)
    # Nothing was copied twice: the target holds just the 120.
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "ends"})
    try:
        ends = [
            consumer.get_watermark_offsets(confluent_kafka.TopicPartition(target, p), 30)[1]
            for p in range(PARTITIONS)
        ]
    finally:
        consumer.close()
    assert ends == [40, 40, 40]
