"""The blocking Producer against scripted brokers: what lands in the log, batching,
partitioning, retries in order, timeouts, errors with context, compression, callbacks."""

from __future__ import annotations

import itertools
import re
import threading
import time
from typing import Any, cast

import pytest
import trio
from client_scripted import (
    DEFAULT_VERSIONS,
    DROP,
    SILENT,
    TXN_VERSIONS,
    ScriptedCluster,
    scripted_cluster,
    wait_for,
)

from gregor.client.producer import Producer
from gregor.client.types import RecordMetadata
from gregor.protocol.apis.add_partitions_to_txn import AddPartitionsToTxnRequest
from gregor.protocol.apis.end_txn import EndTxnRequest
from gregor.protocol.apis.produce import (
    PartitionProduceResponse,
    ProduceRequest,
    ProduceResponse,
    TopicProduceResponse,
)
from gregor.protocol.errors import (
    ErrorCode,
    KafkaError,
    MessageTooLargeError,
    RequestTimedOutError,
    TopicAuthorizationFailedError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
)
from gregor.protocol.hashing import default_partition
from gregor.protocol.records import Compression, iter_batches


def producer(cluster: ScriptedCluster, **config: Any) -> Producer:
    return Producer({"bootstrap.servers": cluster.bootstrap, **config})


def test_records_land_byte_identical_with_offsets(cluster: ScriptedCluster) -> None:
    cluster.create_topic("t", 1)
    with producer(cluster) as p:
        futures = [
            p.produce(
                "t",
                b"v%d" % i,
                key=b"k%d" % i,
                headers=[("h", b"x"), ("n", None)],
                timestamp=1_700_000_000_000 + i,
                partition=0,
            )
            for i in range(5)
        ]
        futures.append(p.produce("t", None, key=b"tombstone", partition=0))
        assert p.flush(10) == 0
        metadata = [f.result(1) for f in futures]
    assert [m.offset for m in metadata] == list(range(6))
    assert metadata[0] == RecordMetadata("t", 0, 0, 1_700_000_000_000)
    records = cluster.records("t", 0)
    assert [(r.offset, r.key, r.value, r.timestamp, r.headers) for r in records[:5]] == [
        (i, b"k%d" % i, b"v%d" % i, 1_700_000_000_000 + i, (("h", b"x"), ("n", None)))
        for i in range(5)
    ]
    assert records[5].value is None and records[5].key == b"tombstone"


def test_keys_go_to_murmur2_partitions_and_keyless_records_stick(cluster: ScriptedCluster) -> None:
    cluster.create_topic("t", 6)
    with producer(cluster, **{"linger.ms": 50}) as p:
        for i in range(60):
            p.produce("t", b"v", key=b"key-%d" % i)
        keyless = [p.produce("t", b"x" * 10) for _ in range(20)]
        p.flush(10)
        assert len({f.result().partition for f in keyless}) == 1  # well under batch.size
    for partition in range(6):
        for record in cluster.records("t", partition):
            if record.key is not None:
                assert default_partition(record.key, 6) == partition


def test_linger_and_batch_size_shape_the_batches(cluster: ScriptedCluster) -> None:
    cluster.create_topic("t", 1)
    with producer(cluster, **{"linger.ms": 200, "batch.size": 1_000_000}) as p:
        for i in range(50):
            p.produce("t", b"%d" % i, partition=0)
        p.flush(10)
    assert [len(next(iter(iter_batches(b)))) for b in cluster.batches("t", 0)] == [50]
    cluster.create_topic("u", 1)
    with producer(cluster, **{"linger.ms": 200, "batch.size": 300}) as p:
        for _ in range(50):
            p.produce("u", b"x" * 20, partition=0)
        p.flush(10)
    sizes = [len(b) for b in cluster.batches("u", 0)]
    assert len(sizes) > 5 and max(sizes) <= 300 + 61
    assert len(cluster.records("u", 0)) == 50


def test_a_retried_batch_keeps_partition_order_and_follows_the_leader() -> None:
    with scripted_cluster(3) as cluster:
        cluster.create_topic("t", 1, leaders=[0])
        failures = {"left": 1}

        def move_then_fail(broker: int, request: Any, version: int) -> Any:
            if failures["left"] and broker == 0:
                failures["left"] -= 1
                cluster.move_leader("t", 0, 2)  # the answer says: not me any more
                return ProduceResponse(
                    responses=[
                        TopicProduceResponse(
                            "t", [PartitionProduceResponse(0, ErrorCode.NOT_LEADER_OR_FOLLOWER)]
                        )
                    ]
                )
            return None

        cluster.hooks[0] = move_then_fail
        with producer(cluster, **{"linger.ms": 5, "batch.size": 200}) as p:
            futures = [p.produce("t", b"%03d" % i, partition=0) for i in range(100)]
            p.flush(20)
            offsets = [f.result().offset for f in futures]
        assert offsets == list(range(100))
        assert [r.value for r in cluster.records("t", 0)] == [b"%03d" % i for i in range(100)]
        brokers = [b for b, _, _ in cluster.sent("Produce")]
        assert brokers[0] == 0 and set(brokers[1:]) == {2}


def test_batches_go_out_in_sequence_order_while_add_partitions_is_slow() -> None:
    """A transactional producer's batches of a partition reach its leader in the order of
    their sequence numbers, though the first of them waits for AddPartitionsToTxn: a batch
    that overtook its predecessor would be refused (OUT_OF_ORDER_SEQUENCE_NUMBER), and once
    the predecessor's success had been seen, failed for good (the transaction with it)."""
    with scripted_cluster(1, versions={**DEFAULT_VERSIONS, **TXN_VERSIONS}) as cluster:
        cluster.create_topic("t", 1)
        adds = itertools.count()

        def hold_all_but_the_first_add(broker: int, request: Any, version: int) -> Any:
            """Only a second AddPartitionsToTxn is slow: answered once a batch went out
            after another (up to 5 s), as the coordinator is while it writes the first."""
            if next(adds) == 0:
                return None

            async def later() -> None:
                with trio.move_on_after(5):
                    while len(cluster.sent("Produce")) < 2:
                        await trio.sleep(0.01)

            return later()

        cluster.hooks[24] = hold_all_but_the_first_add
        values = [b"%03d" % i for i in range(60)]
        config = {"transactional.id": "tx", "linger.ms": 20, "batch.size": 100}
        with producer(cluster, **config) as p:
            p.init_transactions()
            p.begin_transaction()
            futures = [p.produce("t", v, partition=0) for v in values]
            p.commit_transaction()
            offsets = [f.result(10).offset for f in futures]
        produced = [
            cast(ProduceRequest, r).topic_data[0].partition_data[0].records
            for r in (r for _, _, r in cluster.sent("Produce"))
        ]
        sequences = [next(iter_batches(b)).header.base_sequence for b in produced]
        assert len(sequences) > 5  # more batches than may be in flight at once
        assert sequences == sorted(sequences)
        assert [r.value for r in cluster.records("t", 0)] == values
        assert offsets == list(range(len(values)))
        assert len(cluster.sent("AddPartitionsToTxn")) == 1


def test_a_transaction_adds_its_partitions_in_one_request() -> None:
    """The partitions of a transaction's batches are added together, in one
    AddPartitionsToTxn (as the Java client does), not in one per broker or partition."""
    with scripted_cluster(3, versions={**DEFAULT_VERSIONS, **TXN_VERSIONS}) as cluster:
        cluster.create_topic("t", 6)  # two partitions led by each broker
        config = {"transactional.id": "tx", "linger.ms": 50}
        with producer(cluster, **config) as p:
            p.init_transactions()
            p.begin_transaction()
            futures = [p.produce("t", b"%d" % i, partition=i % 6) for i in range(60)]
            p.commit_transaction()
            assert [f.result(10).offset for f in futures] == [i // 6 for i in range(60)]
        adds = [
            cast(AddPartitionsToTxnRequest, r) for _, _, r in cluster.sent("AddPartitionsToTxn")
        ]
        assert len(adds) == 1
        assert [(t.name, sorted(t.partitions)) for t in adds[0].v3_and_below_topics] == [
            ("t", list(range(6)))
        ]
        assert {b for b, _, _ in cluster.sent("Produce")} == {0, 1, 2}
        ends = [cast(EndTxnRequest, r).committed for _, _, r in cluster.sent("EndTxn")]
        assert ends == [True]
        for partition in range(6):
            values = [r.value for r in cluster.records("t", partition)]
            assert values == [b"%d" % i for i in range(partition, 60, 6)]


def test_a_lost_connection_is_retried(cluster: ScriptedCluster) -> None:
    cluster.create_topic("t", 1)
    drops = {"left": 2}

    def drop(broker: int, request: Any, version: int) -> Any:
        if drops["left"]:
            drops["left"] -= 1
            return DROP
        return None

    cluster.hooks[0] = drop
    with producer(cluster, **{"retry.backoff.ms": 10}) as p:
        future = p.produce("t", b"v", partition=0)
        assert future.result(10).offset == 0
    assert len(cluster.records("t", 0)) == 1
    assert cluster.connections >= 3


def test_fatal_errors_name_the_partition_and_broker(cluster: ScriptedCluster) -> None:
    cluster.create_topic("t", 2)
    cluster.hooks[0] = lambda broker, request, version: ProduceResponse(
        responses=[
            TopicProduceResponse(
                "t", [PartitionProduceResponse(1, ErrorCode.TOPIC_AUTHORIZATION_FAILED)]
            )
        ]
    )
    delivered: list[tuple[KafkaError | None, RecordMetadata]] = []
    with producer(cluster) as p:
        future = p.produce(
            "t", b"v", partition=1, on_delivery=lambda err, meta: delivered.append((err, meta))
        )
        p.flush(10)
        with pytest.raises(
            TopicAuthorizationFailedError,
            match=r"producing to t-1 on broker 0 \(127\.0\.0\.1:\d+\)",
        ):
            future.result()
    assert len(delivered) == 1
    assert isinstance(delivered[0][0], TopicAuthorizationFailedError)
    assert delivered[0][1].partition == 1 and delivered[0][1].offset == -1


def test_retries_give_up_after_delivery_timeout(cluster: ScriptedCluster) -> None:
    cluster.create_topic("t", 1)
    cluster.hooks[0] = lambda broker, request, version: ProduceResponse(
        responses=[
            TopicProduceResponse(
                "t", [PartitionProduceResponse(0, ErrorCode.NOT_LEADER_OR_FOLLOWER)]
            )
        ]
    )
    config = {"delivery.timeout.ms": 1500, "request.timeout.ms": 500, "retry.backoff.ms": 20}
    with producer(cluster, **config) as p:
        future = p.produce("t", b"v", partition=0)
        with pytest.raises(RequestTimedOutError, match=r"expired after \d+ attempt") as info:
            future.result(10)
        assert "last error: producing to t-0 on broker 0" in str(info.value)
        assert "NOT_LEADER_OR_FOLLOWER" in str(info.value)
    # Retried until delivery.timeout.ms, by the batch's own clock (how close to it the expiry
    # comes is measured by bench/bench_client_timeouts.py). How many attempts fit depends on
    # the machine's load: at least one retry, each one sent.
    found = re.search(r"after (\d+) attempt\(s\), ([\d.]+)s since", str(info.value))
    assert found is not None, info.value
    attempts, elapsed = int(found[1]), float(found[2])
    assert attempts >= 2 and attempts == len(cluster.sent("Produce"))
    assert elapsed >= 1.5


def test_an_unanswered_request_times_out_and_expires(cluster: ScriptedCluster) -> None:
    cluster.create_topic("t", 1)
    cluster.hooks[0] = lambda broker, request, version: SILENT
    config = {"delivery.timeout.ms": 600, "request.timeout.ms": 300, "retries": 0}
    with producer(cluster, **config) as p:
        with pytest.raises(RequestTimedOutError, match="producing to t-0 on broker 0"):
            p.produce("t", b"v", partition=0).result(10)
        p.close(0)


def test_retries_zero_fails_at_the_first_retriable_error(cluster: ScriptedCluster) -> None:
    cluster.create_topic("t", 1)
    cluster.hooks[0] = lambda broker, request, version: ProduceResponse(
        responses=[
            TopicProduceResponse("t", [PartitionProduceResponse(0, ErrorCode.NOT_ENOUGH_REPLICAS)])
        ]
    )
    with producer(cluster, retries=0) as p, pytest.raises(KafkaError, match="NOT_ENOUGH_REP"):
        p.produce("t", b"v", partition=0).result(10)
    assert len(cluster.sent("Produce")) == 1


def test_full_buffer_blocks_then_raises(cluster: ScriptedCluster) -> None:
    cluster.create_topic("t", 1)
    release = threading.Event()

    def slow(broker: int, request: Any, version: int) -> Any:
        return SILENT if not release.is_set() else None

    cluster.hooks[0] = slow
    config = {
        "buffer.memory": 2000,
        "max.block.ms": 300,
        "request.timeout.ms": 60_000,
        "delivery.timeout.ms": 120_000,
    }
    p = producer(cluster, **config)
    try:
        accepted = 0
        with pytest.raises(RequestTimedOutError, match=r"no room in buffer\.memory"):
            for _ in range(20):
                p.produce("t", b"x" * 100, partition=0)
                accepted += 1
        assert accepted == 2000 // 121  # 121 bytes each, counted (how long the last one
        # blocked against max.block.ms is measured by bench/bench_client_timeouts.py)
        with pytest.raises(MessageTooLargeError, match=r"exceeds buffer\.memory"):
            p.produce("t", b"x" * 3000, partition=0)
    finally:
        release.set()
        p.close(0)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_every_codec(cluster: ScriptedCluster, codec: str) -> None:
    cluster.create_topic("t", 1)
    with producer(cluster, **{"compression.type": codec, "linger.ms": 20}) as p:
        for i in range(30):
            p.produce("t", b"value %d " % i * 10, key=b"%d" % i, partition=0)
        p.flush(10)
    batches = [b for data in cluster.batches("t", 0) for b in iter_batches(data)]
    assert {b.header.compression for b in batches} == {Compression[codec.upper()]}
    assert [r.value for r in cluster.records("t", 0)] == [b"value %d " % i * 10 for i in range(30)]


def test_a_batch_started_after_the_sender_looked_wakes_it(cluster: ScriptedCluster) -> None:
    """A record that starts a batch after the sender looked at the queues, while it is still
    in that pass (the application's thread may get the GIL at any bytecode), wakes the
    sender: it goes out at once, not whenever something else wakes the sender."""
    cluster.create_topic("t", 1)
    with producer(cluster) as p:
        assert p.produce("t", b"first", partition=0).result(10).offset == 0
        sender = p._core.sender
        sleep = sender._sleep
        armed = threading.Event()
        late: list[Any] = []

        async def append_then_sleep(delay: float) -> None:
            # The pass has looked (ready) and found nothing to send; it is about to sleep.
            if armed.is_set() and not late:
                late.append(p.produce("t", b"late", partition=0))
            await sleep(delay)

        sender._sleep = append_then_sleep  # type: ignore[method-assign]
        armed.set()
        sender.wake()  # a pass with nothing to send
        wait_for(lambda: bool(late), what="the append inside the pass")
        assert late[0].result(5).offset == 1
    assert cluster.records("t", 0)[1].value == b"late"


def test_delivery_callbacks_run_in_poll_and_flush(cluster: ScriptedCluster) -> None:
    cluster.create_topic("t", 1)
    seen: list[tuple[str, int]] = []
    with producer(cluster) as p:
        for _i in range(3):
            p.produce(
                "t",
                b"v",
                partition=0,
                on_delivery=lambda err, meta: seen.append(
                    (threading.current_thread().name, meta.offset)
                ),
            )
        wait_for(lambda: p._core.accumulator.incomplete == 0, what="delivery")
        assert seen == []  # nothing runs behind the application's back
        assert p.poll(1) == 3
    assert [offset for _, offset in seen] == [0, 1, 2]
    assert {name for name, _ in seen} == {threading.current_thread().name}


def test_acks_zero_does_not_wait_for_answers(cluster: ScriptedCluster) -> None:
    cluster.create_topic("t", 1)
    with producer(cluster, acks="0") as p:
        future = p.produce("t", b"v", partition=0)
        p.flush(10)
        assert future.result().offset == -1
    wait_for(lambda: len(cluster.records("t", 0)) == 1, what="the record")
    assert cluster.sent("Produce")[0][2].acks == 0


def test_unknown_partition_and_bad_input(cluster: ScriptedCluster) -> None:
    cluster.create_topic("t", 2)
    with producer(cluster) as p:
        with pytest.raises(UnknownTopicOrPartitionError, match="partition 5 of topic 't'"):
            p.produce("t", b"v", partition=5)
        with pytest.raises(TypeError, match="topic must be a non-empty str"):
            p.produce("", b"v")
        with pytest.raises(Exception, match="must be bytes"):
            p.produce("t", "not bytes")  # the default serializer is bytes


def test_serializers_and_auto_created_topics(cluster: ScriptedCluster) -> None:
    config = {"key.serializer": "str", "value.serializer": "json"}
    with producer(cluster, **config) as p:
        p.produce("fresh", {"a": 1}, key="k").result(10)
        assert p.partitions_for("fresh") == [0]
    record = cluster.records("fresh", 0)[0]
    assert (record.key, record.value) == (b"k", b'{"a":1}')


def test_throttle_time_holds_back_the_next_request(cluster: ScriptedCluster) -> None:
    cluster.create_topic("t", 1)
    stamps: list[float] = []

    def throttle(broker: int, request: Any, version: int) -> Any:
        stamps.append(time.monotonic())
        if len(stamps) == 1:
            base = cluster.append("t", 0, bytes(request.topic_data[0].partition_data[0].records))
            return ProduceResponse(
                responses=[TopicProduceResponse("t", [PartitionProduceResponse(0, 0, base)])],
                throttle_time_ms=400,
            )
        return None

    cluster.hooks[0] = throttle
    with producer(cluster) as p:
        p.produce("t", b"1", partition=0).result(10)
        p.produce("t", b"2", partition=0).result(10)
    assert stamps[1] - stamps[0] >= 0.35


def test_bootstrap_skips_servers_that_are_down() -> None:
    with scripted_cluster(2) as cluster:
        cluster.create_topic("t", 1, leaders=[1])
        cluster.down.add(0)
        with producer(cluster) as p:
            assert p.produce("t", b"v").result(10).offset == 0


def test_explicit_idempotence_needs_broker_support(cluster: ScriptedCluster) -> None:
    cluster.create_topic("t", 1)
    with producer(cluster, **{"enable.idempotence": True}) as p:
        with pytest.raises(
            UnsupportedVersionError,
            match="idempotence is enabled but the broker does not support it",
        ):
            p.produce("t", b"v").result(10)
        with pytest.raises(UnsupportedVersionError):
            p.produce("t", b"again")
    with (
        producer(cluster, **{"transactional.id": "tx"}) as p,
        pytest.raises(UnsupportedVersionError, match="transactions is enabled"),
    ):
        p.init_transactions()


def test_default_idempotence_steps_aside_on_an_old_broker(cluster: ScriptedCluster) -> None:
    cluster.create_topic("t", 1)
    with producer(cluster) as p:
        assert p.produce("t", b"v").result(10).offset == 0
        assert p._core.transactions.idempotent is False
    request = cluster.sent("Produce")[0][2]
    assert isinstance(request, ProduceRequest)
    batch = next(iter_batches(request.topic_data[0].partition_data[0].records))
    assert batch.header.producer_id == -1 and batch.header.base_sequence == -1
