"""Fetched record batches as bytes (batch pass-through).

`AsyncConsumer.getmany_batches()` hands out what the fetcher brought as whole record
batches, still encoded and compressed, each with its partition and offsets: a mirror
passes them to `AsyncProducer.produce_batch` without decoding a record. Positions move as
with `getmany()`: past every batch handed out.

What the application must not see is left out, as `getmany()` leaves it out: control
batches (transaction markers), and with `isolation.level=read_committed` (the default is
read_uncommitted, as in Kafka) the batches of aborted transactions. A batch of a committed
transaction, or of an idempotent producer, is handed out with its producer fields as they
are; `produce_batch` replaces them with its own.

A batch is handed out whole even where it begins before the consumer's position (a seek
into its middle): `start` says where the records not yet handed out begin, and `records()`
decodes those. Only a batch with `producible` true can go to `produce_batch` as it is.
Each batch also says where its partition ended when it was fetched (`high_watermark`), so
a mirror knows how far behind it is without asking the broker.
"""

from __future__ import annotations

from gregor.client.consumer.core import ConsumerCore
from gregor.client.consumer.records import CompletedFetch, ConsumerRecord
from gregor.client.types import TopicPartition
from gregor.protocol.records import MAGIC, BatchHeader, RecordBatch


class FetchedBatch:
    """One fetched record batch: its bytes as the broker sent them, and where it is."""

    __slots__ = ("_batch", "high_watermark", "partition", "start", "topic")

    def __init__(
        self, topic: str, partition: int, batch: RecordBatch, start: int, high_watermark: int = -1
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.start = start  # the first offset not handed out before (>= base_offset)
        self.high_watermark = high_watermark  # of the partition, as the fetch saw it
        self._batch = batch

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def data(self) -> memoryview:
        """The whole batch, header included, as fetched (valid as long as this object)."""
        return memoryview(self._batch.data)

    @property
    def record_batch(self) -> RecordBatch:
        """The batch as gregor-protocol reads it, for decoders of whole batches
        (`gregor.protocol.records.decode_columns`; mind `start`)."""
        return self._batch

    @property
    def header(self) -> BatchHeader:
        return self._batch.header

    @property
    def base_offset(self) -> int:
        return self._batch.header.base_offset

    @property
    def last_offset(self) -> int:
        return self._batch.header.last_offset

    @property
    def records_count(self) -> int:
        return self._batch.header.records_count

    @property
    def producible(self) -> bool:
        """True when `produce_batch` takes the bytes as they are: a v2 batch handed out
        from its first record, with records at offset deltas 0..count-1 (a compacted batch
        has gaps: its records must be produced one by one)."""
        header = self._batch.header
        return (
            header.magic == MAGIC
            and self.start <= header.base_offset
            and header.records_count >= 1
            and header.last_offset_delta == header.records_count - 1
        )

    def records(self) -> list[ConsumerRecord]:
        """Its records from `start` on, decoded (keys and values as bytes)."""
        header = self._batch.header
        epoch = header.partition_leader_epoch if header.partition_leader_epoch >= 0 else None
        kind = header.timestamp_type
        return [
            ConsumerRecord(
                self.topic, self.partition, r.offset, r.timestamp, kind, r.key, r.value,
                r.headers, epoch,
            )
            for r in self._batch.records()
            if r.offset >= self.start
        ]  # fmt: skip

    def __repr__(self) -> str:
        return (
            f"<FetchedBatch {self.topic}-{self.partition} offsets "
            f"{self.base_offset}..{self.last_offset} from {self.start}>"
        )


def take_batches(core: ConsumerCore, max_records: int) -> list[FetchedBatch]:
    """Whole fetches of batches (at least one fetch, then up to about `max_records`
    records) from what was fetched, without waiting; positions move past them. Raises the
    error of a failed fetch."""
    out: list[FetchedBatch] = []
    records = 0
    subscriptions = core.subscriptions
    while records < max_records:
        fetch = core._current  # a fetch getmany() began: what it did not hand out
        if fetch is None:
            fetch = core.buffer.next_fetch()
            if fetch is None:
                break
            if fetch.error is not None:
                core._finish(fetch)
                raise fetch.error
        core._current = fetch
        with subscriptions.lock:
            state = subscriptions.assignment.get(fetch.tp)
            if state is None or state.epoch != fetch.epoch or state.paused:
                state = None
            position = None if state is None else state.position
            high_watermark = -1 if state is None else state.high_watermark
        if state is None:
            core._finish(fetch)  # sought, paused or revoked meanwhile
            continue
        start = fetch.fetch_offset if position is None else max(position, fetch.fetch_offset)
        batches = _batches(fetch, start, high_watermark)
        with subscriptions.lock:
            if state.epoch == fetch.epoch and state.position == position:
                state.position = max(start, fetch.next_fetch_offset)
                if batches:
                    epoch = batches[-1].header.partition_leader_epoch
                    if epoch >= 0:
                        state.leader_epoch = epoch
            else:
                batches = []  # sought meanwhile (from another thread)
        core._finish(fetch)
        out += batches
        records += sum(b.records_count for b in batches)
    return out


def _batches(fetch: CompletedFetch, start: int, high_watermark: int) -> list[FetchedBatch]:
    """The fetch's batches for the application (read_committed filtering, no control
    batches) that end at or after `start`."""
    topic, partition = fetch.tp
    return [
        FetchedBatch(topic, partition, batch, max(start, batch.header.base_offset), high_watermark)
        for batch in fetch._filtered()
        if batch.header.next_offset > start
    ]


__all__ = ["FetchedBatch", "take_batches"]
