"""gregor-mirror between two real clusters, read back with confluent-kafka (librdkafka).

- A->B: records land byte-identical in `A.<topic>` on B, same partition and order, with
  the source's topic configs; partitions and config changes on A follow; heartbeats flow.
- Failover: a group that committed on A resumes on B from the synced offsets, reading
  exactly the records after its commit, though B's offsets differ from A's.
- SIGKILL of the mirror while producing loses nothing, and translation stays exact; with
  exactly.once.support=enabled, a read_committed reader of B sees every record exactly once.
- SIGTERM while copying: exit 0 with every record on B covered by a sync; with B
  unreachable, at once; with records in flight to a hung B, after the grace, and a
  restart copies them.
- The target unreachable for 30 s: reported, retried, nothing lost.
- Active-active A<->B: each side ends with its topic and one copy of the other's, no loops.
- Prometheus: the served counters move by exactly the records copied.
- With `topics = .*`: a topic created on A while the mirror runs follows within a refresh
  round; A's internal topics never get a copy on B.
- Batch pass-through: each batch on B has its source batch's codec, records and compressed
  bytes.
"""

from __future__ import annotations

import os
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Any

import pytest
import trio
from client.test_batches import fetch_batches
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka import KafkaError as CKafkaError
from prometheus_client.parser import text_string_to_metric_families

from gregor.client import AdminClient, FetchedBatch
from gregor.client import TopicPartition as GTopicPartition
from gregor.client.admin import ConfigResource, ResourceType
from gregor.devcluster import LocalCluster
from gregor.devcluster.ports import free_port
from gregor.mirror import Checkpoint, Heartbeat, OffsetSync, translate_offsets
from gregor.protocol.errors import KafkaError
from gregor.protocol.records import BATCH_HEADER_SIZE, Compression
from gregor_testing.cluster import create_topic, partitions_of, wait_for, wait_for_topic
from gregor_testing.mirror import MirrorProcess
from gregor_testing.transactions import Transactions, values

Record = tuple[int, bytes | None, bytes | None, tuple[tuple[str, bytes], ...], int]


def produce(
    cluster: LocalCluster,
    topic: str,
    records: Sequence[tuple[int, bytes | None, bytes, list[tuple[str, bytes]], int]],
    codec: str = "none",
) -> None:
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap_servers, "compression.type": codec, "linger.ms": 5}
    )
    for partition, key, value, headers, timestamp in records:
        producer.produce(
            topic, value, key, partition=partition, headers=headers or None, timestamp=timestamp
        )
    assert producer.flush(60) == 0


def read(
    cluster: LocalCluster,
    topic: str,
    partitions: int,
    count: int,
    *,
    group: str | None = None,
    timeout: float = 90.0,
) -> dict[int, list[tuple[int, Record]]]:
    """`count` records of the topic, by partition as (offset, record): from the start, or
    with `group`, from its committed offsets (which must exist)."""
    wait_for_topic(cluster, topic, partitions, timeout=60, full_isr=False)
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": group or f"reader-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest" if group is None else "error",
            "isolation.level": "read_committed",  # an exactly-once copy's aborted records
        }
    )
    try:
        if group is None:
            consumer.assign([TopicPartition(topic, p, -2) for p in range(partitions)])
        else:
            consumer.subscribe([topic])
        out: dict[int, list[tuple[int, Record]]] = {p: [] for p in range(partitions)}
        seen = 0

        def done() -> bool:
            nonlocal seen
            for message in consumer.consume(1000, 0.5):
                assert message.error() is None, message.error()
                headers = tuple(message.headers() or ())
                record = (
                    message.partition(),
                    message.key(),
                    message.value(),
                    headers,
                    message.timestamp()[1],
                )
                out[message.partition()].append((message.offset(), record))
                seen += 1
            return seen >= count

        wait_for(done, timeout, f"{count} records of {topic} (have {seen})")
        return out
    finally:
        consumer.close()


def read_committed_to_end(
    cluster: LocalCluster, topic: str, partitions: int
) -> dict[int, list[Record]]:
    """Every committed record of the topic, by partition: read by librdkafka with
    read_committed until each partition reports its end (the last stable offset)."""
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": f"reader-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, -2) for p in range(partitions)])
        out: dict[int, list[Record]] = {p: [] for p in range(partitions)}
        at_end: set[int] = set()

        def done() -> bool:
            for message in consumer.consume(1000, 0.5):
                p = message.partition()
                error = message.error()
                if error is not None and error.code() == CKafkaError._PARTITION_EOF:
                    at_end.add(p)
                    continue
                assert error is None, error
                headers = tuple(message.headers() or ())
                out[p].append((p, message.key(), message.value(), headers, message.timestamp()[1]))
                at_end.discard(p)
            return len(at_end) == partitions

        wait_for(done, 120, f"the end of every partition of {topic}")
        return out
    finally:
        consumer.close()


def commit_on(cluster: LocalCluster, group: str, topic: str, offsets: dict[int, int]) -> None:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group})
    try:
        consumer.commit(
            offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False
        )
    finally:
        consumer.close()


def committed_on(cluster: LocalCluster, group: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group})
    try:
        answer = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], 10)
        return {tp.partition: tp.offset for tp in answer if tp.offset >= 0}
    finally:
        consumer.close()


def admin(cluster: LocalCluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.bootstrap_servers})


def topic_config(cluster: LocalCluster, topic: str) -> dict[str, str | None]:
    with admin(cluster) as client:
        resource = ConfigResource(ResourceType.TOPIC, topic)
        return {k: e.value for k, e in client.describe_configs([resource])[resource].items()}


def log_end(cluster: LocalCluster, topic: str, partitions: int) -> int:
    """The sum of the topic's log end offsets (0 while it does not exist)."""
    try:
        with admin(cluster) as client:
            ends = client.list_offsets(
                {GTopicPartition(topic, p): "latest" for p in range(partitions)}
            )
    except KafkaError:
        return 0
    return sum(end.offset for end in ends.values() if end is not None)


def topics_of(cluster: LocalCluster) -> set[str]:
    with admin(cluster) as client:
        return set(client.list_topics())


def records(count: int, partitions: int, tag: str) -> list[Any]:
    base = 1_700_000_000_000
    return [
        (
            i % partitions,
            None if i % 7 == 0 else f"k{i}".encode(),
            f"{tag}-{i}".encode() * (1 + i % 5),
            [("seq", str(i).encode()), ("tag", tag.encode())] if i % 3 else [],
            base + i,
        )
        for i in range(count)
    ]


def strip(by_partition: dict[int, list[tuple[int, Record]]]) -> dict[int, list[Record]]:
    return {p: [r for _, r in rs] for p, rs in by_partition.items()}


def test_a_to_b_keeps_records_configs_and_partitions(
    cluster_a: LocalCluster, cluster_b: LocalCluster, mirror_factory: Callable[..., MirrorProcess]
) -> None:
    topic = f"orders-{uuid.uuid4().hex[:6]}"
    started_ms = int(time.time() * 1000)
    create_topic(cluster_a, topic, 3, 2, configs={"retention.ms": "86400000"})
    sent = records(600, 3, "a")
    for i, codec in enumerate(["none", "gzip", "snappy", "lz4", "zstd", "lz4"]):
        produce(cluster_a, topic, sent[i * 100 : (i + 1) * 100], codec)
    mirror_factory({"A->B.enabled": "true", "A->B.topics": f"{topic}"})

    remote = f"A.{topic}"
    source = strip(read(cluster_a, topic, 3, len(sent)))
    copied = strip(read(cluster_b, remote, 3, len(sent)))
    assert copied == source  # keys, values, headers, timestamps, partitions, order
    assert topic_config(cluster_b, remote)["retention.ms"] == "86400000"

    # A config change and new partitions on A follow to B.
    with admin(cluster_a) as client:
        client.alter_configs(
            {ConfigResource(ResourceType.TOPIC, topic): {"retention.ms": "7200000"}}
        )
        client.create_partitions({topic: 4})
    wait_for(
        lambda: topic_config(cluster_b, remote)["retention.ms"] == "7200000", 60, "config sync"
    )
    wait_for(lambda: len(partitions_of(cluster_b, remote)) == 4, 60, "the new partition on B")
    late = [(3, b"late", b"in partition 3", [], 1_700_000_001_000)]
    produce(cluster_a, topic, late)
    assert strip(read(cluster_b, remote, 4, len(sent) + 1))[3] == [
        (3, b"late", b"in partition 3", (), 1_700_000_001_000)
    ]

    # Heartbeats from A->B in B's `heartbeats`, in MM2's format.
    beats = read(cluster_b, "heartbeats", 1, 1)[0]
    beat = Heartbeat.decode(beats[0][1][1] or b"", beats[0][1][2] or b"")
    assert (beat.source, beat.target) == ("A", "B")
    assert started_ms <= beat.timestamp <= time.time() * 1000  # when it was emitted
    # Offset syncs on A in MM2's format, naming A's partitions.
    syncs = read(cluster_a, "mm2-offset-syncs.B.internal", 1, 1)[0]
    decoded = [OffsetSync.decode(r[1] or b"", r[2] or b"") for _, r in syncs]
    assert any(s.partition.topic == topic for s in decoded)


def test_group_fails_over_to_b_without_gap_or_reread(
    cluster_a: LocalCluster, cluster_b: LocalCluster, mirror_factory: Callable[..., MirrorProcess]
) -> None:
    topic = f"billing-{uuid.uuid4().hex[:6]}"
    group = f"billing-{uuid.uuid4().hex[:6]}"
    create_topic(cluster_a, topic, 2, 2)
    old = records(100, 2, "old")
    produce(cluster_a, topic, old, "lz4")
    # Records gone from A before the mirror starts: B's offsets start at 0, A's at 25.
    with admin(cluster_a) as client:
        client.delete_records({GTopicPartition(topic, p): 25 for p in range(2)})
    produce(cluster_a, topic, records(300, 2, "new"), "zstd")
    source = read(cluster_a, topic, 2, 350)
    # The group read some of each partition on A and committed.
    commits = {0: 25 + 40, 1: 25 + 111}
    commit_on(cluster_a, group, topic, commits)
    mirror = mirror_factory({"A->B.enabled": "true", "A->B.topics": topic, "A->B.groups": group})

    remote = f"A.{topic}"
    expected = {p: 40 if p == 0 else 111 for p in range(2)}  # translated: B starts at 0
    wait_for(
        lambda: committed_on(cluster_b, group, remote, 2) == expected, 90, "group offsets on B"
    )
    rest = {p: [r for o, r in rs if o >= commits[p]] for p, rs in source.items()}
    resumed = strip(read(cluster_b, remote, 2, sum(map(len, rest.values())), group=group))
    assert {p: [r[1:] for r in rs] for p, rs in resumed.items()} == {
        p: [r[1:] for r in rs] for p, rs in rest.items()
    }
    # The library function answers the same from B's checkpoints topic.
    translated = trio.run(
        translate_offsets, {"bootstrap.servers": cluster_b.bootstrap_servers}, "A", group
    )
    assert {tp.partition: m.offset for tp, m in translated.items()} == expected
    checkpoints = read(cluster_b, "A.checkpoints.internal", 1, 2)[0]
    mine = [Checkpoint.decode(r[1] or b"", r[2] or b"") for _, r in checkpoints]
    assert {
        (c.partition.partition, c.upstream_offset, c.offset) for c in mine if c.group == group
    } >= {
        (0, 65, 40),
        (1, 136, 111),
    }

    # While the group has a member on B, its offsets there are the member's: the newer
    # checkpoint is written, and the group is not synced until the member has left.
    member = Consumer({"bootstrap.servers": cluster_b.bootstrap_servers, "group.id": group,
                       "enable.auto.commit": False})  # fmt: skip
    try:
        member.subscribe([remote])
        wait_for(lambda: member.poll(0.2) is None and len(member.assignment()) == 2, 60,
                 "the member's assignment on B")  # fmt: skip
        member.commit(offsets=[TopicPartition(remote, 0, 45), TopicPartition(remote, 1, 115)],
                      asynchronous=False)  # fmt: skip
        commit_on(cluster_a, group, topic, {0: 25 + 60, 1: 25 + 120})
        newer = {0: 60, 1: 120}
        wait_for(
            lambda: {tp.partition: m.offset for tp, m in trio.run(
                translate_offsets, {"bootstrap.servers": cluster_b.bootstrap_servers}, "A", group
            ).items()} == newer, 60, "the newer checkpoint",
        )  # fmt: skip
        wait_for(lambda: f"group {group} has members on B" in mirror.log_tail(10**6), 30,
                 "the mirror to leave the group alone")  # fmt: skip
        assert committed_on(cluster_b, group, remote, 2) == {0: 45, 1: 115}
    finally:
        member.close()
    wait_for(lambda: committed_on(cluster_b, group, remote, 2) == newer, 60, "the sync")


def test_group_offsets_are_synced_without_checkpoints(
    cluster_a: LocalCluster, cluster_b: LocalCluster, mirror_factory: Callable[..., MirrorProcess]
) -> None:
    """emit.checkpoints.enabled=false, sync.group.offsets.enabled=true: the group's offsets
    arrive on B, and no checkpoint of the group is written."""
    topic = f"nockpt-{uuid.uuid4().hex[:6]}"
    group = f"nockpt-{uuid.uuid4().hex[:6]}"
    create_topic(cluster_a, topic, 1, 2)
    produce(cluster_a, topic, records(50, 1, "n"))
    commit_on(cluster_a, group, topic, {0: 20})
    mirror_factory({"A->B.enabled": "true", "A->B.topics": topic, "A->B.groups": group,
                    "emit.checkpoints.enabled": "false"})  # fmt: skip
    wait_for(lambda: committed_on(cluster_b, group, f"A.{topic}", 1) == {0: 20}, 90, "the sync")
    config = {"bootstrap.servers": cluster_b.bootstrap_servers}
    assert trio.run(translate_offsets, config, "A", group) == {}


# `nox -s mirror_faults` runs the kill test with 200,000 records.
KILL_RECORDS = int(os.environ.get("GREGOR_MIRROR_RECORDS", "20000"))
KILLS = int(os.environ.get("GREGOR_MIRROR_KILLS", "5"))


def feed(
    cluster_a: LocalCluster,
    cluster_b: LocalCluster,
    topic: str,
    sent: list[Any],
    failures: list[BaseException],
) -> threading.Thread:
    """Produce `sent` to A in steps of 500 from a thread, staying at most 3,000 records ahead
    of the copy on B, so that the mirror is busy copying whenever something happens to it."""

    def run() -> None:
        try:
            for i in range(0, len(sent), 500):
                wait_for(
                    lambda i=i: log_end(cluster_b, f"A.{topic}", 2) >= i - 3000, 300, "the copy"
                )
                produce(cluster_a, topic, sent[i : i + 500], "lz4")
        except BaseException as exc:
            failures.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def assert_all_copied(
    cluster_a: LocalCluster, cluster_b: LocalCluster, topic: str, count: int
) -> dict[int, list[Record]]:
    """Every record of A is on B, in order; a record may be there more than once (at least
    once): how many times is printed. Returns A's records."""
    remote = f"A.{topic}"
    source = strip(read(cluster_a, topic, 2, count))
    wait_for(lambda: log_end(cluster_b, remote, 2) >= count, 300, "the copy")
    copied: dict[int, list[Record]] = {}

    def complete() -> bool:
        copied.update(strip(read(cluster_b, remote, 2, log_end(cluster_b, remote, 2))))
        return all(list(dict.fromkeys(copied[p])) == source[p] for p in range(2))

    wait_for(complete, 300, "every record of A on B, in order")
    total = sum(map(len, copied.values()))
    print(f"{topic}: {count} records copied as {total}: {total - count} duplicates")
    return source


def assert_exactly_once(
    cluster_a: LocalCluster, cluster_b: LocalCluster, topic: str, count: int
) -> dict[int, list[Record]]:
    """Every record of A is on B exactly once, in order, for a read_committed reader.
    Returns A's records."""
    source = strip(read(cluster_a, topic, 2, count))
    copied: dict[int, list[Record]] = {}

    def complete() -> bool:
        copied.update(read_committed_to_end(cluster_b, f"A.{topic}", 2))
        return sum(map(len, copied.values())) >= count

    wait_for(complete, 300, "every record of A on B")
    assert copied == source
    offsets = log_end(cluster_b, f"A.{topic}", 2)
    print(
        f"{topic}: {count} records copied exactly once (B's log: {offsets} offsets, "
        "with aborted transactions and markers)"
    )
    return source


@pytest.mark.timeout(600 if KILL_RECORDS <= 20_000 else 3600)
@pytest.mark.parametrize("exactly_once", [False, True], ids=["at-least-once", "exactly-once"])
def test_sigkill_loses_nothing_and_translation_stays_exact(
    cluster_a: LocalCluster,
    cluster_b: LocalCluster,
    mirror_factory: Callable[..., MirrorProcess],
    exactly_once: bool,
) -> None:
    topic = f"crash-{uuid.uuid4().hex[:6]}"
    create_topic(cluster_a, topic, 2, 2)
    settings = {"A->B.enabled": "true", "A->B.topics": topic}
    if exactly_once:
        settings["exactly.once.support"] = "enabled"
    sent = records(KILL_RECORDS, 2, "c")
    remote = f"A.{topic}"
    failures: list[BaseException] = []
    producing = feed(cluster_a, cluster_b, topic, sent, failures)
    mirror = mirror_factory(settings)
    step = KILL_RECORDS // (KILLS + 2)
    for _ in range(KILLS):
        before = log_end(cluster_b, remote, 2)
        try:
            # More copies; or, the producer done first, B holding as many as A (its end counts
            # every record copied, and exactly once the markers and aborted ones too).
            wait_for(
                lambda b=before: (
                    bool(failures)
                    or log_end(cluster_b, remote, 2) > b + step
                    or (
                        not producing.is_alive()
                        and log_end(cluster_b, remote, 2) >= log_end(cluster_a, topic, 2)
                    )
                ),
                300,
                "more copies",
            )
        except TimeoutError as exc:  # a stalled copy, told from a source with nothing new
            ends = (log_end(cluster_a, topic, 2), before, log_end(cluster_b, remote, 2))
            raise AssertionError(
                f"{exc}: A has {ends[0]} records, B had {ends[1]}, has {ends[2]}"
            ) from exc
        assert not failures, f"producing to A failed: {failures[0]!r}"
        mirror.kill()
        mirror = mirror_factory(settings)
    producing.join(1200)
    assert not failures and not producing.is_alive()
    check = assert_exactly_once if exactly_once else assert_all_copied
    source = check(cluster_a, cluster_b, topic, len(sent))
    # A group that committed near the end of A resumes on B at exactly the next record.
    group = f"late-{uuid.uuid4().hex[:6]}"
    commits = {p: len(source[p]) - 100 for p in range(2)}
    commit_on(cluster_a, group, topic, commits)
    wait_for(lambda: len(committed_on(cluster_b, group, remote, 2)) == 2, 90, "group offsets")
    resumed = strip(read(cluster_b, remote, 2, 200, group=group))
    assert resumed == {p: source[p][-100:] for p in range(2)}


def test_sigterm_stops_cleanly_with_everything_delivered_synced(
    cluster_a: LocalCluster, cluster_b: LocalCluster, mirror_factory: Callable[..., MirrorProcess]
) -> None:
    """SIGTERM while copying: the mirror exits 0 after delivering what was in flight and
    writing its syncs, so every record on B is covered by a sync (a restart sends none of
    them again); a restarted mirror then copies the rest."""
    topic = f"sigterm-{uuid.uuid4().hex[:6]}"
    remote = f"A.{topic}"
    create_topic(cluster_a, topic, 2, 2)
    settings = {
        "A->B.enabled": "true",
        "A->B.topics": topic,
        # Time enough to drain on a loaded machine (the default 5 s might cut it short).
        "task.shutdown.graceful.timeout.ms": "120000",
    }
    sent = records(12_000, 2, "t")
    failures: list[BaseException] = []
    producing = feed(cluster_a, cluster_b, topic, sent, failures)
    mirror = mirror_factory(settings)
    wait_for(lambda: log_end(cluster_b, remote, 2) > 3000, 300, "copies under way")
    assert mirror.stop(150) == 0
    assert "gregor-mirror stopped: everything copied is synced" in mirror.log_tail(50_000)
    with admin(cluster_b) as client:
        ends = client.list_offsets({GTopicPartition(remote, p): "latest" for p in range(2)})
    syncs = read_committed_to_end(cluster_a, "mm2-offset-syncs.B.internal", 1)[0]
    last: dict[int, int] = {}
    for _, key, value, _, _ in syncs:
        sync = OffsetSync.decode(key or b"", value or b"")
        if sync.partition.topic == topic:
            last[sync.partition.partition] = sync.offset
    # The last sync of each partition names the last record on B: nothing unsynced.
    assert {p: last.get(p, -1) + 1 for p in range(2)} == {
        tp.partition: end.offset for tp, end in ends.items() if end is not None
    }
    mirror_factory(settings)
    producing.join(600)
    assert not failures and not producing.is_alive()
    assert_all_copied(cluster_a, cluster_b, topic, len(sent))
    # The restart began at the syncs, so it sent again none of what the first one copied.
    assert log_end(cluster_b, remote, 2) == len(sent)


def test_sigterm_with_the_target_unreachable_exits_at_once(
    cluster_a: LocalCluster, mirror_factory: Callable[..., MirrorProcess]
) -> None:
    """Nothing listens at B's address: the mirror reports it and keeps retrying; SIGTERM
    then stops it at once (nothing is in flight), exit 0, one line and no traceback."""
    topic = f"nowhere-{uuid.uuid4().hex[:6]}"
    create_topic(cluster_a, topic, 2, 2)
    produce(cluster_a, topic, records(100, 2, "n"))
    settings = {
        "A->B.enabled": "true",
        "A->B.topics": topic,
        "B.bootstrap.servers": f"127.0.0.1:{free_port()}",
        "B.admin.default.api.timeout.ms": "5000",  # reported within seconds, not a minute
    }
    mirror = mirror_factory(settings)
    wait_for(lambda: "A->B failed (" in mirror.log_tail(50_000), 60, "the failure reported")
    # (A generous bound: the admin clients' own timeout, what it waited before, is 60 s.)
    assert mirror.stop(30) == 0
    log = mirror.log_tail(50_000)
    assert "gregor-mirror stopped: everything copied is synced" in log
    assert "Traceback" not in log


def test_sigterm_with_records_stuck_in_flight_stops_within_the_grace(
    cluster_a: LocalCluster, cluster_b: LocalCluster, mirror_factory: Callable[..., MirrorProcess]
) -> None:
    """B's brokers hang (SIGSTOP) while the mirror holds records in flight to them: SIGTERM
    cuts the drain short after task.shutdown.graceful.timeout.ms, exit 0 with a line saying
    so and no traceback; nothing unsynced counts as copied, so a restarted mirror copies it
    once B answers again."""
    topic = f"stuck-{uuid.uuid4().hex[:6]}"
    remote = f"A.{topic}"
    create_topic(cluster_a, topic, 2, 2)
    sent = records(2000, 2, "s")
    produce(cluster_a, topic, sent[:1000], "lz4")
    port = free_port()
    settings = {
        "A->B.enabled": "true",
        "A->B.topics": topic,
        "metrics.prometheus.listener": f"http://127.0.0.1:{port}",
        "task.shutdown.graceful.timeout.ms": "1000",
    }
    mirror = mirror_factory(settings)
    wait_for(lambda: log_end(cluster_b, remote, 2) >= 1000, 90, "the first copies")
    name = "kafka_connect_mirror_mirrorsourceconnector_record_age_ms_count"

    def batches_read() -> float:
        samples = scrape(port)
        return sum(samples.get((name, remote, str(p)), 0) for p in range(2))

    before = batches_read()
    for broker in cluster_b.brokers:  # (briefly: B's ZooKeeper sessions last 6 s)
        broker.pause()
    try:
        produce(cluster_a, topic, sent[1000:], "lz4")
        wait_for(lambda: batches_read() > before, 60, "the mirror reading the new records")
        assert mirror.stop(60) == 0
    finally:
        for broker in cluster_b.brokers:
            broker.resume()
    log = mirror.log_tail(50_000)
    assert "gregor-mirror stopped: what was in flight and not yet synced" in log
    assert "Traceback" not in log
    mirror_factory(settings | {"metrics.prometheus.listener": f"http://127.0.0.1:{free_port()}"})
    assert_all_copied(cluster_a, cluster_b, topic, len(sent))


OUTAGE = 30.0  # seconds


def test_an_unreachable_target_is_reported_and_retried_and_nothing_is_lost(
    cluster_a: LocalCluster, cluster_b: LocalCluster, mirror_factory: Callable[..., MirrorProcess]
) -> None:
    """B goes down for 30 s while the mirror copies and A keeps receiving records: the
    mirror logs why it cannot deliver, keeps running and retrying, and once B is back every
    record gets there, in order."""
    topic = f"unreachable-{uuid.uuid4().hex[:6]}"
    create_topic(cluster_a, topic, 2, 2)
    settings = {
        "A->B.enabled": "true",
        "A->B.topics": topic,
        # Deliveries to B give up within seconds (not 2 minutes), so the outage shows.
        "B.producer.request.timeout.ms": "3000",
        "B.producer.delivery.timeout.ms": "6000",
    }
    sent = records(6000, 2, "u")
    produce(cluster_a, topic, sent[:2000], "lz4")
    mirror = mirror_factory(settings)
    wait_for(lambda: log_end(cluster_b, f"A.{topic}", 2) >= 2000, 90, "the first copies")
    cluster_b.stop()
    down = time.monotonic()
    try:
        produce(cluster_a, topic, sent[2000:4000], "lz4")
        wait_for(lambda: "A->B failed (" in mirror.log_tail(50_000), 120, "the failure reported")
        # The outage: B stays down for 30 s, the mirror retrying all along.
        wait_for(lambda: time.monotonic() - down >= OUTAGE, OUTAGE + 5, f"{OUTAGE} s down")
        assert mirror.process is not None and mirror.process.poll() is None
    finally:
        cluster_b.start()
    produce(cluster_a, topic, sent[4000:], "lz4")
    assert_all_copied(cluster_a, cluster_b, topic, len(sent))
    assert mirror.process is not None and mirror.process.poll() is None


def test_active_active_without_loops(
    cluster_a: LocalCluster, cluster_b: LocalCluster, mirror_factory: Callable[..., MirrorProcess]
) -> None:
    tag = uuid.uuid4().hex[:6]
    on_a, on_b = f"aa-{tag}-a", f"aa-{tag}-b"
    create_topic(cluster_a, on_a, 2, 2)
    create_topic(cluster_b, on_b, 2, 2)
    settings = {
        "A->B.enabled": "true",
        "B->A.enabled": "true",
        "topics": f".*aa-{tag}-.*",  # would match A.aa-...-a on B: loop prevention must say no
    }
    mirror_factory(settings, ["B"])
    mirror_factory(settings, ["A"])
    produce(cluster_a, on_a, records(300, 2, "a"))
    produce(cluster_b, on_b, records(200, 2, "b"))
    assert strip(read(cluster_b, f"A.{on_a}", 2, 300)) == strip(read(cluster_a, on_a, 2, 300))
    assert strip(read(cluster_a, f"B.{on_b}", 2, 200)) == strip(read(cluster_b, on_b, 2, 200))
    wait_for(
        lambda: "A.heartbeats" in topics_of(cluster_b) and "B.heartbeats" in topics_of(cluster_a),
        60,
        "remote heartbeats",
    )
    # Quiescence: a few refresh rounds later, still no copy of a copy.
    produce(cluster_a, on_a, records(10, 2, "a2"))
    read(cluster_b, f"A.{on_a}", 2, 310)
    for cluster, here, other in ((cluster_a, "A", "B"), (cluster_b, "B", "A")):
        names = topics_of(cluster)
        assert not [t for t in names if t.startswith(f"{here}.")], names
        assert not [t for t in names if t.startswith(f"{other}.{here}.")], names
        assert not [t for t in names if t.startswith(f"{other}.{other}.")], names
    assert {f"aa-{tag}-a", f"B.aa-{tag}-b"} <= topics_of(cluster_a)
    assert {f"aa-{tag}-b", f"A.aa-{tag}-a"} <= topics_of(cluster_b)


def test_identity_active_active_mirrors_one_way_topics_and_never_loops(
    cluster_a: LocalCluster, cluster_b: LocalCluster, mirror_factory: Callable[..., MirrorProcess]
) -> None:
    """IdentityReplicationPolicy keeps names, so A->B and B->A both mirroring `shared` would
    send its records round for ever (MM2 does): neither mirror copies it, and each says so.
    `orders` goes A->B only and `payments` B->A only, both under their own names."""
    tag = uuid.uuid4().hex[:6]
    shared, orders, payments = (f"id-{tag}-{name}" for name in ("shared", "orders", "payments"))
    for cluster, topic in ((cluster_a, shared), (cluster_b, shared), (cluster_a, orders),
                           (cluster_b, payments)):  # fmt: skip
        create_topic(cluster, topic, 2, 2)
    settings = {
        "replication.policy.class": "org.apache.kafka.connect.mirror.IdentityReplicationPolicy",
        "A->B.enabled": "true",
        "A->B.topics": f"id-{tag}-(shared|orders)",
        "B->A.enabled": "true",
        "B->A.topics": f"id-{tag}-(shared|payments)",
    }
    into_b, into_a = mirror_factory(settings, ["B"]), mirror_factory(settings, ["A"])
    produce(cluster_a, shared, records(30, 2, "a"))
    produce(cluster_b, shared, records(20, 2, "b"))
    produce(cluster_a, orders, records(300, 2, "o"))
    produce(cluster_b, payments, records(200, 2, "p"))
    assert strip(read(cluster_b, orders, 2, 300)) == strip(read(cluster_a, orders, 2, 300))
    assert strip(read(cluster_a, payments, 2, 200)) == strip(read(cluster_b, payments, 2, 200))
    for mirror, flow in ((into_b, "A->B"), (into_a, "B->A")):
        wait_for(
            lambda m=mirror, f=flow: f"{f}: topic {shared} is not mirrored" in m.log_tail(10**6),
            30,
            f"{flow}'s warning about {shared}",
        )
    # A refresh round later (every 2 s here) each side still holds only its own records.
    produce(cluster_a, orders, records(10, 2, "o2"))
    read(cluster_b, orders, 2, 310)
    assert (log_end(cluster_a, shared, 2), log_end(cluster_b, shared, 2)) == (30, 20)
    assert not {t for t in topics_of(cluster_b) if t.startswith(("A.id-", "B.id-"))}


pytestmark = pytest.mark.timeout(600)


def test_bad_input_is_reported_and_the_rest_copied(
    cluster_a: LocalCluster, cluster_b: LocalCluster, mirror_factory: Callable[..., MirrorProcess]
) -> None:
    """A record bigger than the target's max.message.bytes is reported and left out (the
    rest of its partition follows); a source topic deleted while mirrored is dropped from
    the flow, reported by name and not created again, and the other topics go on."""
    tag = uuid.uuid4().hex[:6]
    kept, doomed = f"bad-{tag}-kept", f"bad-{tag}-doomed"
    create_topic(cluster_a, kept, 1, 2)
    create_topic(cluster_a, doomed, 1, 2)
    produce(cluster_a, kept, [(0, None, b"first", [], 1)])
    produce(cluster_a, doomed, [(0, None, b"soon gone", [], 1)])
    # The remote topic is made beforehand with the small limit: set by AlterConfigs, the limit
    # reaches the leader through a /config/changes notification, which a record copied at
    # once can overtake (as in Kafka, where the change is applied when each broker sees it).
    create_topic(cluster_b, f"A.{kept}", 1, 2, configs={"max.message.bytes": "2000"})
    mirror = mirror_factory({"A->B.enabled": "true", "A->B.topics": f"bad-{tag}-.*"})
    read(cluster_b, f"A.{kept}", 1, 1)
    read(cluster_b, f"A.{doomed}", 1, 1)
    produce(
        cluster_a,
        kept,
        [(0, None, b"small", [], 2), (0, None, b"x" * 10_000, [], 3), (0, None, b"after", [], 4)],
    )
    copied = strip(read(cluster_b, f"A.{kept}", 1, 3))[0]
    assert [r[2] for r in copied] == [b"first", b"small", b"after"]
    wait_for(lambda: "at offset 2 not copied" in mirror.log_tail(20_000), 30, "the report")

    with admin(cluster_a) as client:
        client.delete_topics([doomed])
    wait_for(lambda: doomed not in topics_of(cluster_a), 60, "the topic deleted")
    wait_for(lambda: f"gone: {doomed}" in mirror.log_tail(20_000), 60, "the deletion reported")
    assert doomed not in topics_of(cluster_a)  # the mirror's reads did not create it again
    produce(cluster_a, kept, [(0, None, b"later", [], 5)])
    copied = strip(read(cluster_b, f"A.{kept}", 1, 4))[0]
    assert [r[2] for r in copied] == [b"first", b"small", b"after", b"later"]


def scrape(port: int) -> dict[tuple[str, str, str], float]:
    """The mirror's Prometheus samples, parsed by prometheus_client: (name, topic,
    partition) -> value ({} while it does not answer yet)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            text = answer.read().decode()
    except OSError:
        return {}
    return {
        (s.name, s.labels.get("topic", ""), s.labels.get("partition", "")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_metrics_are_served_for_prometheus(
    cluster_a: LocalCluster, cluster_b: LocalCluster, mirror_factory: Callable[..., MirrorProcess]
) -> None:
    """With metrics.prometheus.listener, the mirror serves MM2's metrics: the record counter
    of each partition moves by exactly the records copied, and the lag comes down to 0."""
    topic = f"metrics-{uuid.uuid4().hex[:6]}"
    create_topic(cluster_a, topic, 2, 2)
    port = free_port()
    mirror_factory(
        {
            "A->B.enabled": "true",
            "A->B.topics": topic,
            "metrics.prometheus.listener": f"http://127.0.0.1:{port}",
        }
    )
    wait_for(lambda: scrape(port), 60, "the exporter")
    sent = records(3000, 2, "m")
    produce(cluster_a, topic, sent, "lz4")
    read(cluster_b, f"A.{topic}", 2, len(sent))
    name = "kafka_connect_mirror_mirrorsourceconnector_"
    remote = f"A.{topic}"

    def counted() -> dict[str, float]:
        samples = scrape(port)
        return {
            what: sum(samples.get((name + what, remote, str(p)), 0) for p in range(2))
            for what in ("record_count_total", "byte_count_total", "record_lag")
        }

    wait_for(lambda: counted()["record_count_total"] == len(sent), 60, "the count")
    figures = counted()
    assert figures["byte_count_total"] > 0
    samples = scrape(port)
    for p in range(2):
        assert samples[name + "record_count_total", remote, str(p)] == len(sent) // 2
        assert samples[name + "replication_latency_ms_count", remote, str(p)] > 0
    wait_for(lambda: counted()["record_lag"] == 0, 60, "no lag")


def test_new_topics_follow_and_internal_topics_stay_home(
    cluster_a: LocalCluster, cluster_b: LocalCluster, mirror_factory: Callable[..., MirrorProcess]
) -> None:
    """A->B.topics = .*: a topic created on A while the mirror runs is mirrored within a
    refresh round (refresh.topics.interval.seconds = 2; with MM2's default of 600 s it could
    not be within the wait), its records byte-identical on B, in the same partitions. A's
    internal topics (Kafka's __consumer_offsets and __transaction_state, MM2's offset syncs,
    topics named *.internal, *-internal or __*) get no remote copy on B meanwhile."""
    tag = uuid.uuid4().hex[:6]
    plain, txn, late = f"plain-{tag}", f"txn-{tag}", f"late-{tag}"
    own_internal = [f"own-{tag}.internal", f"own-{tag}-internal", f"__own-{tag}"]
    create_topic(cluster_a, txn, 1, 2)
    for topic in (plain, *own_internal):
        create_topic(cluster_a, topic, 2, 2)
        produce(cluster_a, topic, records(100, 2, topic))
    # Kafka's own internal topics on A: a group's offsets, a committed transaction.
    commit_on(cluster_a, f"plain-{tag}", plain, {0: 10, 1: 10})
    committed = Transactions(cluster_a, txn).write(values(tag, 5), "commit")
    mirror = mirror_factory(
        {"A->B.enabled": "true", "A->B.topics": ".*", "refresh.topics.interval.seconds": "2"}
    )
    assert strip(read(cluster_b, f"A.{plain}", 2, 100)) == strip(read(cluster_a, plain, 2, 100))
    assert [r[2] for r in strip(read(cluster_b, f"A.{txn}", 1, 5))[0]] == committed

    create_topic(cluster_a, late, 3, 2)
    created = time.monotonic()
    sent = records(90, 3, late)
    produce(cluster_a, late, sent, "lz4")
    wait_for(lambda: f"A.{late}" in topics_of(cluster_b), 30, f"A.{late} on B")
    print(f"A.{late} on B {time.monotonic() - created:.1f} s after {late} was created on A")
    assert strip(read(cluster_b, f"A.{late}", 3, len(sent))) == strip(
        read(cluster_a, late, 3, len(sent))
    )
    wait_for(
        lambda: any(
            "now mirroring" in line and late in line for line in mirror.log_tail(10**6).splitlines()
        ),
        30,
        "the new topic in the mirror's log",
    )

    # Every refresh so far saw A's internal topics: none has a copy on B.
    on_a, on_b = topics_of(cluster_a), topics_of(cluster_b)
    internal = {t for t in on_a if t.startswith("__") or t.endswith("internal")}
    kafkas = {"__consumer_offsets", "__transaction_state", "mm2-offset-syncs.B.internal"}
    assert kafkas | set(own_internal) <= internal, on_a
    assert not {f"A.{t}" for t in internal} & on_b, on_b
    assert not [t for t in on_b if t.startswith("A.__")], on_b
    # The one `A.*internal` topic on B is the flow's checkpoints, written there (not a copy).
    assert {t for t in on_b if t.startswith("A.") and t.endswith("internal")} <= {
        "A.checkpoints.internal"
    }, on_b
    assert {f"A.{plain}", f"A.{txn}", f"A.{late}"} <= on_b


def by_partition(batches: list[FetchedBatch]) -> dict[int, list[FetchedBatch]]:
    """The batches of each partition, in offset order."""
    out: dict[int, list[FetchedBatch]] = {}
    for batch in sorted(batches, key=attrgetter("partition", "base_offset")):
        out.setdefault(batch.partition, []).append(batch)
    return out


def test_batches_pass_through_compressed_as_they_are(
    cluster_a: LocalCluster, cluster_b: LocalCluster, mirror_factory: Callable[..., MirrorProcess]
) -> None:
    """lz4 and zstd batches of many records each land on B batch for batch: at the same
    offsets, with the same codec, record count, offset deltas and timestamps, and the
    records section (the compressed bytes after the 61-byte header) byte for byte the same:
    the mirror neither decompresses, recompresses nor re-batches."""
    topic = f"batches-{uuid.uuid4().hex[:6]}"
    remote = f"A.{topic}"
    create_topic(cluster_a, topic, 2, 2)
    sent = records(1600, 2, "b")
    for i, start in enumerate(range(0, len(sent), 200)):
        produce(cluster_a, topic, sent[start : start + 200], ("lz4", "zstd")[i % 2])
    mirror_factory({"A->B.enabled": "true", "A->B.topics": topic})
    assert strip(read(cluster_b, remote, 2, len(sent))) == strip(
        read(cluster_a, topic, 2, len(sent))
    )
    source = by_partition(trio.run(fetch_batches, cluster_a, topic, 2, len(sent)))
    copied = by_partition(trio.run(fetch_batches, cluster_b, remote, 2, len(sent)))
    several = [b.header.compression for bs in source.values() for b in bs if b.records_count > 1]
    assert several.count(Compression.LZ4) >= 4 and several.count(Compression.ZSTD) >= 4, several

    def header(b: FetchedBatch) -> tuple[object, ...]:
        h = b.header
        fields = (h.base_offset, h.compression, h.records_count, h.last_offset_delta)
        return (*fields, h.timestamp_type, h.base_timestamp, h.max_timestamp)

    for p in range(2):
        assert [header(b) for b in copied[p]] == [header(b) for b in source[p]]
        for here, there in zip(source[p], copied[p], strict=True):
            assert bytes(there.data[BATCH_HEADER_SIZE:]) == bytes(here.data[BATCH_HEADER_SIZE:])
