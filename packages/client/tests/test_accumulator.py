"""The accumulator's bookkeeping around a batch the broker found too large: its halves go
back in its place, hold its memory, and each record's outcome is that of the half that
carried it."""

from __future__ import annotations

from gregor.client.cluster import PartitionInfo, TopicInfo
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
