"""The interop matrix's own cells: what the per-client suites (tests/broker, tests/groups,
tests/controller) do not already cover. See tests/gregor_testing/matrix.py for the table.

- metadata: brokers, controller, leaders; all topics; one topic; a regex subscription.
- produce: 60 records per codec with null and empty keys, binary values, duplicate headers
  and explicit timestamps, read back byte for byte (kcat cannot set timestamps: it is
  checked for CreateTime; KafkaJS has no snappy, lz4 or zstd without plugins).
- admin: aiokafka's and KafkaJS's admin clients, as far as each goes (the others' admin
  cells are tests/controller and tests/groups).
- idempotence: kcat's here; the other clients' is tests/broker/test_idempotence.py (two
  leader failovers). Transactions: one committed transaction per client, read back.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer

from gregor.devcluster import LocalCluster
from gregor_testing.cluster import create_topic, unique_topic
from gregor_testing.matrix import NODE_MODULES, run_kcat

HERE = Path(__file__).resolve().parent
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
BASE_TS = 1_700_000_000_000
NO_KAFKAJS = shutil.which("node") is None or not (NODE_MODULES / "kafkajs").is_dir()
NO_KCAT = shutil.which("kcat") is None


Record = tuple[bytes | None, bytes, list[tuple[str, bytes]], int]


def records(codec: str) -> list[Record]:
    """60 records: null and empty keys, binary values (every byte), duplicate headers,
    explicit timestamps."""
    out: list[Record] = []
    for i in range(60):
        key = None if i % 10 == 0 else b"" if i % 10 == 1 else bytes([i, 0, 255]) + codec.encode()
        value = bytes((i * 7 + j) % 256 for j in range(i * 5 + 1))
        headers = [("h", bytes([i, 0])), ("h", b"\xff" + codec.encode()), ("n", b"")]
        out.append((key, value, headers, BASE_TS + i * 1000))
    return out


def read_back(cluster: LocalCluster, topic: str, count: int) -> list[Any]:
    """The records of partition 0, through librdkafka: (key, value, headers, (type, ts))."""
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": "matrix-reader",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        out: list[Any] = []
        deadline = time.monotonic() + 60
        while len(out) < count and time.monotonic() < deadline:
            message = consumer.poll(1)
            if message is None:
                continue
            assert message.error() is None, message.error()
            out.append(
                (message.key(), message.value(), message.headers() or [], message.timestamp())
            )
        return out
    finally:
        consumer.close()


def read_to_end(cluster: LocalCluster, topic: str, isolation: str) -> list[bytes | None]:
    """The values of partition 0 up to its end as `isolation.level` sees it (librdkafka
    signals the end at the last stable offset with read_committed)."""
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": "matrix-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        out: list[bytes | None] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            message = consumer.poll(1)
            if message is None:
                continue
            if message.error() is not None:
                assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                return out
            out.append(message.value())
        raise AssertionError(f"{topic}: no end of partition 0 within 60 s, read {out}")
    finally:
        consumer.close()


def new_topic(cluster: LocalCluster, prefix: str, partitions: int = 1) -> str:
    topic = unique_topic(prefix)
    create_topic(cluster, topic, partitions=partitions, replication_factor=3)
    return topic


def check_exact(cluster: LocalCluster, topic: str, sent: list[Record]) -> None:
    got = read_back(cluster, topic, len(sent))
    assert [(k, v, h) for k, v, h, _ in got] == [(k, v, h) for k, v, h, _ in sent]
    assert [ts for *_, ts in got] == [(1, ts) for *_, ts in sent]  # CreateTime, as given


# -- produce ---------------------------------------------------------------------------------


@pytest.mark.interop("confluent", "produce")
@pytest.mark.parametrize("codec", CODECS)
def test_confluent_produce(shared_cluster: LocalCluster, codec: str) -> None:
    topic = new_topic(shared_cluster, f"m-ck-{codec}")
    sent = records(codec)
    producer = Producer(
        {
            "bootstrap.servers": shared_cluster.bootstrap_servers,
            "compression.type": codec,
            "linger.ms": 20,
            "enable.idempotence": False,
        }
    )
    for key, value, headers, ts in sent:
        producer.produce(topic, value, key, partition=0, headers=headers, timestamp=ts)
    assert producer.flush(60) == 0
    check_exact(shared_cluster, topic, sent)


@pytest.mark.interop("kafka-python", "produce")
@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_produce(shared_cluster: LocalCluster, codec: str) -> None:
    topic = new_topic(shared_cluster, f"m-kp-{codec}")
    sent = records(codec)
    producer = KafkaProducer(
        bootstrap_servers=shared_cluster.bootstrap_servers,
        compression_type=None if codec == "none" else codec,
        linger_ms=20,
        enable_idempotence=False,
    )
    try:
        for key, value, headers, ts in sent:
            producer.send(topic, value, key, headers=headers, partition=0, timestamp_ms=ts)
        producer.flush(60)
    finally:
        producer.close()
    check_exact(shared_cluster, topic, sent)


@pytest.mark.interop("aiokafka", "produce")
@pytest.mark.parametrize("codec", CODECS)
def test_aiokafka_produce(shared_cluster: LocalCluster, codec: str) -> None:
    topic = new_topic(shared_cluster, f"m-aio-{codec}")
    sent = records(codec)

    async def run() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=shared_cluster.bootstrap_servers,
            compression_type=None if codec == "none" else codec,
            linger_ms=20,
        )
        await producer.start()
        try:
            for key, value, headers, ts in sent:
                await producer.send(
                    topic, value, key, partition=0, timestamp_ms=ts, headers=headers
                )
            await producer.flush()
        finally:
            await producer.stop()

    asyncio.run(run())
    check_exact(shared_cluster, topic, sent)


def kcat(cluster: LocalCluster, new: bool, *args: str, stdin: bytes | None = None) -> bytes:
    return run_kcat(cluster.bootstrap_servers, *args, new=new, stdin=stdin)


KCATS = [
    pytest.param(False, marks=pytest.mark.interop("kcat", "produce"), id="kcat"),
    pytest.param(True, marks=pytest.mark.interop("kcat-new", "produce"), id="kcat-new"),
]


@pytest.mark.skipif(NO_KCAT, reason="kcat is not installed")
@pytest.mark.parametrize("new", KCATS)
@pytest.mark.parametrize("codec", CODECS)
def test_kcat_produce(shared_cluster: LocalCluster, new: bool, codec: str) -> None:
    """kcat reads records from stdin (one per delimiter, key before a separator): keys,
    binary values without the delimiters, duplicate headers; the timestamp is CreateTime."""
    topic = new_topic(shared_cluster, f"m-kcat-{codec}")
    sent = [
        (key, bytes(b for b in value if b not in (0x1E, 0x1F)) or b"x", headers)
        for key, value, headers, _ in records(codec)
        if key != b""  # kcat -K sends an empty key as no key
    ]
    stdin = b"".join(
        (b"" if key is None else key.replace(b"\x1e", b"").replace(b"\x1f", b"") + b"\x1f")
        + value
        + b"\x1e"
        for key, value, _ in sent
    )
    before = int(time.time() * 1000)
    headers = ["-H", "h=one", "-H", "h=two"]
    kcat(shared_cluster, new, "-P", "-t", topic, "-p", "0", "-z", codec, "-K", "\x1f",
         "-D", "\x1e", *headers, stdin=stdin)  # fmt: skip
    got = read_back(shared_cluster, topic, len(sent))
    want = [
        (None if key is None else key.replace(b"\x1e", b"").replace(b"\x1f", b""), value)
        for key, value, _ in sent
    ]
    assert [(k, v) for k, v, _, _ in got] == want
    assert all(h == [("h", b"one"), ("h", b"two")] for _, _, h, _ in got)
    assert all(kind == 1 and before - 1000 <= ts <= time.time() * 1000 for *_, (kind, ts) in got)


@pytest.mark.interop("kafkajs", "produce")
@pytest.mark.skipif(NO_KAFKAJS, reason="KafkaJS is not installed")
@pytest.mark.parametrize("codec", CODECS)
def test_kafkajs_produce(shared_cluster: LocalCluster, codec: str, tmp_path: Path) -> None:
    if codec not in ("none", "gzip"):
        pytest.skip(f"KafkaJS has no {codec} codec without a plugin")
    topic = new_topic(shared_cluster, f"m-js-{codec}")
    sent = records(codec)
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    wire = [
        [None if k is None else b64(k), b64(v), [[n, b64(x)] for n, x in h], ts]
        for k, v, h, ts in sent
    ]
    path = tmp_path / "records.json"
    path.write_text(json.dumps(wire))
    kafkajs("produce", shared_cluster, topic, codec, str(path))
    check_exact(shared_cluster, topic, sent)


def kafkajs(command: str, cluster: LocalCluster, topic: str, *args: str) -> Any:
    done = subprocess.run(
        ["node", str(HERE / "matrix_kafkajs.js"), command, cluster.bootstrap_servers, topic, *args],
        capture_output=True,
        timeout=120,
        check=False,
        env={**os.environ, "NODE_PATH": str(NODE_MODULES)},
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return json.loads(done.stdout)


# -- metadata --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def listed(shared_cluster: LocalCluster) -> Iterator[tuple[str, dict[int, list[int]]]]:
    """A topic of 3 partitions with a record in each, for the metadata cells to find."""
    topic = unique_topic("m-meta")
    assignment = create_topic(shared_cluster, topic, partitions=3, replication_factor=3)
    producer = Producer({"bootstrap.servers": shared_cluster.bootstrap_servers})
    for p in range(3):
        producer.produce(topic, f"in {p}".encode(), partition=p)
    assert producer.flush(30) == 0
    yield topic, assignment


def brokers_of(cluster: LocalCluster) -> set[tuple[int, str, int]]:
    out = set()
    for broker in cluster.brokers:
        host, port = broker.address.rsplit(":", 1)
        out.add((broker.broker_id, host, int(port)))
    return out


def prefix_of(topic: str) -> str:
    return topic[: len("m-meta")]


@pytest.mark.interop("confluent", "metadata")
def test_confluent_metadata(
    shared_cluster: LocalCluster, listed: tuple[str, dict[int, list[int]]]
) -> None:
    """AdminClient.list_topics() (all topics: Metadata v12, with librdkafka's stray bytes)
    and a regex subscription."""
    topic, assignment = listed
    admin = AdminClient({"bootstrap.servers": shared_cluster.bootstrap_servers})
    everything = admin.list_topics(timeout=30)
    assert {(b.id, b.host, b.port) for b in everything.brokers.values()} == brokers_of(
        shared_cluster
    )
    assert everything.controller_id in {b.broker_id for b in shared_cluster.brokers}
    assert topic in everything.topics
    one = admin.list_topics(topic, timeout=30).topics[topic]
    assert {p: m.replicas for p, m in one.partitions.items()} == assignment
    assert {p: m.leader for p, m in one.partitions.items()} == {
        p: r[0] for p, r in assignment.items()
    }
    consumer = Consumer(
        {
            "bootstrap.servers": shared_cluster.bootstrap_servers,
            "group.id": unique_topic("m-regex"),
            "auto.offset.reset": "earliest",
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )
    try:
        consumer.subscribe([f"^{prefix_of(topic)}.*"])
        seen: set[bytes] = set()
        deadline = time.monotonic() + 60
        while len(seen) < 3 and time.monotonic() < deadline:
            message = consumer.poll(1)
            if message is not None and message.error() is None and message.topic() == topic:
                seen.add(message.value())
        assert seen == {b"in 0", b"in 1", b"in 2"}
    finally:
        consumer.close()


@pytest.mark.skipif(NO_KCAT, reason="kcat is not installed")
@pytest.mark.parametrize(
    "new",
    [
        pytest.param(False, marks=pytest.mark.interop("kcat", "metadata"), id="kcat"),
        pytest.param(True, marks=pytest.mark.interop("kcat-new", "metadata"), id="kcat-new"),
    ],
)
def test_kcat_metadata(
    shared_cluster: LocalCluster, listed: tuple[str, dict[int, list[int]]], new: bool
) -> None:
    topic, assignment = listed
    everything = json.loads(kcat(shared_cluster, new, "-L", "-J"))
    assert {(b["id"], *b["name"].rsplit(":", 1)) for b in everything["brokers"]} == {
        (i, h, str(p)) for i, h, p in brokers_of(shared_cluster)
    }
    assert everything["controllerid"] in {b.broker_id for b in shared_cluster.brokers}
    assert topic in {t["topic"] for t in everything["topics"]}
    one = json.loads(kcat(shared_cluster, new, "-L", "-J", "-t", topic))["topics"][0]
    assert {p["partition"]: p["leader"] for p in one["partitions"]} == {
        p: r[0] for p, r in assignment.items()
    }


@pytest.mark.interop("kafka-python", "metadata")
def test_kafka_python_metadata(
    shared_cluster: LocalCluster, listed: tuple[str, dict[int, list[int]]]
) -> None:
    topic, assignment = listed
    admin = KafkaAdminClient(bootstrap_servers=shared_cluster.bootstrap_servers)
    try:
        cluster = admin.describe_cluster()  # DescribeCluster: its fields by Kafka's names
        assert {(b["broker_id"], b["host"], b["port"]) for b in cluster["brokers"]} == brokers_of(
            shared_cluster
        )
        assert cluster["controller_id"] in {b.broker_id for b in shared_cluster.brokers}
        assert topic in admin.list_topics()
        (described,) = admin.describe_topics([topic])
        assert {p["partition_index"]: p["leader_id"] for p in described["partitions"]} == {
            p: r[0] for p, r in assignment.items()
        }
    finally:
        admin.close()
    consumer = KafkaConsumer(
        bootstrap_servers=shared_cluster.bootstrap_servers,
        group_id=unique_topic("m-regex"),
        auto_offset_reset="earliest",
        metadata_max_age_ms=1000,
    )
    try:
        consumer.subscribe(pattern=f"^{prefix_of(topic)}.*")
        seen: set[bytes] = set()
        deadline = time.monotonic() + 60
        while len(seen) < 3 and time.monotonic() < deadline:
            for batch in consumer.poll(1000).values():
                seen |= {m.value for m in batch if m.topic == topic}
        assert seen == {b"in 0", b"in 1", b"in 2"}
    finally:
        consumer.close()


@pytest.mark.interop("aiokafka", "metadata")
def test_aiokafka_metadata(
    shared_cluster: LocalCluster, listed: tuple[str, dict[int, list[int]]]
) -> None:
    topic, assignment = listed

    async def run() -> set[bytes]:
        admin = AIOKafkaAdminClient(bootstrap_servers=shared_cluster.bootstrap_servers)
        await admin.start()
        try:
            cluster = await admin.describe_cluster()
            assert {(b["node_id"], b["host"], b["port"]) for b in cluster["brokers"]} == brokers_of(
                shared_cluster
            )
            assert cluster["controller_id"] in {b.broker_id for b in shared_cluster.brokers}
            assert topic in await admin.list_topics()
            (described,) = await admin.describe_topics([topic])
            assert {p["partition"]: p["leader"] for p in described["partitions"]} == {
                p: r[0] for p, r in assignment.items()
            }
        finally:
            await admin.close()
        consumer = AIOKafkaConsumer(
            bootstrap_servers=shared_cluster.bootstrap_servers,
            group_id=unique_topic("m-regex"),
            auto_offset_reset="earliest",
            metadata_max_age_ms=1000,
        )
        await consumer.start()
        try:
            consumer.subscribe(pattern=f"^{prefix_of(topic)}.*")
            seen: set[bytes] = set()
            deadline = time.monotonic() + 60
            while len(seen) < 3 and time.monotonic() < deadline:
                for batch in (await consumer.getmany(timeout_ms=1000)).values():
                    seen |= {m.value for m in batch if m.topic == topic}
            return seen
        finally:
            await consumer.stop()

    assert asyncio.run(run()) == {b"in 0", b"in 1", b"in 2"}


@pytest.mark.interop("kafkajs", "metadata")
@pytest.mark.skipif(NO_KAFKAJS, reason="KafkaJS is not installed")
def test_kafkajs_metadata(
    shared_cluster: LocalCluster, listed: tuple[str, dict[int, list[int]]]
) -> None:
    topic, assignment = listed
    found = kafkajs("metadata", shared_cluster, topic, prefix_of(topic))
    assert {tuple(b) for b in found["brokers"]} == brokers_of(shared_cluster)
    assert found["controller"] in {b.broker_id for b in shared_cluster.brokers}
    assert topic in found["topics"]
    assert {int(p): leader for p, leader in found["leaders"].items()} == {
        p: r[0] for p, r in assignment.items()
    }
    assert sorted(found["matched"]) == ["in 0", "in 1", "in 2"]


# -- admin -----------------------------------------------------------------------------------


def _configs(described: Any) -> dict[str, str]:
    """name -> value of a DescribeConfigs response (aiokafka's raw response object)."""
    [resource] = described.to_object()["resources"]
    assert resource["error_code"] == 0, resource
    return {e["config_names"]: e["config_value"] for e in resource["config_entries"]}


async def eventually(ask: Callable[[], Awaitable[Any]], wanted: Any) -> None:
    """Ask until the answer is `wanted` (metadata that every broker learns shortly)."""
    async with asyncio.timeout(30):
        while (found := await ask()) != wanted:
            await asyncio.sleep(0.1)
    assert found == wanted


@pytest.mark.interop("aiokafka", "admin")
def test_aiokafka_admin(shared_cluster: LocalCluster) -> None:
    """AIOKafkaAdminClient through what it has (no incremental alter configs, no deleting
    groups): create a topic with configs, create partitions, describe and alter configs,
    delete records, list and describe a live group and its offsets, delete the topic."""
    from aiokafka.admin import NewPartitions, NewTopic, RecordsToDelete
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
    from aiokafka.structs import TopicPartition as AioTopicPartition

    topic = unique_topic("m-aio-admin")
    group = unique_topic("g-aio-admin")
    wanted = ["retention.ms", "cleanup.policy"]

    async def run() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=shared_cluster.bootstrap_servers)
        await admin.start()
        resource = ConfigResource(ConfigResourceType.TOPIC, topic, dict.fromkeys(wanted))
        try:
            created = await admin.create_topics(
                [NewTopic(topic, 2, 3, topic_configs={"retention.ms": "3600000"})]
            )
            assert [e[1] for e in created.topic_errors] == [0], created

            async def configs() -> dict[str, str] | None:
                [described] = await admin.describe_configs([resource])
                [answer] = described.to_object()["resources"]
                unknown = answer["error_code"] == KafkaError.UNKNOWN_TOPIC_OR_PART
                return None if unknown else _configs(described)

            async def partitions() -> int:
                [meta] = await admin.describe_topics([topic])
                return len(meta["partitions"])

            # Every broker's metadata follows the controller's shortly (as in Kafka), and
            # aiokafka asks any broker.
            await eventually(configs, {"retention.ms": "3600000", "cleanup.policy": "delete"})
            await admin.create_partitions({topic: NewPartitions(4)})
            await eventually(partitions, 4)
            altered = ConfigResource(ConfigResourceType.TOPIC, topic, {"retention.ms": "7200000"})
            [answer] = await admin.alter_configs([altered])
            assert [r[0] for r in answer.resources] == [0], answer
            [described] = await admin.describe_configs([resource])
            assert _configs(described)["retention.ms"] == "7200000"

            producer = AIOKafkaProducer(
                bootstrap_servers=shared_cluster.bootstrap_servers, acks="all"
            )  # records to delete must be below the high watermark
            await producer.start()
            try:
                for i in range(10):
                    await producer.send_and_wait(topic, b"r%d" % i, partition=0)
            finally:
                await producer.stop()
            tp0 = AioTopicPartition(topic, 0)
            assert await admin.delete_records({tp0: RecordsToDelete(6)}) == {tp0: 6}

            consumer = AIOKafkaConsumer(
                topic,
                bootstrap_servers=shared_cluster.bootstrap_servers,
                group_id=group,
                auto_offset_reset="earliest",
                enable_auto_commit=False,
            )
            await consumer.start()
            try:
                read: list[tuple[int, int]] = []
                async with asyncio.timeout(60):
                    while len(read) < 4:
                        for records in (await consumer.getmany(timeout_ms=200)).values():
                            read += [(r.partition, r.offset) for r in records]
                assert sorted(read) == [(0, 6), (0, 7), (0, 8), (0, 9)]  # after the deleted
                await consumer.commit({tp0: 10})
                listed = await admin.list_consumer_groups()
                assert [g for g in listed if g[0] == group] == [(group, "consumer")]
                [groups] = await admin.describe_consumer_groups([group])
                [state] = groups.to_object()["groups"]
                assert (state["error_code"], state["state"], state["protocol_type"]) == (
                    0,
                    "Stable",
                    "consumer",
                )
                assert len(state["members"]) == 1
                offsets = await admin.list_consumer_group_offsets(group)
                assert {tp: o.offset for tp, o in offsets.items()} == {tp0: 10}
            finally:
                await consumer.stop()
            deleted = await admin.delete_topics([topic])
            assert [e[1] for e in deleted.topic_error_codes] == [0], deleted

            async def listed_topic() -> bool:
                return topic in await admin.list_topics()

            await eventually(listed_topic, False)
        finally:
            await admin.close()

    asyncio.run(run())


@pytest.mark.interop("kafkajs", "admin")
@pytest.mark.skipif(NO_KAFKAJS, reason="KafkaJS is not installed")
def test_kafkajs_admin(shared_cluster: LocalCluster) -> None:
    """kafka.admin() through what it has (no incremental alter configs): see
    matrix_kafkajs.js's `admin`."""
    topic = unique_topic("m-js-admin")
    group = unique_topic("g-js-admin")
    seen = kafkajs("admin", shared_cluster, topic, group)
    assert seen["created"] is True
    assert seen["configsCreated"] == {"retention.ms": "3600000", "cleanup.policy": "delete"}
    assert seen["partitions"] == 4
    assert seen["configsAltered"]["retention.ms"] == "7200000"
    assert seen["offsetsAfterDelete"] == [6, 10]
    assert sorted(map(tuple, seen["read"])) == [(0, 6), (0, 7), (0, 8), (0, 9)]
    assert seen["listed"] == [{"groupId": group, "protocolType": "consumer"}]
    assert seen["described"] == {
        "state": "Stable",
        "protocolType": "consumer",
        "protocol": "RoundRobinAssigner",
        "members": 1,
    }
    assert seen["committed"] == [10]
    assert seen["deletedGroups"] == [[group, 0]]
    assert seen["groupsAfter"] == []
    assert seen["topicsAfter"] == []


# -- what Gregor cannot do yet, and what a client cannot do ----------------------------------


@pytest.mark.interop("confluent", "transactions")
def test_confluent_transactions(shared_cluster: LocalCluster) -> None:
    topic = new_topic(shared_cluster, "m-txn")
    producer = Producer(
        {
            "bootstrap.servers": shared_cluster.bootstrap_servers,
            "transactional.id": unique_topic("m-txn"),
        }
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, value=b"committed", partition=0)
    producer.commit_transaction(30)
    assert [v for _, v, _, _ in read_back(shared_cluster, topic, 1)] == [b"committed"]


@pytest.mark.interop("kafka-python", "transactions")
def test_kafka_python_transactions(shared_cluster: LocalCluster) -> None:
    topic = new_topic(shared_cluster, "m-kp-txn")
    producer = KafkaProducer(
        bootstrap_servers=shared_cluster.bootstrap_servers,
        transactional_id=unique_topic("m-kp-txn"),
        max_block_ms=15000,
    )
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, value=b"committed", partition=0)
        producer.commit_transaction()
    finally:
        producer.close(timeout=5)
    assert [v for _, v, _, _ in read_back(shared_cluster, topic, 1)] == [b"committed"]


@pytest.mark.interop("aiokafka", "transactions")
def test_aiokafka_transactions(shared_cluster: LocalCluster) -> None:
    topic = new_topic(shared_cluster, "m-aio-txn")

    async def run() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=shared_cluster.bootstrap_servers,
            transactional_id=unique_topic("m-aio-txn"),
        )
        try:
            await asyncio.wait_for(producer.start(), 15)
            async with producer.transaction():
                await producer.send_and_wait(topic, value=b"committed", partition=0)
        finally:
            await producer.stop()

    asyncio.run(run())
    assert [v for _, v, _, _ in read_back(shared_cluster, topic, 1)] == [b"committed"]


@pytest.mark.skipif(NO_KCAT, reason="kcat is not installed")
@pytest.mark.parametrize(
    "new",
    [
        pytest.param(False, marks=pytest.mark.interop("kcat", "idempotence"), id="kcat"),
        pytest.param(True, marks=pytest.mark.interop("kcat-new", "idempotence"), id="kcat-new"),
    ],
)
def test_kcat_idempotence(shared_cluster: LocalCluster, new: bool) -> None:
    topic = new_topic(shared_cluster, "m-kcat-idem")
    kcat(shared_cluster, new, "-P", "-t", topic, "-p", "0", "-X", "enable.idempotence=true",
         "-X", "message.timeout.ms=10000", stdin=b"one\ntwo\n")  # fmt: skip
    got = read_back(shared_cluster, topic, 2)
    assert [v for _, v, _, _ in got] == [b"one", b"two"]


@pytest.mark.interop("kafkajs", "transactions")
@pytest.mark.skipif(NO_KAFKAJS, reason="KafkaJS is not installed")
def test_kafkajs_transactions(shared_cluster: LocalCluster) -> None:
    """KafkaJS commits two transactions and aborts one between them, the last with its
    group's offset: librdkafka with read_committed reads only the committed records,
    read_uncommitted reads the aborted one too (no control record reaches either), and the
    group's offset is the one the last transaction sent."""
    topic = new_topic(shared_cluster, "m-js-txn")
    group = f"{topic}-group"
    kafkajs("transaction", shared_cluster, topic, group)
    assert read_to_end(shared_cluster, topic, "read_committed") == [b"c1", b"c2", b"c3"]
    everything = read_to_end(shared_cluster, topic, "read_uncommitted")
    assert everything == [b"c1", b"c2", b"aborted", b"c3"]
    reader = Consumer({"bootstrap.servers": shared_cluster.bootstrap_servers, "group.id": group})
    try:
        [offset] = reader.committed([TopicPartition(topic, 0)], timeout=30)
    finally:
        reader.close()
    assert offset.offset == 3


NOT_CLIENT_FEATURES = [
    ("kcat", "admin", "kcat has no admin operations"),
    ("kcat-new", "admin", "kcat has no admin operations"),
    ("kcat", "static-coop", "kcat has no static membership option"),
    ("kcat-new", "static-coop", "kcat has no static membership option"),
    ("kcat", "transactions", "kcat produces without transactions"),
    ("kcat-new", "transactions", "kcat produces without transactions"),
    ("kafkajs", "static-coop", "KafkaJS has neither static membership nor cooperative"),
]


@pytest.mark.parametrize(
    "reason",
    [
        pytest.param(reason, marks=pytest.mark.interop(client, column), id=f"{client}-{column}")
        for client, column, reason in NOT_CLIENT_FEATURES
    ],
)
def test_not_a_client_feature(reason: str) -> None:
    pytest.skip(reason)
