"""The blocking Consumer against scripted brokers: what comes back and in what order,
positions, seeks, pause/resume, lookups by time, prefetching, read_committed, errors."""

from __future__ import annotations

import re
import threading
import time
from typing import Any

import pytest
from client_scripted import ScriptedCluster, fill, scripted_cluster, wait_for

from gregor.client.consumer import Consumer, ConsumerRecord
from gregor.client.runtime import ClientClosedError
from gregor.client.types import OffsetAndTimestamp, TopicPartition
from gregor.protocol.apis.fetch import FetchableTopicResponse, FetchResponse, PartitionData
from gregor.protocol.errors import ErrorCode, OffsetOutOfRangeError, TopicAuthorizationFailedError
from gregor.protocol.records import BatchBuilder, ControlType, TimestampType, build_control_batch

T0 = TopicPartition("t", 0)


def consumer(cluster: ScriptedCluster, **config: Any) -> Consumer:
    return Consumer(
        {"bootstrap.servers": cluster.bootstrap, "auto.offset.reset": "earliest", **config}
    )


def read(c: Consumer, count: int, timeout: float = 10) -> list[ConsumerRecord]:
    out: list[ConsumerRecord] = []
    deadline = time.monotonic() + timeout
    while len(out) < count and time.monotonic() < deadline:
        out += c.consume(count - len(out), timeout=0.5)
    return out


def test_assigned_partitions_come_back_whole_and_in_order(cluster: ScriptedCluster) -> None:
    cluster.create_topic("t", 2)
    fill(cluster, "t", 0, 35)
    fill(cluster, "t", 1, 20, start=100)
    with consumer(cluster, **{"max.poll.records": 7}) as c:
        c.assign([T0, ("t", 1)])
        records = read(c, 55)
        assert len(records) == 55
        by_partition: dict[int, list[ConsumerRecord]] = {0: [], 1: []}
        for r in records:
            by_partition[r.partition].append(r)
        assert [r.offset for r in by_partition[0]] == list(range(35))
        assert [r.value for r in by_partition[1]] == [b"%d" % n for n in range(100, 120)]
        first = by_partition[0][3]
        assert (first.key, first.headers, first.timestamp) == (
            b"k3",
            (("n", b"3"),),
            1_700_000_000_003,
        )
        assert first.timestamp_type is TimestampType.CREATE_TIME
        assert c.position(T0) == 35 and c.position(TopicPartition("t", 1)) == 20
        assert c.consume(10, timeout=0.2) == []
        assert c.assignment() == [T0, TopicPartition("t", 1)]


def test_poll_one_at_a_time_and_iteration(cluster: ScriptedCluster) -> None:
    cluster.create_topic("t", 1)
    fill(cluster, "t", 0, 5)
    with consumer(cluster) as c:
        c.assign([T0])
        first = c.poll(10)
        assert first is not None and first.offset == 0
        assert c.position(T0) == 1  # handed out is consumed; nothing more
        rest = []
        for record in c:
            rest.append(record.offset)
            if len(rest) == 4:
                break
        assert rest == [1, 2, 3, 4]
        assert c.poll(0.1) is None


def test_latest_reset_starts_at_the_end(cluster: ScriptedCluster) -> None:
    cluster.create_topic("t", 1)
    fill(cluster, "t", 0, 10)
    with consumer(cluster, **{"auto.offset.reset": "latest"}) as c:
        c.assign([T0])
        assert c.position(T0) == 10
        fill(cluster, "t", 0, 3, start=10)
        assert [r.offset for r in read(c, 3)] == [10, 11, 12]


def test_seeks(cluster: ScriptedCluster) -> None:
    cluster.create_topic("t", 1)
    fill(cluster, "t", 0, 30)
    with consumer(cluster) as c:
        c.assign([T0])
        assert len(read(c, 30)) == 30
        c.seek(T0, 12)
        assert [r.offset for r in read(c, 3)][:3] == [12, 13, 14]
        c.seek_to_beginning(T0)
        assert read(c, 1)[0].offset == 0
        c.seek_to_end()
        assert c.position(T0) == 30
        assert c.consume(5, timeout=0.2) == []
        c.seek(T0, 25)
        assert [r.offset for r in read(c, 5)] == [25, 26, 27, 28, 29]


def test_a_seek_while_data_is_prefetched_drops_the_stale_data(cluster: ScriptedCluster) -> None:
    cluster.create_topic("t", 1)
    fill(cluster, "t", 0, 100, per_batch=5)
    with consumer(cluster, **{"max.partition.fetch.bytes": 300}) as c:
        c.assign([T0])
        assert [r.offset for r in c.consume(3, timeout=10)] == [0, 1, 2]
        wait_for(lambda: len(cluster.sent("Fetch")) >= 2, what="prefetch")
        c.seek(T0, 50)
        assert [r.offset for r in read(c, 4)] == [50, 51, 52, 53]


def test_fetches_stay_in_flight_while_the_application_works(cluster: ScriptedCluster) -> None:
    cluster.create_topic("t", 1)
    fill(cluster, "t", 0, 50, per_batch=5)
    with consumer(cluster, **{"max.partition.fetch.bytes": 200}) as c:
        c.assign([T0])
        assert len(c.consume(1, timeout=10)) == 1
        # Without consuming anything more, the fetcher asked again (prefetch depth 2).
        wait_for(lambda: len(cluster.sent("Fetch")) >= 2, what="a prefetch")
        offsets = [req.topics[0].partitions[0].fetch_offset for _, _, req in cluster.sent("Fetch")]
        assert offsets[0] == 0 and offsets[1] > 0
        assert [r.offset for r in read(c, 49)] == list(range(1, 50))


def test_pause_and_resume(cluster: ScriptedCluster) -> None:
    cluster.create_topic("t", 2)
    fill(cluster, "t", 0, 10)
    fill(cluster, "t", 1, 10)
    t1 = TopicPartition("t", 1)
    with consumer(cluster) as c:
        c.assign([T0, t1])
        c.pause(t1)
        assert c.paused() == {t1}
        records = read(c, 20, timeout=2)
        assert {r.partition for r in records} == {0} and len(records) == 10
        c.resume(t1)
        assert [r.offset for r in read(c, 10)] == list(range(10))


def test_offsets_for_times_and_log_ends(cluster: ScriptedCluster) -> None:
    cluster.create_topic("t", 1)
    fill(cluster, "t", 0, 20, timestamp=1_000)
    with consumer(cluster) as c:
        found = c.offsets_for_times({T0: 1_007})
        assert found == {T0: OffsetAndTimestamp(7, 1_007, 0)}
        assert c.offsets_for_times({T0: 99_999}) == {T0: None}
        assert c.beginning_offsets([T0]) == {T0: 0}
        assert c.end_offsets([T0]) == {T0: 20}
        assert c.partitions_for("t") == [0]
        assert c.list_topics()["t"] == [0]


def test_out_of_range_resets_or_raises(cluster: ScriptedCluster) -> None:
    cluster.create_topic("t", 1)
    fill(cluster, "t", 0, 10)
    with consumer(cluster) as c:
        c.assign([T0])
        c.seek(T0, 500)
        assert read(c, 1)[0].offset == 0  # earliest
    with consumer(cluster, **{"auto.offset.reset": "none"}) as c:
        c.assign([T0])
        with pytest.raises(OffsetOutOfRangeError, match="no committed offset"):
            c.poll(1)
        c.seek(T0, 500)
        with pytest.raises(OffsetOutOfRangeError, match=r"offset 500 of t-0 is out of range"):
            read(c, 1, timeout=5)


def test_fetch_errors_surface_with_context(cluster: ScriptedCluster) -> None:
    cluster.create_topic("t", 1)
    fill(cluster, "t", 0, 10)

    def deny(broker: int, request: Any, version: int) -> Any:
        return FetchResponse(
            responses=[
                FetchableTopicResponse(
                    topic="t",
                    partitions=[
                        PartitionData(
                            partition_index=0, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED
                        )
                    ],
                )
            ]
        )

    cluster.hooks[1] = deny
    with consumer(cluster) as c:
        c.assign([T0])
        with pytest.raises(
            TopicAuthorizationFailedError, match=r"fetching t-0 from broker 0 \(127\.0\.0\.1:\d+\)"
        ):
            read(c, 1, timeout=5)


def test_a_leader_that_moves_leaves_no_gap() -> None:
    with scripted_cluster(2) as cluster:
        cluster.create_topic("t", 1, leaders=[0])
        fill(cluster, "t", 0, 40)
        with consumer(cluster, **{"max.partition.fetch.bytes": 200}) as c:
            c.assign([T0])
            got = [r.offset for r in read(c, 15)]
            cluster.move_leader("t", 0, 1)
            fill(cluster, "t", 0, 20, start=40)
            got += [r.offset for r in read(c, 45)]
        assert got == list(range(60))
        assert any(b == 1 for b, _, _ in cluster.sent("Fetch"))


def test_read_committed_skips_aborted_transactions(cluster: ScriptedCluster) -> None:
    cluster.create_topic("t", 1)

    def txn(pid: int, values: list[bytes]) -> bytes:
        builder = BatchBuilder(
            producer_id=pid, producer_epoch=0, base_sequence=0, is_transactional=True
        )
        for v in values:
            builder.append(v)
        return builder.build()

    def marker(pid: int, kind: ControlType) -> bytes:
        return build_control_batch(kind, producer_id=pid, producer_epoch=0, coordinator_epoch=1)

    cluster.append("t", 0, txn(7, [b"a1", b"a2"]))  # 0-1, aborted
    cluster.append("t", 0, txn(8, [b"c1"]))  # 2, committed
    cluster.append("t", 0, marker(7, ControlType.ABORT))  # 3
    cluster.append("t", 0, marker(8, ControlType.COMMIT))  # 4
    fill(cluster, "t", 0, 2, start=5)  # 5-6, not transactional
    with consumer(cluster, **{"isolation.level": "read_committed"}) as c:
        c.assign([T0])
        assert [r.value for r in read(c, 3)] == [b"c1", b"5", b"6"]
        assert c.position(T0) == 7
    with consumer(cluster) as c:  # read_uncommitted: everything but the markers
        c.assign([T0])
        assert [r.value for r in read(c, 5)] == [b"a1", b"a2", b"c1", b"5", b"6"]


def test_deserializers(cluster: ScriptedCluster) -> None:
    cluster.create_topic("t", 1)
    builder = BatchBuilder()
    builder.append(b'{"n": 1}', key=b"id")
    cluster.append("t", 0, builder.build())
    with consumer(cluster, **{"key.deserializer": "str", "value.deserializer": "json"}) as c:
        c.assign([T0])
        record = read(c, 1)[0]
        assert (record.key, record.value) == ("id", {"n": 1})


def test_subscribe_needs_a_group_and_modes_do_not_mix(cluster: ScriptedCluster) -> None:
    from gregor.client.consumer.subscription import SubscriptionError
    from gregor.protocol.errors import InvalidGroupIdError

    with consumer(cluster) as c, pytest.raises(InvalidGroupIdError, match=r"needs a group\.id"):
        c.subscribe(["t"])
    with consumer(cluster, **{"group.id": "g"}) as c:
        c.assign([T0])
        with pytest.raises(SubscriptionError, match="subscribe\\(\\) after assign\\(\\)"):
            c.subscribe(["t"])
        c.unsubscribe()
        c.subscribe(re.compile("t.*"))
        assert c.subscription() == set()


@pytest.mark.parametrize("group", [None, "readers"], ids=["assigned", "in-a-group"])
def test_close_from_another_thread_ends_iteration(
    cluster: ScriptedCluster, group: str | None
) -> None:
    cluster.create_topic("t", 1)
    for attempt in range(3):  # the close meets the poll at a different step each time
        c = consumer(cluster, **({"group.id": f"{group}-{attempt}"} if group else {}))
        if group:
            c.subscribe(["t"])
        else:
            c.assign([T0])
        seen: list[int] = []
        errors: list[BaseException] = []

        def loop(c: Consumer = c, seen: list[int] = seen, errors: list[BaseException] = errors):
            try:
                seen.extend(record.offset for record in c)
            except BaseException as exc:  # what would otherwise die with the thread
                errors.append(exc)

        thread = threading.Thread(target=loop)
        thread.start()
        fill(cluster, "t", 0, 3, start=3 * attempt)
        wait_for(lambda seen=seen, n=3 * attempt + 3: len(seen) == n, what="the records")
        c.close()
        thread.join(10)
        assert not thread.is_alive()
        assert errors == []
        assert seen == list(range(3 * attempt + 3))
        with pytest.raises(ClientClosedError, match="the consumer is closed"):
            c.poll(0)
