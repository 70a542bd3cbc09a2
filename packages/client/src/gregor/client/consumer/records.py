"""Consumer records, and turning one partition's fetched bytes into them.

A `CompletedFetch` is what the fetcher hands over: the raw record data of one partition
from one Fetch response, with the epoch it was fetched under. The consumer decodes it in
its own thread, lazily, `max.poll.records` at a time; with read_committed it skips the
batches of aborted transactions (the response lists where each aborted transaction
starts; its abort marker ends it) and control batches.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from gregor.client.types import TopicPartition
from gregor.protocol.errors import KafkaError
from gregor.protocol.records import ControlType, RecordBatch, TimestampType, iter_batches

Deserialize = Callable[[bytes | None, str], Any]


class ConsumerRecord(NamedTuple):
    """One record as the application sees it (a tuple: built in C, cheap to hand over)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: TimestampType
    key: Any
    value: Any
    headers: tuple[tuple[str, bytes | None], ...] = ()
    leader_epoch: int | None = None

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


_new_record = tuple.__new__  # ConsumerRecord's fields in one C call, no Python __new__


class CompletedFetch:
    """One partition's data from one Fetch response, consumed a slice at a time."""

    __slots__ = (
        "_batches",
        "_current",
        "_index",
        "_leader_epoch",
        "_timestamp_type",
        "aborted",
        "epoch",
        "error",
        "fetch_offset",
        "next_fetch_offset",
        "owner",
        "read_committed",
        "records",
        "size",
        "tp",
    )

    def __init__(
        self,
        tp: TopicPartition,
        epoch: int,
        fetch_offset: int,
        records: bytes | memoryview,
        next_fetch_offset: int,
        *,
        read_committed: bool = False,
        aborted: list[tuple[int, int]] | None = None,  # (first offset, producer id)
        error: KafkaError | None = None,
    ) -> None:
        self.tp = tp
        self.epoch = epoch
        self.fetch_offset = fetch_offset
        self.records = records
        self.size = len(records)
        self.next_fetch_offset = next_fetch_offset
        self.read_committed = read_committed
        self.aborted = aborted
        self.error = error
        # The partition state it was fetched for, whose count of waiting fetches it is in.
        self.owner: Any = None
        self._batches: Iterator[RecordBatch] | None = None
        self._current: list[Any] = []
        self._index = 0
        self._timestamp_type = TimestampType.CREATE_TIME
        self._leader_epoch: int | None = None

    def take(
        self,
        max_records: int,
        key_deserializer: Deserialize | None,
        value_deserializer: Deserialize | None,
    ) -> list[ConsumerRecord]:
        """Up to `max_records` more records (at or after the fetch offset), decoded."""
        out: list[ConsumerRecord] = []
        topic, partition = self.tp
        while len(out) < max_records:
            if self._index >= len(self._current):
                batch = self._next_batch()
                if batch is None:
                    break
                records = batch.records()
                start = 0
                if records and records[0].offset < self.fetch_offset:
                    # The first batch may begin before the offset asked for.
                    while start < len(records) and records[start].offset < self.fetch_offset:
                        start += 1
                self._current = records
                self._index = start
                epoch = batch.header.partition_leader_epoch
                self._timestamp_type = batch.header.timestamp_type
                self._leader_epoch = epoch if epoch >= 0 else None
                continue
            tt, le = self._timestamp_type, self._leader_epoch
            end = min(len(self._current), self._index + max_records - len(out))
            chunk = self._current[self._index : end]
            self._index = end
            new, cls = _new_record, ConsumerRecord
            if key_deserializer is None and value_deserializer is None:
                out += [
                    new(cls, (topic, partition, r.offset, r.timestamp, tt, r.key, r.value,
                              r.headers, le))
                    for r in chunk
                ]  # fmt: skip
                continue
            for r in chunk:
                key, value = r.key, r.value
                if key_deserializer is not None:
                    key = key_deserializer(key, topic)
                if value_deserializer is not None:
                    value = value_deserializer(value, topic)
                out.append(
                    new(
                        cls,
                        (topic, partition, r.offset, r.timestamp, tt, key, value, r.headers, le),
                    )
                )
        return out

    def _next_batch(self) -> RecordBatch | None:
        if self._batches is None:
            self._batches = self._filtered()
        batches = self._batches
        if batches is _DONE:
            return None
        batch = next(batches, None)
        if batch is None:
            self._batches = _DONE
        return batch

    def _filtered(self) -> Iterator[RecordBatch]:
        """The batches with records for the application (read_committed filtering)."""
        aborted = list(self.aborted or ())
        heapq.heapify(aborted)
        aborted_producers: set[int] = set()
        for batch in iter_batches(self.records):
            header = batch.header
            if header.next_offset <= self.fetch_offset:
                continue
            if not self.read_committed:
                if not header.is_control:
                    yield batch
                continue
            while aborted and aborted[0][0] <= header.last_offset:
                aborted_producers.add(heapq.heappop(aborted)[1])
            if header.is_control:
                if (
                    header.producer_id in aborted_producers
                    and batch.control_record().type is ControlType.ABORT
                ):
                    aborted_producers.discard(header.producer_id)
                continue
            if header.is_transactional and header.producer_id in aborted_producers:
                continue
            yield batch


_DONE: Iterator[RecordBatch] = iter(())


def next_offset_after(records: bytes | memoryview, fetch_offset: int) -> int:
    """The offset after the last whole batch in fetched data (the next fetch starts there);
    `fetch_offset` when the data holds no whole batch."""
    end = fetch_offset
    for batch in iter_batches(records):
        end = max(end, batch.header.next_offset)
    return end
