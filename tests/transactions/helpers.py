"""What the transaction tests share: reading a topic whole with a chosen isolation level
(kafka-python, another client than the producers'), and producing plain records."""

from __future__ import annotations

import time

from gregor.devcluster import LocalCluster
from gregor_testing.checker import read_records


def read_all(
    cluster: LocalCluster, topic: str, partitions: int, isolation: str, timeout: float = 60.0
) -> dict[int, list[bytes]]:
    """Every record's value of the topic up to its end offsets (the LSO for read_committed),
    by partition, read by kafka-python with `isolation` ("read_committed"/"read_uncommitted")."""
    found = read_records(cluster, topic, partitions, isolation, timeout)
    return {p: [value for _, value in records] for p, records in found.items()}


def read_all_confluent(
    cluster: LocalCluster, topic: str, partitions: int, isolation: str, timeout: float = 60.0
) -> dict[int, list[bytes]]:
    """As `read_all`, read by confluent-kafka (librdkafka)."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CTopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": "unused",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        consumer.assign([CTopicPartition(topic, p, 0) for p in range(partitions)])
        out: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
        at_end: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(at_end) < partitions:
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {topic} ({isolation}) timed out")
            message = consumer.poll(0.2)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                assert error.code() == error._PARTITION_EOF, error
                at_end.add(message.partition())
                continue
            at_end.discard(message.partition())
            out[message.partition()].append(message.value())
        return out
    finally:
        consumer.close()


def committed_offset(cluster: LocalCluster, group: str, topic: str, partition: int = 0) -> int:
    """The group's committed offset of the partition (-1001: none), read by confluent-kafka."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CTopicPartition

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group})
    try:
        found = consumer.committed([CTopicPartition(topic, partition)], timeout=30)
        return int(found[0].offset)
    finally:
        consumer.close()


def read_all_gregor(
    cluster: LocalCluster, topic: str, partitions: int, isolation: str, timeout: float = 60.0
) -> dict[int, list[bytes]]:
    """As `read_all`, read by gregor-client's consumer."""
    from gregor.client import Consumer
    from gregor.client import TopicPartition as GTopicPartition

    config = {
        "bootstrap.servers": cluster.bootstrap_servers,
        "isolation.level": isolation,
        "auto.offset.reset": "earliest",
    }
    with Consumer(config) as consumer:
        tps = [GTopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        ends = consumer.end_offsets(tps)
        out: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
        deadline = time.monotonic() + timeout
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {topic} ({isolation}) timed out")
            for record in consumer.consume(500, timeout=0.2):
                out[record.partition].append(record.value)
        return out
