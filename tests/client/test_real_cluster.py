"""gregor-client against a real Gregor cluster: three gregor-broker processes on a real
ZooKeeper. Produce and consume (sync, trio, asyncio), every codec, admin operations, and
consumer groups."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from typing import Any
from uuid import UUID

import pytest

from gregor.client import (
    AdminClient,
    AsyncConsumer,
    AsyncProducer,
    Consumer,
    ConsumerRecord,
    NewTopic,
    Producer,
    TopicPartition,
)
from gregor.client.admin import ConfigResource, ElectionType, ResourceType
from gregor.devcluster import LocalCluster
from gregor.protocol.errors import (
    ElectionNotNeededError,
    InvalidRecordError,
    KafkaError,
    MessageTooLargeError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from gregor.protocol.hashing import default_partition
from gregor_testing.cluster import create_topic, metadata, unique_topic, wait_for

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def settings(cluster: LocalCluster, **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": cluster.bootstrap_servers, **extra}


def read(consumer: Consumer, count: int, timeout: float = 60) -> list[ConsumerRecord]:
    out: list[ConsumerRecord] = []
    deadline = time.monotonic() + timeout
    while len(out) < count and time.monotonic() < deadline:
        out += consumer.consume(count - len(out), timeout=1)
    return out


def records_for(topic: str, count: int) -> list[tuple[bytes, bytes, list[tuple[str, bytes]], int]]:
    base = 1_700_000_000_000
    return [
        (b"key-%d" % i, b"value \x00\xff %d" % i, [("n", b"%d" % i), ("empty", b"")], base + i)
        for i in range(count)
    ]


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_with_every_codec(shared_cluster: LocalCluster, codec: str) -> None:
    topic = unique_topic("rt")
    create_topic(shared_cluster, topic, partitions=3, replication_factor=3)
    sent = records_for(topic, 300)
    with Producer(settings(shared_cluster, acks="all", **{"compression.type": codec})) as p:
        futures = [
            p.produce(topic, value, key=key, headers=headers, timestamp=ts)
            for key, value, headers, ts in sent
        ]
        assert p.flush(60) == 0
        placed = [f.result() for f in futures]
    for (key, *_), meta in zip(sent, placed, strict=True):
        assert meta.partition == default_partition(key, 3)
    with Consumer(settings(shared_cluster, **{"auto.offset.reset": "earliest"})) as c:
        c.assign([TopicPartition(topic, p) for p in range(3)])
        got = read(c, 300)
    assert sorted((r.key, r.value, list(r.headers), r.timestamp) for r in got) == sorted(
        (k, v, h, ts) for k, v, h, ts in sent
    )
    by_offset = {(r.partition, r.offset): r.key for r in got}
    assert {(m.partition, m.offset) for m in placed} == set(by_offset)


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_a_batch_over_the_topic_limit_is_split_and_a_record_over_it_fails(
    shared_cluster: LocalCluster, codec: str
) -> None:
    """The topic takes batches of 4,000 bytes at most; the producer gathers 50 records of
    ~300 bytes (incompressible) into one batch. It splits it until the halves fit, so each
    record lands once, in order; a record of 5,000 bytes alone still fails."""
    topic = unique_topic("split")
    create_topic(
        shared_cluster,
        topic,
        partitions=1,
        replication_factor=3,
        configs={"max.message.bytes": "4000"},
    )
    values = [b"%03d" % i + random.Random(i).randbytes(297) for i in range(50)]
    delivered: list[tuple[int, int]] = []
    config = {"linger.ms": 200, "compression.type": codec, "enable.idempotence": False}
    with Producer(settings(shared_cluster, **config)) as producer:
        futures = [
            producer.produce(
                topic,
                value,
                partition=0,
                on_delivery=lambda error, meta, i=i: delivered.append((i, meta.offset)),
            )
            for i, value in enumerate(values)
        ]
        too_large = producer.produce(topic, random.Random(-1).randbytes(5_000), partition=0)
        producer.flush(60)
        offsets = [f.result(0).offset for f in futures]
        with pytest.raises(MessageTooLargeError, match=f"{topic}-0"):
            too_large.result(0)
    assert offsets == list(range(50))
    assert sorted(delivered) == [(i, i) for i in range(50)]
    with Consumer(settings(shared_cluster, **{"auto.offset.reset": "earliest"})) as c:
        c.assign([TopicPartition(topic, 0)])
        got = read(c, 50)
    assert [(r.offset, r.value) for r in got] == list(enumerate(values))


def test_records_the_broker_names_invalid_fail_with_its_message(
    shared_cluster: LocalCluster,
) -> None:
    """KIP-467: a batch with keyless records on a compacted topic is refused with
    INVALID_RECORD and each bad record named; exactly those records fail as INVALID_RECORD
    with the broker's message, the batch's others with an error saying they were refused with
    them (the Java client's behaviour), on the future and in on_delivery alike."""
    topic = unique_topic("kip467")
    create_topic(shared_cluster, topic, configs={"cleanup.policy": "compact"})
    keys = [b"k0", None, b"k2", b"k3", None, b"", None]  # an empty key is a key
    reports: dict[int, Exception | None] = {}
    config = {"linger.ms": 1000, "enable.idempotence": False, "retries": 0}
    with Producer(settings(shared_cluster, **config)) as producer:
        futures = [
            producer.produce(
                topic,
                b"v%d" % i,
                key,
                partition=0,
                on_delivery=lambda error, meta, i=i: reports.__setitem__(i, error),
            )
            for i, key in enumerate(keys)
        ]
        producer.flush(60)
        producer.poll(0)
    errors = {i: f.exception(0) for i, f in enumerate(futures)}
    why = f"Compacted topic cannot accept message without key in topic partition {topic}-0."
    invalid = {i for i, e in errors.items() if isinstance(e, InvalidRecordError)}
    assert invalid == {1, 4, 6}
    for i in invalid:
        assert str(errors[i]).endswith(f"record {i} of the batch: {why}"), errors[i]
    for i in set(range(len(keys))) - invalid:
        error = errors[i]
        assert type(error) is KafkaError, error
        assert "part of a batch with one or more invalid records" in str(error)
        assert "INVALID_RECORD" in str(error)
    assert {i: type(e) for i, e in reports.items()} == {i: type(e) for i, e in errors.items()}
    with Consumer(settings(shared_cluster)) as c:  # nothing of the batch reached the log
        assert c.end_offsets([TopicPartition(topic, 0)], 30) == {TopicPartition(topic, 0): 0}


def test_idle_connections_close_and_the_next_record_reconnects(
    shared_cluster: LocalCluster,
) -> None:
    topic = unique_topic("idle")
    create_topic(shared_cluster, topic, partitions=1, replication_factor=3)
    with Producer(settings(shared_cluster, **{"connections.max.idle.ms": 300})) as producer:
        first = producer.produce(topic, b"a", partition=0).result(30)
        network = producer._core.client
        nodes = [*network._nodes.values(), *network._bootstrap]

        def all_closed() -> bool:
            return all(n.connection is None or n.connection.closed for n in nodes)

        wait_for(all_closed, 30, "the idle connections to close")
        second = producer.produce(topic, b"b", partition=0).result(30)
    assert (first.offset, second.offset) == (0, 1)


def test_async_clients_under_trio_and_asyncio(shared_cluster: LocalCluster) -> None:
    topic = unique_topic("aio")
    create_topic(shared_cluster, topic, partitions=1, replication_factor=3)

    async def round_trip(tag: bytes) -> list[bytes]:
        async with AsyncProducer(settings(shared_cluster, **{"linger.ms": 2})) as producer:
            for i in range(50):
                await producer.produce(topic, tag + b"%d" % i)
            await producer.flush(30)
        async with AsyncConsumer(
            settings(shared_cluster, **{"auto.offset.reset": "earliest"})
        ) as c:
            c.assign([TopicPartition(topic, 0)])
            got: list[ConsumerRecord] = []
            while len([r for r in got if r.value.startswith(tag)]) < 50:
                got += await c.getmany(timeout=5)
            return [r.value for r in got if r.value.startswith(tag)]

    import trio

    assert trio.run(round_trip, b"trio-") == [b"trio-%d" % i for i in range(50)]
    assert asyncio.run(round_trip(b"asyncio-")) == [b"asyncio-%d" % i for i in range(50)]


def test_admin_operations(shared_cluster: LocalCluster) -> None:
    topic = unique_topic("admin")
    with AdminClient(settings(shared_cluster)) as admin:

        def partitions() -> int:
            # As with Kafka, CreateTopics answers once the controller knows the topic; the
            # broker that answers Describe may hear of it a moment later.
            try:
                return len(admin.describe_topics([topic])[topic].partitions)
            except UnknownTopicOrPartitionError:
                return 0

        admin.create_topics([NewTopic(topic, 2, 3, config={"retention.ms": "3600000"})])
        wait_for(lambda: partitions() == 2, 30, "topic")
        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics([NewTopic(topic, 2, 3)])
        resource = ConfigResource(ResourceType.TOPIC, topic)
        assert admin.describe_configs([resource])[resource]["retention.ms"].value == "3600000"
        admin.alter_configs({resource: {"retention.ms": "7200000"}})
        assert admin.describe_configs([resource])[resource]["retention.ms"].value == "7200000"
        admin.create_partitions({topic: 4})
        wait_for(lambda: partitions() == 4, 30, "4 partitions")
        with Producer(settings(shared_cluster)) as p:
            for i in range(10):
                p.produce(topic, b"%d" % i, partition=0)
        tp = TopicPartition(topic, 0)
        assert admin.list_offsets({tp: "latest"})[tp].offset == 10
        assert admin.delete_records({tp: 4}) == {tp: 4}
        assert admin.list_offsets({tp: "earliest"})[tp].offset == 4
        cluster = admin.describe_cluster()
        assert [b.node_id for b in cluster.brokers] == [0, 1, 2]
        election = admin.elect_leaders(ElectionType.PREFERRED, [tp])
        assert election[tp] is None or isinstance(election[tp], ElectionNotNeededError)
        admin.delete_topics([topic])


def test_a_deleted_topic_disappears_and_comes_back_with_a_new_id(
    shared_cluster: LocalCluster,
) -> None:
    topic = unique_topic("deleted")

    def topic_ids() -> dict[int, UUID | None]:
        """The topic's id in each broker's Metadata (None where the topic is unknown)."""
        seen: dict[int, UUID | None] = {}
        for broker in shared_cluster.brokers:
            answer = metadata(shared_cluster, [topic], broker.broker_id, version=12)
            found = [t.topic_id for t in answer.topics if t.name == topic and t.error_code == 0]
            seen[broker.broker_id] = found[0] if found else None
        return seen

    with AdminClient(settings(shared_cluster)) as admin:
        admin.create_topics([NewTopic(topic, 2, 3)])
        wait_for(lambda: None not in topic_ids().values(), 30, "every broker to know the topic")
        [first_id] = set(topic_ids().values())
        controller = metadata(shared_cluster, []).controller_id
        admin.delete_topics([topic])
        # DeleteTopics answers once the controller (which it went to) has dropped the topic.
        assert topic_ids()[controller] is None
        wait_for(lambda: set(topic_ids().values()) == {None}, 30, "every broker to drop it")

        def recreated() -> bool:
            # Until the controller has deleted every replica, the name is still taken.
            try:
                admin.create_topics([NewTopic(topic, 1, 3)])
            except TopicAlreadyExistsError as exc:
                assert "marked for deletion" in str(exc)
                return False
            return True

        wait_for(recreated, 30, "the controller to finish the deletion")
        wait_for(lambda: None not in topic_ids().values(), 30, "the topic to come back")
        [second_id] = set(topic_ids().values())
    assert second_id != first_id
    assert UUID(int=0) not in (first_id, second_id)


class _Poller:
    """A group member polling on a thread of its own."""

    def __init__(self, consumer: Consumer, topic: str) -> None:
        import threading

        self.consumer = consumer
        consumer.subscribe([topic])
        self.records: list[ConsumerRecord] = []
        self.stopped = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopped:
            self.records += self.consumer.consume(100, timeout=0.2)

    def stop(self) -> None:
        self.stopped = True
        self.thread.join(30)
        self.consumer.close()


def until(predicate: Callable[[], bool], what: str, timeout: float = 60) -> None:
    wait_for(predicate, timeout, what)


def test_a_group_of_three_shares_twelve_partitions_and_commits(
    shared_cluster: LocalCluster,
) -> None:
    topic = unique_topic("group")
    group = unique_topic("g")
    create_topic(shared_cluster, topic, partitions=12, replication_factor=3)
    with Producer(settings(shared_cluster)) as p:
        for i in range(1200):
            p.produce(topic, b"%d" % i, partition=i % 12)
    members = [
        _Poller(
            Consumer(
                settings(
                    shared_cluster,
                    **{
                        "group.id": group,
                        "auto.offset.reset": "earliest",
                        "partition.assignment.strategy": "range",
                        "auto.commit.interval.ms": 200,
                    },
                )
            ),
            topic,
        )
        for _ in range(3)
    ]
    try:
        until(
            lambda: sorted(len(m.consumer.assignment()) for m in members) == [4, 4, 4],
            "four partitions each",
        )
        until(lambda: sum(len(m.records) for m in members) >= 1200, "every record")
    finally:
        for m in members:
            m.stop()
    values = [r.value for m in members for r in m.records]
    assert sorted(values) == sorted(b"%d" % i for i in range(1200))
    with AdminClient(settings(shared_cluster)) as admin:
        offsets = admin.list_group_offsets(group)
        assert {tp.partition for tp in offsets} == set(range(12))
        assert all(o.committed.offset == 100 and o.lag == 0 for o in offsets.values())
