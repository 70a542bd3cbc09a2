"""kafka-python's and aiokafka's transactional producers against Gregor: committed and
aborted transactions and offsets sent in a transaction, read back by confluent-kafka
read_committed and read_uncommitted."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from kafka import KafkaProducer
from kafka.structs import OffsetAndMetadata, TopicPartition
from transactions.helpers import committed_offset, read_all_confluent

from gregor.devcluster import LocalCluster
from gregor_testing.cluster import create_topic, unique_topic

PARTITIONS = 3
# (transaction index, whether it commits); offsets are sent in the last one.
PLAN = [(0, True), (1, True), (2, False), (3, True)]

Records = list[tuple[int, bytes]]


def values_of(txn: int) -> Records:
    return [(i % PARTITIONS, f"{txn}-{i}".encode()) for i in range(30)]


def run_kafka_python(cluster: LocalCluster, topic: str, tid: str, group: str) -> None:
    producer = KafkaProducer(
        bootstrap_servers=cluster.bootstrap_servers, transactional_id=tid, acks="all"
    )
    try:
        producer.init_transactions()
        for txn, commits in PLAN:
            producer.begin_transaction()
            for partition, value in values_of(txn):
                producer.send(topic, value=value, partition=partition)
            producer.flush()
            if txn == PLAN[-1][0]:
                producer.send_offsets_to_transaction(
                    {TopicPartition(topic, 0): OffsetAndMetadata(42, "", -1)}, group
                )
            if commits:
                producer.commit_transaction()
            else:
                producer.abort_transaction()
    finally:
        producer.close()


def run_aiokafka(cluster: LocalCluster, topic: str, tid: str, group: str) -> None:
    from aiokafka import AIOKafkaProducer
    from aiokafka.structs import TopicPartition as ATopicPartition

    async def main() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=cluster.bootstrap_servers, transactional_id=tid
        )
        await producer.start()
        try:
            for txn, commits in PLAN:
                await producer.begin_transaction()
                for partition, value in values_of(txn):
                    await (await producer.send(topic, value=value, partition=partition))
                if txn == PLAN[-1][0]:
                    await producer.send_offsets_to_transaction(
                        {ATopicPartition(topic, 0): 42}, group
                    )
                if commits:
                    await producer.commit_transaction()
                else:
                    await producer.abort_transaction()
        finally:
            await producer.stop()

    import asyncio

    asyncio.run(main())


@pytest.mark.parametrize("run", [run_kafka_python, run_aiokafka], ids=["kafka-python", "aiokafka"])
def test_transactions(
    txn_cluster: LocalCluster, run: Callable[[LocalCluster, str, str, str], None]
) -> None:
    topic = unique_topic("txn-py")
    create_topic(txn_cluster, topic, partitions=PARTITIONS, replication_factor=3)
    group = unique_topic("g-txn-py")
    run(txn_cluster, topic, unique_topic("tid-py"), group)
    committed = [r for txn, commits in PLAN if commits for r in values_of(txn)]
    aborted = [r for txn, commits in PLAN if not commits for r in values_of(txn)]
    seen = read_all_confluent(txn_cluster, topic, PARTITIONS, "read_committed")
    for p in range(PARTITIONS):
        assert seen[p] == [v for q, v in committed if q == p]
    everything = read_all_confluent(txn_cluster, topic, PARTITIONS, "read_uncommitted")
    for p in range(PARTITIONS):
        assert everything[p] == [v for txn, _ in PLAN for q, v in values_of(txn) if q == p]
    assert aborted
    assert committed_offset(txn_cluster, group, topic) == 42
