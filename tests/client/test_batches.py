"""Batch pass-through against a real cluster: `AsyncConsumer.getmany_batches` (and the
blocking `Consumer.consume_batches`) hands out fetched record batches as bytes and
`AsyncProducer.produce_batch` (`Producer.produce_batch`) sends them on, as they are.
librdkafka writes the source and reads the copy."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CTopicPartition

from gregor.client import AsyncConsumer, AsyncProducer, TopicPartition
from gregor.client import Consumer as SyncConsumer
from gregor.client import Producer as SyncProducer
from gregor.client.consumer.batches import FetchedBatch
from gregor.devcluster import LocalCluster
from gregor.protocol.errors import InvalidRecordError, MessageTooLargeError
from gregor.protocol.records import (
    BATCH_HEADER_SIZE,
    BatchBuilder,
    ControlType,
    build_control_batch,
)
from gregor_testing.cluster import create_topic, unique_topic

Copied = tuple[int, int, bytes | None, bytes | None, tuple[tuple[str, bytes], ...], int]

MARKER = build_control_batch(
    ControlType.COMMIT, producer_id=5, producer_epoch=0, coordinator_epoch=0
)


def settings(cluster: LocalCluster, **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": cluster.bootstrap_servers, **extra}


def read_all(cluster: LocalCluster, topic: str, partitions: int, count: int) -> list[Copied]:
    """(partition, offset, key, value, headers, timestamp) of `count` records, read by
    librdkafka with read_committed."""
    consumer = Consumer(
        settings(cluster, **{"group.id": unique_topic("g"), "isolation.level": "read_committed"})
    )
    consumer.assign([CTopicPartition(topic, p, -2) for p in range(partitions)])
    out: list[Copied] = []
    try:
        for _ in range(120):
            for m in consumer.consume(1000, 0.5):
                assert m.error() is None, m.error()
                out.append(
                    (m.partition(), m.offset(), m.key(), m.value(),
                     tuple(m.headers() or ()), m.timestamp()[1])
                )  # fmt: skip
            if len(out) >= count:
                break
    finally:
        consumer.close()
    return sorted(out)


async def fetch_batches(
    cluster: LocalCluster,
    topic: str,
    partitions: int,
    count: int,
    isolation: str = "read_uncommitted",
) -> list[FetchedBatch]:
    async with AsyncConsumer(
        settings(cluster, **{"auto.offset.reset": "earliest", "isolation.level": isolation})
    ) as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        batches: list[FetchedBatch] = []
        with trio.fail_after(60):
            while sum(b.records_count for b in batches) < count:
                batches += await consumer.getmany_batches(timeout=1)
        return batches


async def copy(cluster: LocalCluster, batches: list[FetchedBatch], to: str) -> list[int]:
    """Produce each batch to the same partition of `to`: their base offsets there."""
    async with AsyncProducer(settings(cluster, **{"enable.idempotence": False})) as producer:
        futures = [await producer.produce_batch(to, b.partition, b.data) for b in batches]
        return [(await f).offset for f in futures]


def assert_copied(
    cluster: LocalCluster,
    source: str,
    target: str,
    count: int,
    batches: list[FetchedBatch],
    bases: list[int],
) -> None:
    """The target (2 partitions) holds the source's records, in the same partitions and
    order, each batch's record i at the base offset its produce_batch gave + i."""
    original = read_all(cluster, source, 2, count)
    copied = read_all(cluster, target, 2, count)
    assert [r[:1] + r[2:] for r in copied] == [r[:1] + r[2:] for r in original]
    where = {
        (b.partition, b.base_offset + i): base + i
        for b, base in zip(batches, bases, strict=True)
        for i in range(b.records_count)
    }
    assert {(r[0], r[1]) for r in copied} == {(p, where[p, o]) for p, o, *_ in original}


def test_batches_pass_through_compressed_and_land_at_the_same_deltas(
    shared_cluster: LocalCluster,
) -> None:
    """An idempotent librdkafka producer writes lz4 batches with keys, headers and
    timestamps; their bytes go to another topic untouched but for the producer fields (and
    so the CRC): records identical, the record section byte for byte the same (no
    recompression), record i of a batch at the batch's new base offset + i."""
    source, target = unique_topic("raw-src"), unique_topic("raw-dst")
    create_topic(shared_cluster, source, partitions=2, replication_factor=3)
    create_topic(shared_cluster, target, partitions=2, replication_factor=3)
    producer = Producer(
        settings(shared_cluster, **{"compression.type": "lz4", "enable.idempotence": True})
    )
    base = 1_700_000_000_000
    for i in range(3000):
        producer.produce(
            source, b"value-%d" % i * 3, b"k%d" % i if i % 5 else None, partition=i % 2,
            headers=[("n", b"%d" % i)] if i % 3 else None, timestamp=base + i,
        )  # fmt: skip
        if i % 700 == 0:
            producer.flush(30)  # several batches per partition
    assert producer.flush(30) == 0

    batches = trio.run(fetch_batches, shared_cluster, source, 2, 3000)
    assert all(b.producible and b.header.producer_id >= 0 for b in batches)
    # (librdkafka leaves a batch uncompressed where lz4 would not make it smaller)
    assert sum(b.header.compression.name == "LZ4" for b in batches) >= 4
    bases = trio.run(copy, shared_cluster, batches, target)
    assert_copied(shared_cluster, source, target, 3000, batches, bases)
    again = trio.run(fetch_batches, shared_cluster, target, 2, 3000)
    assert sorted(bytes(b.data[BATCH_HEADER_SIZE:]) for b in again) == sorted(
        bytes(b.data[BATCH_HEADER_SIZE:]) for b in batches
    )
    assert all(b.header.producer_id == -1 for b in again)


def test_read_committed_leaves_out_aborted_batches_and_markers(
    shared_cluster: LocalCluster,
) -> None:
    """A transactional producer commits one transaction and aborts the next; the batches
    handed out are the committed data only, and the copy holds exactly those records."""
    source, target = unique_topic("raw-txn"), unique_topic("raw-txn-dst")
    create_topic(shared_cluster, source, partitions=1, replication_factor=3)
    create_topic(shared_cluster, target, partitions=1, replication_factor=3)
    producer = Producer(settings(shared_cluster, **{"transactional.id": unique_topic("tx")}))
    producer.init_transactions(30)
    for tag, commit in ((b"kept", True), (b"dropped", False), (b"kept-too", True)):
        producer.begin_transaction()
        for i in range(10):
            producer.produce(source, tag + b"-%d" % i, partition=0)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)

    batches = trio.run(fetch_batches, shared_cluster, source, 1, 20, "read_committed")
    assert not any(b.header.is_control for b in batches)
    values = [r.value for b in batches for r in b.records()]
    assert values == [b"kept-%d" % i for i in range(10)] + [b"kept-too-%d" % i for i in range(10)]
    assert all(b.header.is_transactional for b in batches)
    trio.run(copy, shared_cluster, batches, target)
    assert [r[3] for r in read_all(shared_cluster, target, 1, 20)] == values


def test_batches_join_the_transaction_of_a_transactional_producer(
    shared_cluster: LocalCluster,
) -> None:
    """Fetched batches produced by a transactional gregor-client producer: those of an
    aborted transaction are never read as committed, those of a committed one are, once,
    and they are marked transactional on the target."""
    source, target = unique_topic("raw-eos"), unique_topic("raw-eos-dst")
    create_topic(shared_cluster, source, partitions=2, replication_factor=3)
    create_topic(shared_cluster, target, partitions=2, replication_factor=3)
    producer = Producer(settings(shared_cluster, **{"compression.type": "lz4", "linger.ms": 5}))
    for i in range(400):
        producer.produce(source, b"v%d" % i, partition=i % 2, timestamp=1_700_000_000_000 + i)
    assert producer.flush(30) == 0
    batches = trio.run(fetch_batches, shared_cluster, source, 2, 400)

    async def copy_twice() -> None:
        config = settings(shared_cluster, **{"transactional.id": unique_topic("tx")})
        async with AsyncProducer(config) as txn:
            await txn.init_transactions()
            for commit in (False, True):
                txn.begin_transaction()
                for b in batches:
                    await txn.produce_batch(target, b.partition, b.data)
                if commit:
                    await txn.commit_transaction()
                else:
                    await txn.flush()  # written, then aborted (abort drops what is unsent)
                    await txn.abort_transaction()

    trio.run(copy_twice)
    values = sorted(r[3] for r in read_all(shared_cluster, source, 2, 400))
    assert sorted(r[3] for r in read_all(shared_cluster, target, 2, 400)) == values
    copies = trio.run(fetch_batches, shared_cluster, target, 2, 800)
    assert all(b.header.is_transactional for b in copies)
    assert sum(b.records_count for b in copies) == 800  # both copies, read uncommitted


def test_the_sync_clients_pass_batches_through_too(shared_cluster: LocalCluster) -> None:
    """Consumer.consume_batches and Producer.produce_batch, the blocking twins: the copy
    holds the same records, each batch at its new base offset + delta."""
    source, target = unique_topic("raw-sync"), unique_topic("raw-sync-dst")
    create_topic(shared_cluster, source, partitions=2, replication_factor=3)
    create_topic(shared_cluster, target, partitions=2, replication_factor=3)
    producer = Producer(settings(shared_cluster, **{"compression.type": "zstd", "linger.ms": 5}))
    for i in range(1000):
        producer.produce(source, b"v%d" % i, b"k%d" % i, partition=i % 2, timestamp=1000 + i)
    assert producer.flush(30) == 0
    config = settings(shared_cluster, **{"auto.offset.reset": "earliest"})
    batches: list[FetchedBatch] = []
    with SyncConsumer(config) as consumer:
        consumer.assign([TopicPartition(source, p) for p in range(2)])
        for _ in range(60):
            batches += consumer.consume_batches(timeout=1)
            if sum(b.records_count for b in batches) >= 1000:
                break
        with SyncProducer(settings(shared_cluster)) as copier:
            futures = [copier.produce_batch(target, b.partition, b.data) for b in batches]
            bases = [f.result(30).offset for f in futures]
    assert_copied(shared_cluster, source, target, 1000, batches, bases)


def test_what_cannot_pass_through_fails_clearly(shared_cluster: LocalCluster) -> None:
    """A control batch, a compacted batch (offset gaps), a batch over max.request.size are
    refused before sending; one over the topic's max.message.bytes fails as a whole."""
    topic = unique_topic("raw-bad")
    create_topic(
        shared_cluster, topic, partitions=1, replication_factor=3,
        configs={"max.message.bytes": "2000"},
    )  # fmt: skip
    gappy = BatchBuilder()
    gappy.append(b"a", offset_delta=0, timestamp=1)
    gappy.append(b"c", offset_delta=2, timestamp=1)
    large = BatchBuilder()
    for i in range(40):
        large.append(b"%d" % i * 100, timestamp=1)

    async def attempt() -> None:
        config = settings(shared_cluster, **{"max.request.size": 100_000})
        async with AsyncProducer(config) as producer:
            with pytest.raises(InvalidRecordError, match="control batch"):
                await producer.produce_batch(topic, 0, MARKER)
            with pytest.raises(InvalidRecordError, match=r"offset deltas 0\.\.count-1"):
                await producer.produce_batch(topic, 0, gappy.build())
            with pytest.raises(InvalidRecordError, match="exactly one record batch"):
                await producer.produce_batch(topic, 0, large.build() + b"\0")
            huge = BatchBuilder()
            huge.append(b"x" * 200_000, timestamp=1)
            with pytest.raises(MessageTooLargeError, match=r"max\.request\.size=100000"):
                await producer.produce_batch(topic, 0, huge.build())
            future = await producer.produce_batch(topic, 0, large.build())
            with pytest.raises(MessageTooLargeError, match=f"{topic}-0"):
                await future
            small = BatchBuilder()
            small.append(b"fits", timestamp=1)
            assert (await (await producer.produce_batch(topic, 0, small.build()))).offset == 0

    trio.run(attempt)
