"""confluent-kafka (librdkafka) against a real three-broker cluster: a Producer with acks=all
and every codec, a Consumer with assign and seek (groups come with the next issue)."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

from gregor.devcluster import LocalCluster
from gregor.protocol.apis.produce import PartitionProduceData, ProduceRequest, TopicProduceData
from gregor.protocol.errors import ErrorCode
from gregor.protocol.records import BatchBuilder
from gregor_testing.cluster import WireClient, create_topic, unique_topic

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


@pytest.mark.interop("confluent", "fetch")
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


@pytest.mark.interop("confluent", "fetch")
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


@pytest.mark.interop("confluent", "produce")
def test_record_errors_name_exactly_the_invalid_records(shared_cluster: LocalCluster) -> None:
    """KIP-467: a batch with keyless records on a compacted topic is refused with
    INVALID_RECORD, each bad record named by its index in the batch and Kafka's message;
    librdkafka fails exactly those as INVALID_RECORD, the batch's others as part of an
    invalid batch (_INVALID_DIFFERENT_RECORD)."""
    topic = unique_topic("ck-kip467")
    create_topic(shared_cluster, topic, configs={"cleanup.policy": "compact"})
    keys = [b"k0", None, b"k2", b"k3", None, b"", None]  # an empty key is a key
    producer = Producer(
        {
            "bootstrap.servers": shared_cluster.bootstrap_servers,
            "linger.ms": 1000,  # one batch
            "enable.idempotence": False,
            "retries": 0,
        }
    )
    reports: list[tuple[int, KafkaError | None]] = []
    for i, key in enumerate(keys):
        producer.produce(
            topic,
            value=b"v%d" % i,
            key=key,
            partition=0,
            on_delivery=lambda e, m, i=i: reports.append((i, e)),
        )
    assert producer.flush(60) == 0
    errors = dict(reports)
    assert sorted(errors) == list(range(len(keys)))
    invalid = {
        i for i, e in errors.items() if e is not None and e.code() == KafkaError.INVALID_RECORD
    }
    assert invalid == {1, 4, 6}
    others = {i: errors[i] for i in range(len(keys)) if i not in invalid}
    assert all(
        e is not None and e.code() == KafkaError._INVALID_DIFFERENT_RECORD for e in others.values()
    ), others
    # Nothing of the batch reached the log.
    assert consume(shared_cluster, [TopicPartition(topic, 0, 0)], 0) == []

    # On the wire (Produce v8+): each bad record's index and Kafka's message for it.
    builder = BatchBuilder()
    for i, key in enumerate(keys):
        builder.append(b"v%d" % i, key=key)
    client = WireClient(shared_cluster.broker(0))
    try:
        request = ProduceRequest(
            acks=-1,
            timeout_ms=10_000,
            topic_data=[TopicProduceData(topic, [PartitionProduceData(0, builder.build())])],
        )
        answer = client.request(request, 9).responses[0].partition_responses[0]
        old = client.request(request, 7).responses[0].partition_responses[0]
    finally:
        client.close()
    why = f"Compacted topic cannot accept message without key in topic partition {topic}-0."
    assert answer.error_code == ErrorCode.INVALID_RECORD
    assert [(e.batch_index, e.batch_index_error_message) for e in answer.record_errors] == [
        (1, why),
        (4, why),
        (6, why),
    ]
    assert answer.error_message.startswith(
        "One or more records have been rejected due to 3 record errors in total"
    )
    assert (old.error_code, old.record_errors) == (ErrorCode.INVALID_RECORD, [])  # v7: none
