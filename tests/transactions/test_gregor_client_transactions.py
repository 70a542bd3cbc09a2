"""gregor-client's transactional producer (sync, and async under trio) and its read_committed
consumer against Gregor, with real consumer groups; both ways with confluent-kafka (a
gregor transaction read by librdkafka, a librdkafka transaction read by gregor-client);
zombie fencing; errors classified as Kafka classifies them (abortable, fatal, fenced)."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
import trio
from confluent_kafka import Producer as ConfluentProducer
from transactions.helpers import read_all_confluent, read_all_gregor

from gregor.client import (
    AsyncConsumer,
    AsyncProducer,
    Consumer,
    ConsumerGroupMetadata,
    Producer,
    TopicPartition,
)
from gregor.client.producer import TransactionAbortedError
from gregor.devcluster import LocalCluster
from gregor.protocol.errors import (
    InvalidProducerEpochError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    MessageTooLargeError,
    ProducerFencedError,
    TransactionAbortableError,
)
from gregor_testing.cluster import create_topic, unique_topic

PARTITIONS = 3
SOURCE_RECORDS = 60
PLAN = ("commit", "commit", "abort", "commit", "commit")


async def ready(value: Any) -> Any:
    """A sync client's result, or what an async client's call returns, awaited."""
    return await value if inspect.isawaitable(value) else value


def txn_config(cluster: LocalCluster, tid: str, **more: Any) -> dict[str, Any]:
    return {"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": tid, **more}


def fill(cluster: LocalCluster, topic: str, count: int) -> list[list[bytes]]:
    """`count` records, round robin over the topic's partitions; the values by partition."""
    values: list[list[bytes]] = [[] for _ in range(PARTITIONS)]
    with Producer({"bootstrap.servers": cluster.bootstrap_servers}) as producer:
        for i in range(count):
            values[i % PARTITIONS].append(f"in-{i}".encode())
            producer.produce(topic, values[i % PARTITIONS][-1], partition=i % PARTITIONS)
    return values


async def copy_in_transactions(producer: Any, consumer: Any, source: str, sink: str) -> dict:
    """Consume-transform-produce through PLAN: each step copies what the consumer hands out
    to the sink (same partition) and sends the consumer's positions with it, then commits or
    aborts; after an abort the consumer goes back to the committed offsets. Checks after each
    step that the group's committed offsets are exactly those of the committed steps."""
    tps = [TopicPartition(source, p) for p in range(PARTITIONS)]
    committed = {tp: 0 for tp in tps}
    aborted: list[bytes] = []
    await ready(producer.init_transactions())
    for outcome in PLAN:
        records: list[Any] = []
        while not records:
            records = await ready(consumer.consume(8, timeout=30))
        producer.begin_transaction()
        positions = dict(committed)
        for r in records:
            await ready(producer.produce(sink, b"out-" + r.value, partition=r.partition))
            positions[TopicPartition(r.topic, r.partition)] = r.offset + 1
        metadata = consumer.group_metadata()
        assert metadata.generation_id >= 1 and metadata.member_id  # a real group member
        await ready(producer.send_offsets_to_transaction(positions, metadata))
        if outcome == "commit":
            await ready(producer.commit_transaction())
            committed = positions
        else:
            # Sent first (an abort drops what is still queued), so read_uncommitted has them.
            await ready(producer.flush())
            await ready(producer.abort_transaction())
            aborted += [b"out-" + r.value for r in records]
            for tp, offset in committed.items():
                consumer.seek(tp, offset)
        found = await ready(consumer.committed(tps))
        assert {tp: (m.offset if m else 0) for tp, m in found.items()} == committed, outcome
    return {"committed": committed, "aborted": aborted}


def consumer_config(cluster: LocalCluster, group: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": cluster.bootstrap_servers,
        "group.id": group,
        "isolation.level": "read_committed",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }


def run_sync(cluster: LocalCluster, source: str, sink: str, group: str, tid: str) -> dict:
    with (
        Producer(txn_config(cluster, tid)) as producer,
        Consumer(consumer_config(cluster, group)) as consumer,
    ):
        consumer.subscribe([source])
        steps = copy_in_transactions(producer, consumer, source, sink)
        try:  # with sync clients nothing awaits: the coroutine runs to its end at once
            steps.send(None)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        raise AssertionError("a sync client's call returned an awaitable")


def run_trio(cluster: LocalCluster, source: str, sink: str, group: str, tid: str) -> dict:
    class Consuming:  # AsyncConsumer's getmany under the sync consumer's name
        def __init__(self, consumer: AsyncConsumer) -> None:
            self.consumer = consumer

        def __getattr__(self, name: str) -> Any:
            return getattr(self.consumer, name)

        async def consume(self, count: int, timeout: float) -> list[Any]:
            return await self.consumer.getmany(count, timeout)

    async def main() -> dict:
        async with (
            AsyncProducer(txn_config(cluster, tid)) as producer,
            AsyncConsumer(consumer_config(cluster, group)) as consumer,
        ):
            consumer.subscribe([source])
            return await copy_in_transactions(producer, Consuming(consumer), source, sink)

    return trio.run(main)


@pytest.mark.parametrize("run", [run_sync, run_trio], ids=["sync", "trio"])
def test_consume_transform_produce(txn_cluster: LocalCluster, run: Any) -> None:
    source, sink = unique_topic("gtx-in"), unique_topic("gtx-out")
    for topic in (source, sink):
        create_topic(txn_cluster, topic, partitions=PARTITIONS, replication_factor=3)
    values = fill(txn_cluster, source, SOURCE_RECORDS)
    outcome = run(txn_cluster, source, sink, unique_topic("g-gtx"), unique_topic("tid-gtx"))
    committed, aborted = outcome["committed"], outcome["aborted"]
    assert aborted
    expected = {
        p: [b"out-" + v for v in values[p][: committed[TopicPartition(source, p)]]]
        for p in range(PARTITIONS)
    }
    # Exactly the committed copies, in order, for gregor-client and librdkafka alike.
    assert read_all_confluent(txn_cluster, sink, PARTITIONS, "read_committed") == expected
    assert read_all_gregor(txn_cluster, sink, PARTITIONS, "read_committed") == expected
    # read_uncommitted: the aborted copies too, and not a control record.
    everything = read_all_gregor(txn_cluster, sink, PARTITIONS, "read_uncommitted")
    assert sorted(v for vs in everything.values() for v in vs) == sorted(
        [v for vs in expected.values() for v in vs] + aborted
    )


def test_read_committed_of_a_confluent_transaction(txn_cluster: LocalCluster) -> None:
    topic = unique_topic("gtx-from-confluent")
    create_topic(txn_cluster, topic, partitions=PARTITIONS, replication_factor=3)
    producer = ConfluentProducer(
        {"bootstrap.servers": txn_cluster.bootstrap_servers, "transactional.id": unique_topic()}
    )
    producer.init_transactions(60)
    committed: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    everything: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    for txn, commit in enumerate((True, False, True, True)):
        producer.begin_transaction()
        for i in range(20):
            value = f"{txn}-{i}".encode()
            producer.produce(topic, value=value, partition=i % PARTITIONS)
            everything[i % PARTITIONS].append(value)
            if commit:
                committed[i % PARTITIONS].append(value)
        assert producer.flush(60) == 0
        if commit:
            producer.commit_transaction(60)
        else:
            producer.abort_transaction(60)
    assert read_all_gregor(txn_cluster, topic, PARTITIONS, "read_committed") == committed
    assert read_all_gregor(txn_cluster, topic, PARTITIONS, "read_uncommitted") == everything


@pytest.mark.parametrize("where", ["new partition", "partition in the transaction"])
def test_zombie_is_fenced(txn_cluster: LocalCluster, where: str) -> None:
    topic = unique_topic("gtx-zombie")
    create_topic(txn_cluster, topic, partitions=2, replication_factor=3)
    tid = unique_topic("tid-zombie")
    with Producer(txn_config(txn_cluster, tid)) as zombie:
        zombie.init_transactions()
        zombie.begin_transaction()
        zombie.produce(topic, b"zombie-before", partition=0).result(30)
        with Producer(txn_config(txn_cluster, tid)) as successor:
            successor.init_transactions()  # fences the zombie, aborts its transaction
            successor.begin_transaction()
            successor.produce(topic, b"successor", partition=0)
            successor.commit_transaction()
        late = zombie.produce(
            topic, b"zombie-after", partition=1 if where == "new partition" else 0
        )
        zombie.flush()
        if where == "new partition":
            # AddPartitionsToTxn: PRODUCER_FENCED, fatal at once.
            assert isinstance(late.exception(), ProducerFencedError)
            with pytest.raises(ProducerFencedError):
                zombie.commit_transaction()
        else:
            # The partition's leader refuses the old epoch (INVALID_PRODUCER_EPOCH): the
            # transaction is abortable, and the abort finds the producer fenced.
            assert isinstance(late.exception(), InvalidProducerEpochError)
            with pytest.raises(TransactionAbortableError) as failed:
                zombie.commit_transaction()
            assert isinstance(failed.value.__cause__, InvalidProducerEpochError)
            with pytest.raises(ProducerFencedError):
                zombie.abort_transaction()
        # Fatal: every later transactional call says so.
        with pytest.raises(ProducerFencedError):
            zombie.begin_transaction()
    seen = read_all_gregor(txn_cluster, topic, 2, "read_committed")
    assert seen == {0: [b"successor"], 1: []}


def test_abortable_error_then_abort_and_go_on(txn_cluster: LocalCluster) -> None:
    topic = unique_topic("gtx-abortable")
    create_topic(
        txn_cluster,
        topic,
        partitions=1,
        replication_factor=3,
        configs={"max.message.bytes": "1024"},
    )
    with Producer(txn_config(txn_cluster, unique_topic("tid-abortable"))) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.produce(topic, b"small-1", partition=0).result(30)
        big = producer.produce(topic, b"x" * 4000, partition=0)  # over max.message.bytes
        producer.flush()
        assert isinstance(big.exception(), MessageTooLargeError)
        with pytest.raises(TransactionAbortableError) as failed:
            producer.commit_transaction()
        assert isinstance(failed.value.__cause__, MessageTooLargeError)
        with pytest.raises(TransactionAbortableError):
            producer.send_offsets_to_transaction({TopicPartition(topic, 0): 1}, "g")
        producer.abort_transaction()
        # The next transaction works (the failed batch left a gap in the partition's
        # sequence numbers: the abort started a new epoch).
        producer.begin_transaction()
        producer.produce(topic, b"small-2", partition=0)
        producer.commit_transaction()
    assert read_all_gregor(txn_cluster, topic, 1, "read_committed") == {0: [b"small-2"]}


def test_an_abort_drops_the_records_not_sent_yet(txn_cluster: LocalCluster) -> None:
    """As the Java client: an abort fails what is still queued (TransactionAbortedError)
    without sending it, then the next transaction goes on."""
    topic = unique_topic("gtx-drop")
    create_topic(txn_cluster, topic, partitions=1, replication_factor=3)
    config = txn_config(txn_cluster, unique_topic("tid-drop"), **{"linger.ms": 600_000})
    with Producer(config) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        sent = producer.produce(topic, b"sent", partition=0)
        producer.flush()
        queued = [producer.produce(topic, f"queued-{i}".encode(), partition=0) for i in range(5)]
        producer.abort_transaction()
        assert sent.exception() is None
        assert all(isinstance(f.exception(), TransactionAbortedError) for f in queued)
        producer.begin_transaction()
        producer.produce(topic, b"next", partition=0)
        producer.commit_transaction()
    assert read_all_gregor(txn_cluster, topic, 1, "read_uncommitted") == {0: [b"sent", b"next"]}
    assert read_all_gregor(txn_cluster, topic, 1, "read_committed") == {0: [b"next"]}


def test_fatal_errors_at_init_and_misuse(txn_cluster: LocalCluster) -> None:
    topic = unique_topic("gtx-misuse")
    create_topic(txn_cluster, topic, partitions=1, replication_factor=3)
    config = txn_config(
        txn_cluster, unique_topic("tid-timeout"), **{"transaction.timeout.ms": 900_001}
    )
    with Producer(config) as producer:
        refused = r"transaction\.timeout\.ms=900001 is refused"
        with pytest.raises(InvalidTransactionTimeoutError, match=refused):
            producer.init_transactions()
        with pytest.raises(InvalidTransactionTimeoutError):  # fatal: it stays
            producer.begin_transaction()
    with Producer(txn_config(txn_cluster, unique_topic("tid-misuse"))) as producer:
        with pytest.raises(InvalidTxnStateError, match="uninitialized"):
            producer.begin_transaction()
        producer.init_transactions()
        with pytest.raises(InvalidTxnStateError, match="ready"):
            producer.commit_transaction()
        outside = producer.produce(topic, b"outside a transaction", partition=0)
        producer.flush()
        assert isinstance(outside.exception(), InvalidTxnStateError)
        producer.begin_transaction()  # not fatal: the producer goes on
        producer.send_offsets_to_transaction(
            {TopicPartition(topic, 0): 0}, ConsumerGroupMetadata(unique_topic("g"))
        )
        producer.commit_transaction()
