"""kafka-python and aiokafka produce and consume without consumer groups."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition as AioTopicPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition

from gregor.devcluster import LocalCluster
from gregor_testing.cluster import create_topic, unique_topic


@pytest.mark.interop("kafka-python", "fetch")
@pytest.mark.parametrize("codec", [None, "gzip", "lz4", "zstd"])
def test_kafka_python(shared_cluster: LocalCluster, codec: str | None) -> None:
    topic = unique_topic("kp")
    create_topic(shared_cluster, topic, partitions=2, replication_factor=3)
    producer = KafkaProducer(
        bootstrap_servers=shared_cluster.bootstrap_servers,
        acks="all",
        compression_type=codec,
        linger_ms=5,
        enable_idempotence=False,  # plain batches: idempotence has tests of its own
    )
    try:
        futures = [
            producer.send(topic, value=f"v{i}".encode(), key=f"k{i}".encode(), partition=i % 2)
            for i in range(400)
        ]
        producer.flush(30)
        metadata = [f.get(timeout=30) for f in futures]
    finally:
        producer.close(10)
    assert [m.offset for m in metadata if m.partition == 0] == list(range(200))
    consumer = KafkaConsumer(
        bootstrap_servers=shared_cluster.bootstrap_servers,
        enable_auto_commit=False,
        consumer_timeout_ms=10_000,
    )
    try:
        consumer.assign([KpTopicPartition(topic, 0), KpTopicPartition(topic, 1)])
        consumer.seek_to_beginning()
        seen = []
        for message in consumer:
            seen.append((message.partition, message.offset, message.key, message.value))
            if len(seen) == 400:
                break
    finally:
        consumer.close()
    expected = [(i % 2, i // 2, f"k{i}".encode(), f"v{i}".encode()) for i in range(400)]
    assert sorted(seen) == sorted(expected)


@pytest.mark.interop("aiokafka", "fetch")
def test_aiokafka(shared_cluster: LocalCluster) -> None:
    topic = unique_topic("aio")
    create_topic(shared_cluster, topic, partitions=1, replication_factor=2)

    async def run() -> list[tuple[int, bytes | None, bytes | None]]:
        producer = AIOKafkaProducer(
            bootstrap_servers=shared_cluster.bootstrap_servers, acks="all", compression_type="gzip"
        )
        await producer.start()
        try:
            sent = [
                await producer.send_and_wait(topic, f"v{i}".encode(), key=b"k", partition=0)
                for i in range(50)
            ]
            batch = producer.create_batch()
            for i in range(50, 100):
                batch.append(key=b"k", value=f"v{i}".encode(), timestamp=None)
            await (await producer.send_batch(batch, topic, partition=0))
        finally:
            await producer.stop()
        assert [r.offset for r in sent] == list(range(50))
        consumer = AIOKafkaConsumer(
            bootstrap_servers=shared_cluster.bootstrap_servers, enable_auto_commit=False
        )
        await consumer.start()
        try:
            tp = AioTopicPartition(topic, 0)
            consumer.assign([tp])
            consumer.seek(tp, 10)
            out: list[tuple[int, bytes | None, bytes | None]] = []
            while len(out) < 90:
                batches = await consumer.getmany(tp, timeout_ms=10_000)
                assert batches, f"nothing after {len(out)} records"
                out += [(m.offset, m.key, m.value) for m in batches[tp]]
            assert await consumer.end_offsets([tp]) == {tp: 100}
            return out
        finally:
            await consumer.stop()

    consumed = asyncio.run(run())
    assert consumed == [(i, b"k", f"v{i}".encode()) for i in range(10, 100)]
