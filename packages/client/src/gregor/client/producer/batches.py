"""Producing record batches that are already encoded (batch pass-through).

`AsyncProducer.produce_batch(topic, partition, data)` sends one v2 record batch as it is,
still compressed as it came: a mirror copies what it fetched without decoding a record.
The batch is queued behind everything produced to its partition before it, sent alone in
its partition's slot of a Produce request (Kafka takes one batch per partition), and the
broker assigns its offsets: record `i` of the batch (offset delta `i`) lands at the base
offset its future gives.

Before it is sent, the header is made this producer's, as Kafka's wire rules want of a
produced batch: base offset 0, partition leader epoch -1, and the producer id, epoch and
base sequence of this producer (-1 each unless it is idempotent), with the transactional
bit set exactly when this producer is transactional. Only when those CRC-covered fields
change is the CRC-32C stamped again (one pass over the bytes, in C); the records are never
touched, so nothing is recompressed.

On a transactional producer a batch joins the open transaction as a produced record does:
the sender adds its partition to the transaction (AddPartitionsToTxn) before sending it,
and stamps it with the producer's id, epoch and the partition's next sequence. Produced
outside a transaction, it fails as a record would.

Refused at once, with the reason: bytes that are not exactly one v2 batch, a control
batch, a batch whose offset deltas are not 0..count-1 (a compacted batch: Kafka refuses
those, the records must be produced one by one), and a batch over `max.request.size`. A
batch the broker refuses (over the topic's `max.message.bytes`: MESSAGE_TOO_LARGE) fails
as a whole: unlike a batch of produced records, it is never split.
"""

from __future__ import annotations

import struct
from typing import ClassVar

from gregor.client.producer.batch import ProducerBatch, RecordFuture
from gregor.client.producer.core import NeedMetadata, ProducerCore
from gregor.client.types import TopicPartition
from gregor.protocol.checksums import crc32c
from gregor.protocol.errors import (
    InvalidRecordError,
    MessageTooLargeError,
    UnknownTopicOrPartitionError,
)
from gregor.protocol.records import BatchHeader, Compression, read_batch_header

Buffer = bytes | bytearray | memoryview

# Where the header's fields are (see gregor.protocol.records); the CRC covers from 21 on.
_PREFIX = struct.Struct(">qii")  # base offset, batch length, partition leader epoch
_CRC_AT = 17
_ATTRIBUTES_AT = 21
_PRODUCER_AT = 43
_PRODUCER = struct.Struct(">qhi")  # producer id, producer epoch, base sequence
_TRANSACTIONAL_BIT = 0x10
_CONTROL_BIT = 0x20


def append_batch(
    core: ProducerCore, topic: str, partition: int, data: Buffer
) -> RecordFuture | None:
    """Check and queue one encoded batch: the future of its first record (its metadata
    has the batch's base offset), or None when buffer.memory has no room for it now.
    Raises NeedMetadata while the topic's partitions are unknown."""
    info = core.client.cluster.topics.get(topic)
    if info is None:
        raise NeedMetadata(topic)
    if not 0 <= partition < len(info.partitions):
        raise UnknownTopicOrPartitionError(
            f"partition {partition} of topic {topic!r} does not exist "
            f"(it has {len(info.partitions)} partitions)"
        )
    tp = TopicPartition(topic, partition)
    header = check_batch(tp, data, core.config.max_request_size)
    batch = EncodedBatch(tp, data, header)
    accumulator = core.accumulator
    if not accumulator.append_batch(batch, len(info.partitions)):
        return None
    return tuple.__new__(accumulator.future_type, (batch, 0, header.base_timestamp))


def check_batch(tp: TopicPartition, data: Buffer, max_request_size: int) -> BatchHeader:
    """The header of `data` if it can be produced as it is; raises why not."""
    header = read_batch_header(data)
    if header.size != len(data):
        raise InvalidRecordError(
            f"a batch for {tp} must be exactly one record batch: {len(data)} bytes given, "
            f"the batch header says {header.size}"
        )
    if header.attributes & _CONTROL_BIT:
        raise InvalidRecordError(f"a control batch cannot be produced (to {tp})")
    if header.records_count < 1 or header.last_offset_delta != header.records_count - 1:
        raise InvalidRecordError(
            f"a batch for {tp} must hold records at offset deltas 0..count-1: it has "
            f"{header.records_count} records and last offset delta "
            f"{header.last_offset_delta} (produce the records of a compacted batch one by one)"
        )
    if len(data) > max_request_size:
        raise MessageTooLargeError(
            f"a batch of {len(data)} bytes ({header.records_count} records) for {tp} "
            f"exceeds max.request.size={max_request_size}"
        )
    return header


class EncodedBatch(ProducerBatch):
    """A producer batch whose bytes were encoded elsewhere; `seal` makes its header ours."""

    __slots__ = ("attributes", "source_producer")

    splittable: ClassVar[bool] = False  # its records keep their deltas: all or nothing

    def __init__(self, tp: TopicPartition, data: Buffer, header: BatchHeader) -> None:
        super().__init__(tp, Compression.NONE, 0.0)
        # A copy (the caller's buffer may be reused) with base offset 0 and leader epoch -1:
        # fields outside the CRC.
        self.data = b"".join((_PREFIX.pack(0, len(data) - 12, -1), memoryview(data)[16:]))
        self.count = header.records_count
        self.size = len(data)
        self.is_open = False
        self.attributes = header.attributes
        self.source_producer = (header.producer_id, header.producer_epoch, header.base_sequence)

    def seal(self) -> bytes:
        """The bytes to send: the given batch with this producer's header fields."""
        data = self.data
        assert data is not None
        producer = (self.producer_id, self.producer_epoch, self.base_sequence)
        # The sender marks the batches of a transactional producer (as it stamps sequences).
        transactional = _TRANSACTIONAL_BIT if self.builder.is_transactional else 0
        attributes = (self.attributes & ~_TRANSACTIONAL_BIT) | transactional
        if producer == self.source_producer and attributes == self.attributes:
            return data
        out = bytearray(data)
        struct.pack_into(">h", out, _ATTRIBUTES_AT, attributes)
        _PRODUCER.pack_into(out, _PRODUCER_AT, *producer)
        struct.pack_into(">I", out, _CRC_AT, crc32c(memoryview(out)[_ATTRIBUTES_AT:]))
        # A retry must send the same bytes, with the same sequence: keep the stamped ones.
        self.data = bytes(out)
        self.attributes = attributes
        self.source_producer = producer
        return self.data
