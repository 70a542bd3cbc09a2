"""The data-plane APIs on the wire, against a real cluster: ListOffsets, OffsetForLeaderEpoch,
DeleteRecords, Fetch (long poll, byte limits, old message formats), Produce (acks, errors,
old message formats), Metadata (auto-creation) and DescribeCluster."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import trio

from gregor.devcluster import LocalCluster
from gregor.devcluster import create_topic as devcluster_create_topic
from gregor.protocol.apis.delete_records import (
    DeleteRecordsPartition,
    DeleteRecordsRequest,
    DeleteRecordsTopic,
)
from gregor.protocol.apis.describe_cluster import DescribeClusterRequest
from gregor.protocol.apis.fetch import FetchPartition, FetchRequest, FetchTopic
from gregor.protocol.apis.list_offsets import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from gregor.protocol.apis.metadata import MetadataRequest, MetadataRequestTopic
from gregor.protocol.apis.offset_for_leader_epoch import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderPartition,
    OffsetForLeaderTopic,
)
from gregor.protocol.apis.produce import PartitionProduceData, ProduceRequest, TopicProduceData
from gregor.protocol.errors import ErrorCode
from gregor.protocol.framing import decode_response
from gregor.protocol.legacy import MessageSetBuilder
from gregor.protocol.records import BatchBuilder, iter_batches
from gregor_testing import prometheus
from gregor_testing.cluster import (
    WireClient,
    consumer_fetch,
    create_topic,
    leader_of,
    log_mark,
    partitions_of,
    unique_topic,
    wait_for,
    wait_for_log,
)

T0 = 1_700_000_000_000


def batch(values: list[bytes], timestamps: list[int] | None = None) -> bytes:
    builder = BatchBuilder()
    for i, value in enumerate(values):
        builder.append(value, key=b"k", timestamp=None if timestamps is None else timestamps[i])
    return builder.build()


def produce(
    client: WireClient,
    topic: str,
    records: bytes,
    partition: int = 0,
    acks: int = -1,
    version: int = 9,
) -> Any:
    request = ProduceRequest(
        acks=acks,
        timeout_ms=10_000,
        topic_data=[TopicProduceData(topic, [PartitionProduceData(partition, records)])],
    )
    if acks == 0:
        client.send(request, version)
        return None
    return client.request(request, version).responses[0].partition_responses[0]


def list_offset(
    client: WireClient,
    topic: str,
    timestamp: int,
    version: int = 7,
    replica_id: int = -1,
    current_epoch: int = -1,
) -> tuple[int, int, int, int]:
    """(error, offset, timestamp, leader epoch)"""
    request = ListOffsetsRequest(
        replica_id=replica_id,
        topics=[ListOffsetsTopic(topic, [ListOffsetsPartition(0, current_epoch, timestamp)])],
    )
    answer = client.request(request, version).topics[0].partitions[0]
    return answer.error_code, answer.offset, answer.timestamp, answer.leader_epoch


def fetch(
    client: WireClient,
    topic: str,
    offset: int,
    *,
    version: int = 11,
    partition_max_bytes: int = 1 << 20,
    max_bytes: int = 50 << 20,
    max_wait_ms: int = 0,
    min_bytes: int = 1,
    replica_id: int = -1,
    partitions: tuple[int, ...] = (0,),
) -> list[Any]:
    request = FetchRequest(
        replica_id=replica_id,
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        topics=[
            FetchTopic(
                topic=topic,
                partitions=[
                    FetchPartition(
                        partition=p, fetch_offset=offset, partition_max_bytes=partition_max_bytes
                    )
                    for p in partitions
                ],
            )
        ],
    )
    return list(client.request(request, version).responses[0].partitions)


def offsets_and_values(records: object) -> list[tuple[int, bytes | None]]:
    assert isinstance(records, bytes | bytearray | memoryview)
    return [(r.offset, r.value) for b in iter_batches(records) for r in b]


@pytest.fixture(scope="module")
def timed_topic(shared_cluster: LocalCluster) -> str:
    """Ten records at T0 + 1000 * i (the fifth one the latest), replicated three times."""
    topic = unique_topic("timed")
    create_topic(shared_cluster, topic, partitions=1, replication_factor=3)
    stamps = [T0 + 1000 * i for i in range(10)]
    stamps[4] = T0 + 100_000
    with WireClient(leader_of(shared_cluster, topic, 0)) as client:
        assert (
            produce(
                client, topic, batch([f"v{i}".encode() for i in range(5)], stamps[:5])
            ).error_code
            == 0
        )
        assert (
            produce(
                client, topic, batch([f"v{i}".encode() for i in range(5, 10)], stamps[5:])
            ).error_code
            == 0
        )
    return topic


def test_list_offsets(shared_cluster: LocalCluster, timed_topic: str) -> None:
    with WireClient(leader_of(shared_cluster, timed_topic, 0)) as client:
        assert list_offset(client, timed_topic, -2) == (0, 0, -1, 0)
        assert list_offset(client, timed_topic, -1) == (0, 10, -1, 0)
        assert list_offset(client, timed_topic, T0 + 2500) == (0, 3, T0 + 3000, 0)
        assert list_offset(client, timed_topic, T0) == (0, 0, T0, 0)
        assert list_offset(client, timed_topic, -3) == (0, 4, T0 + 100_000, 0)
        assert list_offset(client, timed_topic, T0 + 200_000) == (0, -1, -1, -1)
        assert list_offset(client, timed_topic, -1, version=1)[:2] == (0, 10)
        # MAX_TIMESTAMP needs v7.
        assert list_offset(client, timed_topic, -3, version=6)[0] == ErrorCode.UNSUPPORTED_VERSION
        # KIP-320 fencing by leader epoch.
        assert (
            list_offset(client, timed_topic, -1, current_epoch=7)[0]
            == ErrorCode.UNKNOWN_LEADER_EPOCH
        )
    follower = next(
        b for b in shared_cluster.brokers if b is not leader_of(shared_cluster, timed_topic, 0)
    )
    with WireClient(follower) as client:
        assert list_offset(client, timed_topic, -1)[0] == ErrorCode.NOT_LEADER_OR_FOLLOWER
        # The debugging replica id may ask any replica.
        wait_for(
            lambda: list_offset(client, timed_topic, -1, replica_id=-2)[:2] == (0, 10),
            10,
            "replication",
        )


def test_offset_for_leader_epoch(shared_cluster: LocalCluster, timed_topic: str) -> None:
    def ask(client: WireClient, epoch: int, current: int = -1) -> tuple[int, int, int]:
        request = OffsetForLeaderEpochRequest(
            replica_id=-1,
            topics=[
                OffsetForLeaderTopic(timed_topic, [OffsetForLeaderPartition(0, current, epoch)])
            ],
        )
        answer = client.request(request, 4).topics[0].partitions[0]
        return answer.error_code, answer.leader_epoch, answer.end_offset

    with WireClient(leader_of(shared_cluster, timed_topic, 0)) as client:
        assert ask(client, 0) == (0, 0, 10)
        assert ask(client, 3) == (0, -1, -1)  # an epoch nobody led
        assert ask(client, 0, current=5)[0] == ErrorCode.UNKNOWN_LEADER_EPOCH


def test_delete_records_moves_the_log_start_on_every_replica(shared_cluster: LocalCluster) -> None:
    topic = unique_topic("delete-records")
    create_topic(shared_cluster, topic, partitions=1, replication_factor=3)
    leader = leader_of(shared_cluster, topic, 0)

    def delete(client: WireClient, offset: int) -> tuple[int, int]:
        request = DeleteRecordsRequest(
            topics=[DeleteRecordsTopic(topic, [DeleteRecordsPartition(0, offset)])],
            timeout_ms=10_000,
        )
        answer = client.request(request, 2).topics[0].partitions[0]
        return answer.error_code, answer.low_watermark

    with WireClient(leader) as client:
        for _ in range(10):
            assert produce(client, topic, batch([b"x"] * 10)).error_code == 0
        assert delete(client, 40) == (0, 40)
        assert list_offset(client, topic, -2)[:2] == (0, 40)
        (below,) = fetch(client, topic, 10)
        assert below.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
        (at,) = fetch(client, topic, 40)
        assert offsets_and_values(at.records)[0][0] == 40
        assert at.log_start_offset == 40
        assert delete(client, 1000)[0] == ErrorCode.OFFSET_OUT_OF_RANGE
        assert delete(client, -1) == (0, 100)  # -1: up to the high watermark
    for broker in shared_cluster.brokers:
        with WireClient(broker) as client:
            assert list_offset(client, topic, -2, replica_id=-2)[:2] == (0, 100)


def test_fetch_long_polls_until_data_arrives(cluster_factory: Callable[..., LocalCluster]) -> None:
    # One broker, so no follower's fetch waits in its purgatory: the purgatory size the broker
    # reports in its metrics line counts the long poll alone.
    cluster = cluster_factory(1, gregor_metrics_log_interval_ms=50)
    broker = cluster.broker(0)
    topic = unique_topic("long-poll")
    create_topic(cluster, topic)
    with WireClient(broker) as client:
        (empty,) = fetch(client, topic, 0, max_wait_ms=200)
        assert (empty.error_code, empty.high_watermark, len(empty.records)) == (0, 0, 0)

    answers: list[Any] = []

    async def poll_and_produce() -> None:
        async with trio.open_nursery() as nursery:

            def long_poll() -> None:
                # max_wait far beyond the socket's timeout: only the produce can answer it.
                with WireClient(broker, timeout=30) as client:
                    answers.extend(fetch(client, topic, 0, max_wait_ms=600_000))

            mark = log_mark(broker)
            nursery.start_soon(trio.to_thread.run_sync, long_poll)
            await trio.to_thread.run_sync(
                wait_for_log, broker, "fetch_purgatory_size=1;", mark, 30.0
            )
            with WireClient(broker) as client:
                assert produce(client, topic, batch([b"wake up"])).error_code == 0

    trio.run(poll_and_produce)
    (woken,) = answers
    assert offsets_and_values(woken.records) == [(0, b"wake up")]


def test_fetch_byte_limits(shared_cluster: LocalCluster) -> None:
    topic = unique_topic("limits")
    create_topic(shared_cluster, topic, partitions=2, replication_factor=1)
    value = b"v" * 10_000
    for partition in (0, 1):
        with WireClient(leader_of(shared_cluster, topic, partition)) as client:
            for _ in range(5):
                assert produce(client, topic, batch([value]), partition=partition).error_code == 0
    size = len(batch([value]))
    with WireClient(leader_of(shared_cluster, topic, 0)) as client:
        # Whole batches, at most the partition's limit.
        (limited,) = fetch(client, topic, 0, partition_max_bytes=int(size * 2.5))
        assert [o for o, _ in offsets_and_values(limited.records)] == [0, 1]
        assert len(limited.records) == 2 * size
        # A first batch larger than the limit still comes whole (KIP-74), from v3 on.
        (small,) = fetch(client, topic, 0, partition_max_bytes=100)
        assert [o for o, _ in offsets_and_values(small.records)] == [0]
    if leader_of(shared_cluster, topic, 0) is leader_of(shared_cluster, topic, 1):
        with WireClient(leader_of(shared_cluster, topic, 0)) as client:
            first, second = fetch(client, topic, 0, max_bytes=int(size * 3.5), partitions=(0, 1))
            assert len(first.records) + len(second.records) <= int(size * 3.5)


def test_consumers_read_to_the_high_watermark_followers_to_the_log_end(
    cluster_factory: Callable[..., LocalCluster],
) -> None:
    cluster = cluster_factory(
        3, zookeeper_session_timeout_ms=30_000, replica_lag_time_max_ms=30_000
    )
    topic = unique_topic("hw")
    create_topic(cluster, topic, partitions=1, replication_factor=3, assignment={0: [0, 1, 2]})
    leader, follower = cluster.broker(0), cluster.broker(2)
    with WireClient(leader) as client:
        assert produce(client, topic, batch([b"a", b"b"])).error_code == 0
        wait_for(lambda: list_offset(client, topic, -1)[1] == 2, 10, "the HW to reach 2")
        follower.pause()
        try:
            assert produce(client, topic, batch([b"c"]), acks=1).error_code == 0
            # The paused follower is still in the ISR: the HW stays, the log end moves.
            (consumer,) = fetch(client, topic, 0)
            assert consumer.high_watermark == 2
            assert offsets_and_values(consumer.records) == [(0, b"a"), (1, b"b")]
            assert list_offset(client, topic, -1)[1] == 2
            # A follower's fetch reads to the log end (here on the paused follower's behalf).
            (replica,) = fetch(client, topic, 2, version=11, replica_id=2)
            assert offsets_and_values(replica.records) == [(2, b"c")]
        finally:
            follower.resume()
        wait_for(lambda: list_offset(client, topic, -1)[1] == 3, 30, "the HW to reach 3")


def test_acks(shared_cluster: LocalCluster) -> None:
    topic = unique_topic("acks")
    create_topic(shared_cluster, topic, partitions=1, replication_factor=3)
    leader = leader_of(shared_cluster, topic, 0)
    follower = next(b for b in shared_cluster.brokers if b is not leader)
    with WireClient(leader) as client:
        assert produce(client, topic, batch([b"one"]), acks=0) is None
        answer = produce(client, topic, batch([b"two"]), acks=1)
        assert (answer.error_code, answer.base_offset) == (0, 1)
        answer = produce(client, topic, batch([b"three"]), acks=-1)
        assert (answer.error_code, answer.base_offset) == (0, 2)
        assert (
            produce(client, topic, batch([b"four"]), acks=2).error_code
            == ErrorCode.INVALID_REQUIRED_ACKS
        )
        # acks=0 that fails: no answer, the connection is closed instead.
        produce(client, topic, batch([b"nowhere"]), partition=7, acks=0)
        assert client.closed_by_broker()
    with WireClient(follower) as client:
        assert produce(client, topic, batch([b"x"])).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert (
            produce(client, "no-such-topic", batch([b"x"])).error_code
            == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        )


def test_old_message_formats_are_converted(shared_cluster: LocalCluster) -> None:
    topic = unique_topic("legacy")
    create_topic(shared_cluster, topic, partitions=1, replication_factor=1)
    with WireClient(leader_of(shared_cluster, topic, 0)) as client:
        for version, magic in ((0, 0), (1, 0), (2, 1)):
            builder = MessageSetBuilder(magic)
            for i in range(3):
                builder.append(
                    f"m{magic}-v{version}-{i}".encode(), b"key", timestamp=T0 + i if magic else None
                )
            answer = produce(client, topic, builder.build(), version=version)
            assert answer.error_code == 0
        stored = [f"m{m}-v{v}-{i}".encode() for v, m in ((0, 0), (1, 0), (2, 1)) for i in range(3)]
        (modern,) = fetch(client, topic, 0, version=11)
        batches = list(iter_batches(modern.records))
        assert {b.header.magic for b in batches} == {2}
        assert offsets_and_values(modern.records) == list(enumerate(stored))
        for version, magic in ((0, 0), (1, 0), (2, 1), (3, 1)):
            (old,) = fetch(client, topic, 0, version=version)
            batches = list(iter_batches(old.records))
            assert {b.header.magic for b in batches} == {magic}
            assert offsets_and_values(old.records) == list(enumerate(stored))


def test_metadata_auto_creates_topics(shared_cluster: LocalCluster) -> None:
    topic = unique_topic("auto")

    def metadata(client: WireClient, name: str, allow: bool) -> Any:
        request = MetadataRequest(
            topics=[MetadataRequestTopic(name=name)], allow_auto_topic_creation=allow
        )
        return client.request(request, 12).topics[0]

    with WireClient(shared_cluster.broker(1)) as client:
        assert metadata(client, topic, False).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        first = metadata(client, topic, True)
        assert first.error_code in (ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.NONE)
        wait_for(
            lambda: len(partitions_of(shared_cluster, topic, 1)) == 1, 30, "the auto-created topic"
        )
        created = metadata(client, topic, False)
        assert created.error_code == 0 and created.topic_id.int != 0
        invalid = metadata(client, "bad/name", True)
        assert invalid.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION


def test_describe_cluster(shared_cluster: LocalCluster) -> None:
    with WireClient(shared_cluster.broker(2)) as client:
        answer = client.request(DescribeClusterRequest(), 1)
        metadata = client.request(MetadataRequest(topics=[]), 9)
    assert answer.error_code == 0
    assert answer.cluster_id == metadata.cluster_id and len(answer.cluster_id) == 22
    assert answer.controller_id == metadata.controller_id >= 0
    assert sorted((b.broker_id, b.host, b.port) for b in answer.brokers) == [
        (b.broker_id, b.host, b.port) for b in shared_cluster.brokers
    ]


def test_answers_keep_request_order_while_an_earlier_one_waits(
    cluster_factory: Callable[..., LocalCluster],
) -> None:
    cluster = cluster_factory(2, replica_lag_time_max_ms=30_000)
    topic = unique_topic("pipelined")
    create_topic(cluster, topic, assignment={0: [0, 1]})
    leader, follower = cluster.broker(0), cluster.broker(1)
    follower.pause()
    try:
        with WireClient(leader) as client:
            waits = ProduceRequest(
                acks=-1,
                timeout_ms=1000,
                topic_data=[TopicProduceData(topic, [PartitionProduceData(0, batch([b"first"]))])],
            )
            goes_on = ProduceRequest(
                acks=1,
                timeout_ms=1000,
                topic_data=[TopicProduceData(topic, [PartitionProduceData(0, batch([b"second"]))])],
            )
            # Three requests pipelined on one connection: the acks=all one cannot be answered
            # before its timeout (the paused follower is in the ISR); the two after it are
            # handled meanwhile (the second record gets the next offset) and answered after it.
            client.send(waits, 9)
            client.send(goes_on, 9)
            client.send(MetadataRequest(topics=[]), 9)
            answers = []
            for api_key, version in ((0, 9), (0, 9), (3, 9)):
                size = int.from_bytes(client.exactly(4), "big")
                answers.append(decode_response(client.exactly(size), api_key, version))
    finally:
        follower.resume()
    assert [correlation for correlation, _ in answers] == [1, 2, 3]
    first = answers[0][1].responses[0].partition_responses[0]
    second = answers[1][1].responses[0].partition_responses[0]
    assert (first.error_code, second.error_code) == (ErrorCode.REQUEST_TIMED_OUT, 0)
    assert second.base_offset == 1  # appended while the first one was still waiting
    assert answers[2][1].controller_id >= 0


def test_a_waiting_answer_leaves_its_purgatory_when_its_connection_closes(
    cluster_factory: Callable[..., LocalCluster],
) -> None:
    """A Produce waiting for the ISR and a consumer's long poll, registered in the leader's
    purgatories, go from them as soon as their connection closes (not at their timeout);
    the append stays, as in Kafka: only the answer is dropped."""
    cluster = cluster_factory(
        2, replica_lag_time_max_ms=30_000, metrics_prometheus_listener="http://127.0.0.1:0"
    )
    topic = unique_topic("abandoned")
    create_topic(cluster, topic, assignment={0: [0, 1]})
    leader, follower = cluster.broker(0), cluster.broker(1)

    def waiting(operation: str) -> float:
        name = "kafka_server_delayedoperationpurgatory_purgatorysize"
        return prometheus.value(prometheus.scrape(leader), name, delayedOperation=operation)

    follower.pause()
    try:
        # The follower's last fetch expires (max.wait 500 ms): then only ours wait.
        wait_for(lambda: waiting("Fetch") == 0, 10, "the paused follower's fetch to end")
        with WireClient(leader) as producing, WireClient(leader) as polling:
            records = batch([b"abandoned"])
            producing.send(
                ProduceRequest(
                    acks=-1,
                    timeout_ms=120_000,
                    topic_data=[TopicProduceData(topic, [PartitionProduceData(0, records)])],
                ),
                9,
            )
            polling.send(consumer_fetch(topic, 1, max_wait_ms=120_000), 11)
            wait_for(
                lambda: (waiting("Produce"), waiting("Fetch")) == (1, 1),
                10,
                "the Produce and the Fetch to wait",
            )
        wait_for(
            lambda: (waiting("Produce"), waiting("Fetch")) == (0, 0),
            10,
            "both to leave their purgatories",
        )
    finally:
        follower.resume()
    with WireClient(leader) as client:

        def appended() -> list[tuple[int, bytes | None]]:
            answer = client.request(consumer_fetch(topic, 0), 11)
            return offsets_and_values(answer.responses[0].partitions[0].records or b"")

        wait_for(lambda: appended() != [], 30, "the record to be replicated")
        assert appended() == [(0, b"abandoned")]


def test_devcluster_creates_a_topic_with_the_replicas_it_is_given(
    shared_cluster: LocalCluster,
) -> None:
    """gregor.devcluster's create_topic (CreateTopics through the controller) with an
    explicit assignment, as bench_latency --one-leader uses it: every partition led by the
    first replica given, on every broker's metadata, with a full ISR."""
    topic = unique_topic("assigned")
    devcluster_create_topic(shared_cluster, topic, 3, 3, [[2, 0, 1]] * 3)
    for broker_id in range(3):
        found = partitions_of(shared_cluster, topic, broker_id)
        assert {p: (q.leader_id, list(q.replica_nodes)) for p, q in found.items()} == {
            p: (2, [2, 0, 1]) for p in range(3)
        }
        assert all(sorted(q.isr_nodes) == [0, 1, 2] for q in found.values())
