"""confluent-kafka's (librdkafka's) transactional producer against Gregor: committed and
aborted transactions, offsets sent in a transaction, read back by another client
(kafka-python) read_committed and read_uncommitted."""

from __future__ import annotations

from confluent_kafka import Consumer, Producer, TopicPartition
from transactions.helpers import read_all

from gregor.devcluster import LocalCluster
from gregor_testing.cluster import create_topic, unique_topic

PARTITIONS = 3


def txn_producer(cluster: LocalCluster, transactional_id: str) -> Producer:
    return Producer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "transactional.id": transactional_id,
            "transaction.timeout.ms": 60000,
        }
    )


def test_committed_and_aborted_transactions(txn_cluster: LocalCluster) -> None:
    topic = unique_topic("txn-confluent")
    create_topic(txn_cluster, topic, partitions=PARTITIONS, replication_factor=3)
    producer = txn_producer(txn_cluster, unique_topic("tid"))
    producer.init_transactions(60)
    committed: list[bytes] = []
    aborted: list[bytes] = []
    for txn in range(4):
        producer.begin_transaction()
        values = [f"{txn}-{i}".encode() for i in range(30)]
        for i, value in enumerate(values):
            producer.produce(topic, value=value, partition=i % PARTITIONS)
        if txn == 2:
            assert producer.flush(60) == 0  # written, then aborted (abort purges unsent ones)
            producer.abort_transaction(60)
            aborted += values
        else:
            producer.commit_transaction(60)
            committed += values
    # read_committed: exactly the committed records, in order per partition.
    seen = read_all(txn_cluster, topic, PARTITIONS, "read_committed")
    for p in range(PARTITIONS):
        assert seen[p] == [v for i, v in enumerate(committed) if i % PARTITIONS == p]
    # read_uncommitted: both, and never a control record.
    everything = read_all(txn_cluster, topic, PARTITIONS, "read_uncommitted")
    assert sorted(v for vs in everything.values() for v in vs) == sorted(committed + aborted)


def test_send_offsets_to_transaction(txn_cluster: LocalCluster) -> None:
    source = unique_topic("txn-in")
    sink = unique_topic("txn-out")
    create_topic(txn_cluster, source, partitions=1, replication_factor=3)
    create_topic(txn_cluster, sink, partitions=1, replication_factor=3)
    plain = Producer({"bootstrap.servers": txn_cluster.bootstrap_servers, "acks": "all"})
    for i in range(20):
        plain.produce(source, value=f"in-{i}".encode(), partition=0)
    assert plain.flush(30) == 0
    group = unique_topic("g-txn")
    consumer = Consumer(
        {
            "bootstrap.servers": txn_cluster.bootstrap_servers,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    consumer.assign([TopicPartition(source, 0, 0)])
    producer = txn_producer(txn_cluster, unique_topic("tid-cp"))
    producer.init_transactions(60)
    copied = 0
    for outcome in ("commit", "abort", "commit"):
        batch = consumer.consume(10 if outcome != "abort" else 5, timeout=30)
        assert batch and all(m.error() is None for m in batch)
        producer.begin_transaction()
        for m in batch:
            producer.produce(sink, value=b"out-" + m.value(), partition=0)
        positions = [TopicPartition(source, 0, batch[-1].offset() + 1)]
        producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 60)
        if outcome == "commit":
            producer.commit_transaction(60)
            copied = batch[-1].offset() + 1
        else:
            assert producer.flush(60) == 0
            producer.abort_transaction(60)
            consumer.seek(TopicPartition(source, 0, copied))
    committed = consumer.committed([TopicPartition(source, 0)], timeout=30)
    assert committed[0].offset == copied
    consumer.close()
    out = read_all(txn_cluster, sink, 1, "read_committed")[0]
    assert out == [f"out-in-{i}".encode() for i in range(copied)]
