"""The accumulator's bookkeeping around a batch the broker found too large: its halves go
back in its place, hold its memory, and each record's outcome is that of the half that
carried it. And what a drain tells the sender about the batches it left behind."""

from __future__ import annotations

from gregor.client.cluster import Cluster, PartitionInfo, TopicInfo
from gregor.client.producer.accumulator import Accumulator
from gregor.client.producer.batch import ProducerBatch, RecordFuture
from gregor.client.types import TopicPartition
from gregor.protocol.errors import KafkaError
from gregor.protocol.records import Compression, iter_batches

TP = TopicPartition("t", 0)
INFO = TopicInfo("t", (PartitionInfo("t", 0, leader=1),))


def take_first(acc: Accumulator) -> ProducerBatch:
    """What a drain does: the partition's first batch leaves the queue, in flight."""
    batch = acc._queues[TP].popleft()
    batch.is_open = False
    acc._in_flight[TP] = acc._in_flight.get(TP, 0) + 1
    return batch


def values(batch: ProducerBatch) -> list[bytes | None]:
    return [r.value for b in iter_batches(batch.seal()) for r in b.records()]


def test_a_split_batch_goes_back_in_halves_before_newer_ones() -> None:
    acc = Accumulator(
        batch_size=1_000,
        linger_ms=0,
        buffer_memory=1 << 20,
        compression=Compression.ZSTD,
        max_request_size=1 << 20,
    )
    append = acc.appender()
    futures: list[RecordFuture] = []
    for i in range(9):
        future = append("t", 0, INFO, b"k", b"value-%d" % i, [("h", b"%d" % i)], 100 + i, None)
        assert future is not None
        futures.append(future)
    too_large = take_first(acc)
    newer = append("t", 0, INFO, None, b"newer", (), 200, None)
    assert newer is not None and newer[0] is not too_large
    memory, incomplete = acc.memory_used, acc.incomplete

    halves = acc.split(too_large)
    assert [values(h) for h in halves] == [
        [b"value-%d" % i for i in range(4)],
        [b"value-%d" % i for i in range(4, 9)],
    ]
    assert list(acc._queues[TP]) == [*halves, newer[0]]
    assert (acc.memory_used, acc.incomplete, acc._in_flight[TP]) == (memory, incomplete + 2, 0)

    # The second half is still too large: its halves go before the newer batch too.
    first_half = take_first(acc)
    acc.sent(first_half)
    first_half.complete(base_offset=40)
    second_half = take_first(acc)
    quarters = acc.split(second_half)
    assert list(acc._queues[TP]) == [*quarters, newer[0]]
    quarters[0].complete(base_offset=50)
    quarters[1].complete(error=KafkaError("lost"))
    outcomes = []
    for future in futures:
        batch, index = future[0].locate(future[1])
        outcomes.append(batch.error or batch.metadata(index, future[2]).offset)
    assert outcomes[:6] == [40, 41, 42, 43, 50, 51]
    assert all(isinstance(o, KafkaError) for o in outcomes[6:])


def test_a_drain_says_whether_it_left_batches_behind_for_the_ready_nodes() -> None:
    """The sender looks again at once only when a drain left something sendable: the next
    batch of a partition (max.in.flight), or one that did not fit in the request."""
    acc = Accumulator(
        batch_size=100,
        linger_ms=0,
        buffer_memory=1 << 20,
        compression=Compression.NONE,
        max_request_size=300,
        max_in_flight_per_partition=5,
    )
    two = TopicInfo("t", (PartitionInfo("t", 0, leader=1), PartitionInfo("t", 1, leader=1)))
    cluster = Cluster(topics={"t": two})
    append = acc.appender()
    append("t", 0, two, None, b"x" * 60, (), 100, None)
    drained, left = acc.drain(cluster, {1}, now=1e9)
    assert [b.count for b in drained[1]] == [1] and left is False
    for _ in range(2):  # two batches of partition 0: one is drained, the other waits
        append("t", 0, two, None, b"x" * 80, (), 100, None)
    drained, left = acc.drain(cluster, {1}, now=1e9)
    assert len(drained[1]) == 1 and left is True
    drained, left = acc.drain(cluster, {1}, now=1e9)
    assert len(drained[1]) == 1 and left is False
    # Partition 1's batch does not fit in the request beside partition 0's.
    append("t", 0, two, None, b"x" * 90, (), 100, None)
    append("t", 1, two, None, b"x" * 200, (), 100, None)
    drained, left = acc.drain(cluster, {1}, now=1e9)
    assert len(drained[1]) == 1 and left is True
    assert acc.drain(cluster, {2}, now=1e9) == ({}, False)  # not these nodes' batches
