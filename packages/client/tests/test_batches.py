"""Batch pass-through, without a broker: how an encoded batch is checked and made the
producer's, how it queues behind records, and what a fetched batch says of itself."""

from __future__ import annotations

import pytest

from gregor.client.cluster import PartitionInfo, TopicInfo
from gregor.client.consumer.batches import FetchedBatch
from gregor.client.producer.accumulator import Accumulator
from gregor.client.producer.batches import EncodedBatch, check_batch
from gregor.client.types import TopicPartition
from gregor.protocol.errors import InvalidRecordError, MessageTooLargeError
from gregor.protocol.records import (
    BatchBuilder,
    Compression,
    ControlType,
    RecordBatch,
    build_control_batch,
    read_batch_header,
    verify_crc,
)

TP = TopicPartition("t", 0)
INFO = TopicInfo("t", (PartitionInfo("t", 0, leader=1),))

MARKER = build_control_batch(
    ControlType.COMMIT, producer_id=5, producer_epoch=0, coordinator_epoch=0
)


def encoded(count: int = 3, compression: Compression = Compression.LZ4, **fields: int) -> bytes:
    builder = BatchBuilder(compression, base_offset=1234, partition_leader_epoch=7, **fields)  # type: ignore[arg-type]
    for i in range(count):
        builder.append(b"value-%d" % i, b"key", [("h", b"%d" % i)], timestamp=1000 + i)
    return builder.build()


def test_check_refuses_what_kafka_would_not_take() -> None:
    with pytest.raises(InvalidRecordError, match="control batch"):
        check_batch(TP, MARKER, 10**6)
    gappy = BatchBuilder()
    gappy.append(b"a", timestamp=1)
    gappy.append(b"b", timestamp=1, offset_delta=3)
    with pytest.raises(InvalidRecordError, match="compacted"):
        check_batch(TP, gappy.build(), 10**6)
    with pytest.raises(InvalidRecordError, match="exactly one record batch"):
        check_batch(TP, encoded() + encoded(), 10**6)
    data = encoded()
    with pytest.raises(MessageTooLargeError, match=f"{len(data)} bytes .* t-0 exceeds"):
        check_batch(TP, data, len(data) - 1)
    assert check_batch(TP, data, len(data)).records_count == 3


def test_seal_resets_what_is_outside_the_crc_and_keeps_the_rest() -> None:
    data = encoded()
    sealed = EncodedBatch(TP, data, check_batch(TP, data, 10**6)).seal()
    header = read_batch_header(sealed)
    assert (header.base_offset, header.partition_leader_epoch) == (0, -1)
    assert sealed[16:] == data[16:]  # same CRC, same compressed records


def test_seal_gives_the_batch_this_producers_fields_and_a_new_crc() -> None:
    data = encoded(producer_id=42, producer_epoch=3, base_sequence=100, is_transactional=True)
    batch = EncodedBatch(TP, data, check_batch(TP, data, 10**6))
    not_idempotent = batch.seal()
    header = read_batch_header(not_idempotent)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (-1, -1, -1)
    assert not header.is_transactional
    assert header.compression is Compression.LZ4
    verify_crc(not_idempotent, 0, header)
    assert not_idempotent[61:] == data[61:]  # the records untouched, still compressed

    idempotent = EncodedBatch(TP, data, check_batch(TP, data, 10**6))
    idempotent.producer_id, idempotent.producer_epoch, idempotent.base_sequence = 9, 1, 30
    sealed = idempotent.seal()
    header = read_batch_header(sealed)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (9, 1, 30)
    verify_crc(sealed, 0, header)
    assert idempotent.seal() is sealed  # a retry sends the same bytes
    assert [r.value for r in RecordBatch(header, sealed)] == [b"value-0", b"value-1", b"value-2"]


def test_seal_marks_the_batch_of_a_transactional_producer() -> None:
    data = encoded()  # not transactional at the source
    batch = EncodedBatch(TP, data, check_batch(TP, data, 10**6))
    batch.producer_id, batch.producer_epoch, batch.base_sequence = 9, 2, 0
    batch.builder.is_transactional = True  # as the sender stamps a transactional producer's
    sealed = batch.seal()
    header = read_batch_header(sealed)
    assert header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (9, 2, 0)
    verify_crc(sealed, 0, header)
    assert sealed[61:] == data[61:]


def test_an_encoded_batch_queues_behind_the_records_before_it() -> None:
    accumulator = Accumulator(
        batch_size=10_000,
        linger_ms=1000,
        buffer_memory=100_000,
        compression=Compression.NONE,
        max_request_size=1_000_000,
    )

    first = accumulator.append("t", 0, INFO, None, b"before", [], 1, None)
    data = encoded()
    batch = EncodedBatch(TP, data, check_batch(TP, data, 10**6))
    assert accumulator.append_batch(batch, 1)
    after = accumulator.append("t", 0, INFO, None, b"after", [], 1, None)
    assert first is not None and after is not None
    queue = list(accumulator._queues[TP])
    assert queue == [first[0], batch, after[0]]
    assert not first[0].is_open and not batch.is_open and after[0].is_open
    assert accumulator.memory_used == first[0].size + len(data) + after[0].size
    assert not batch.splittable and first[0].splittable
    # No room: the caller waits; but a batch larger than the buffer goes when it is empty.
    big = encoded(count=4000, compression=Compression.NONE)
    assert len(big) > 100_000
    assert not accumulator.append_batch(EncodedBatch(TP, big, check_batch(TP, big, 10**6)), 1)
    empty = Accumulator(
        batch_size=10_000,
        linger_ms=0,
        buffer_memory=100_000,
        compression=Compression.NONE,
        max_request_size=1_000_000,
    )
    assert empty.append_batch(EncodedBatch(TP, big, check_batch(TP, big, 10**6)), 1)


def test_fetched_batch_knows_if_it_can_pass_through() -> None:
    data = encoded(count=5)
    whole = FetchedBatch("t", 0, RecordBatch.from_bytes(data), 1234)
    assert whole.producible and whole.records_count == 5
    assert (whole.base_offset, whole.last_offset) == (1234, 1238)
    begun = FetchedBatch("t", 0, RecordBatch.from_bytes(data), 1236)
    assert not begun.producible
    assert [r.offset for r in begun.records()] == [1236, 1237, 1238]
    first = begun.records()[0]
    assert (first.key, first.value, first.headers, first.timestamp) == (
        b"key",
        b"value-2",
        (("h", b"2"),),
        1002,
    )
    gappy = BatchBuilder(base_offset=10)
    gappy.append(b"a", timestamp=1)
    gappy.append(b"b", timestamp=1, offset_delta=3)
    assert not FetchedBatch("t", 0, RecordBatch.from_bytes(gappy.build()), 10).producible
