"""A batch of records for one partition, and the future of each record in it.

Records are encoded into the batch as they are produced (`BatchBuilder`), so a produce
call does the per-record work once and the sender only seals, compresses and ships whole
batches. Delivery is decided per batch: every record of a batch shares its outcome, and a
record's offset is the batch's base offset plus its index.

A batch the broker refuses naming some of its records (KIP-467 record errors, e.g. keyless
records on a compacted topic) fails each named record with the broker's message for it and
the batch's other records with a generic error, as the Java client does (`error_of`).

A batch the broker finds too large (MESSAGE_TOO_LARGE) is split into parts that are sent
instead (`parts`); it completes when they all have, and each record's outcome is the one of
the part that holds it (`locate`).

Completion happens on the I/O side; callers wait in their own way, so a batch keeps a list
of callbacks (set a threading.Event, a trio.Event, or schedule onto an asyncio loop). The
list and the done flag are guarded by one lock shared by all batches: registering a waiter
and completing must not interleave, and contention is rare.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, ClassVar

from gregor.client.types import RecordMetadata, TopicPartition
from gregor.protocol.errors import KafkaError, RequestTimedOutError
from gregor.protocol.records import BatchBuilder, Compression

_COMPLETION = threading.Lock()

# on_delivery(error, metadata): error is None on success.
DeliveryCallback = Callable[[KafkaError | None, RecordMetadata], Any]


class ProducerBatch:
    __slots__ = (
        "_done_callbacks",
        "attempts",
        "base_offset",
        "base_sequence",
        "builder",
        "callbacks",
        "count",
        "created",
        "data",
        "done",
        "error",
        "is_open",
        "last_error",
        "log_append_time",
        "order",
        "parent",
        "parts",
        "producer_epoch",
        "producer_id",
        "record_errors",
        "retry_at",
        "size",
        "tp",
        "unsettled_parts",
    )

    # MESSAGE_TOO_LARGE splits a batch of several records in two (see sender.py).
    splittable: ClassVar[bool] = True

    def __init__(
        self,
        tp: TopicPartition,
        compression: Compression,
        created: float,
        order: tuple[int, ...] = (0,),
    ) -> None:
        self.tp = tp
        # Creation order within the partition, so retries go back in order: (n,) for the
        # n-th batch, and its order plus (0,) and (1,) for the halves of a split one.
        self.order = order
        self.builder = BatchBuilder(compression)
        self.created = created  # time.monotonic()
        self.count = 0
        self.size = 0  # estimated bytes of its records, for batch.size and buffer.memory
        self.is_open = True  # still accepting records
        # (index, timestamp, on_delivery) of the records that asked for a callback.
        self.callbacks: list[tuple[int, int, DeliveryCallback]] | None = None
        self.data: bytes | None = None  # the sealed batch, once drained
        self.attempts = 0
        self.retry_at = 0.0
        self.producer_id = -1
        self.producer_epoch = -1
        self.base_sequence = -1
        self.done = False
        self.base_offset = -1
        self.log_append_time = -1
        self.error: KafkaError | None = None
        # The errors of the records the broker named (by index), when it named any.
        self.record_errors: dict[int, KafkaError] | None = None
        self.last_error: KafkaError | None = None  # of the latest retried attempt
        self._done_callbacks: list[Callable[[ProducerBatch], None]] | None = None
        # When split: (index of its first record here, part), in record order.
        self.parts: list[tuple[int, ProducerBatch]] | None = None
        self.unsettled_parts = 0
        self.parent: ProducerBatch | None = None  # the batch this one is a part of

    def __repr__(self) -> str:
        return f"<ProducerBatch {self.tp} records={self.count} attempts={self.attempts}>"

    def seal(self) -> bytes:
        """The batch's bytes, built once (a retry sends the same bytes, same sequence)."""
        if self.data is None:
            builder = self.builder
            builder.producer_id = self.producer_id
            builder.producer_epoch = self.producer_epoch
            builder.base_sequence = self.base_sequence
            self.data = builder.build()
        return self.data

    def on_done(self, callback: Callable[[ProducerBatch], None]) -> None:
        """Run `callback(batch)` once the batch is complete (now, if it already is)."""
        with _COMPLETION:
            if not self.done:
                if self._done_callbacks is None:
                    self._done_callbacks = []
                self._done_callbacks.append(callback)
                return
        callback(self)

    def complete(
        self,
        base_offset: int = -1,
        log_append_time: int = -1,
        error: KafkaError | None = None,
        record_errors: dict[int, KafkaError] | None = None,
    ) -> None:
        with _COMPLETION:
            if self.done:
                return
            self.base_offset = base_offset
            self.log_append_time = log_append_time
            self.error = error
            self.record_errors = record_errors
            self.done = True
            callbacks, self._done_callbacks = self._done_callbacks, None
        for callback in callbacks or ():
            callback(self)

    def locate(self, index: int) -> tuple[ProducerBatch, int]:
        """The batch that carried record `index` of this one, and its index there."""
        batch = self
        while batch.parts is not None:
            start, part = next((s, p) for s, p in reversed(batch.parts) if s <= index)
            batch, index = part, index - start
        return batch, index

    def error_of(self, index: int) -> KafkaError | None:
        """Record `index`'s error: the batch's, unless the broker named invalid records;
        then a named record's own, and for the others one saying why they failed too."""
        named = self.record_errors
        if named is None:
            return self.error
        found = named.get(index)
        if found is None:
            found = KafkaError(
                f"producing to {self.tp}: failed to append the record because it was part of "
                f"a batch with one or more invalid records ({self.error})"
            )
        return found

    def metadata(self, index: int, timestamp: int) -> RecordMetadata:
        offset = self.base_offset + index if self.base_offset >= 0 else -1
        when = self.log_append_time if self.log_append_time >= 0 else timestamp
        return RecordMetadata(self.tp.topic, self.tp.partition, offset, when)

    def run_delivery_callbacks(self) -> None:
        """Call each record's on_delivery (in the caller's thread)."""
        for index, timestamp, callback in self.callbacks or ():
            batch, index = self.locate(index)
            callback(batch.error_of(index), batch.metadata(index, timestamp))


class RecordFuture(tuple[ProducerBatch, int, int]):
    """The outcome of one produced record: its batch, its index there, its timestamp.

    A tuple, so that produce() makes one with a single C call (`tuple.__new__`).
    """

    __slots__ = ()

    def done(self) -> bool:
        return self[0].done

    def _outcome(self) -> RecordMetadata:
        batch, index, timestamp = self
        batch, index = batch.locate(index)
        error = batch.error_of(index)
        if error is not None:
            raise error
        return batch.metadata(index, timestamp)

    def result(self, timeout: float | None = None) -> RecordMetadata:
        """Wait for delivery (from a thread other than the client's event loop)."""
        batch = self[0]
        if not batch.done:
            event = threading.Event()
            batch.on_done(lambda _: event.set())
            if not event.wait(timeout):
                raise RequestTimedOutError(f"record to {batch.tp} not delivered within {timeout}s")
        return self._outcome()

    def exception(self, timeout: float | None = None) -> KafkaError | None:
        try:
            self.result(timeout)
        except KafkaError as exc:
            return exc
        return None

    def add_done_callback(self, callback: Callable[[RecordFuture], Any]) -> None:
        """Run `callback(future)` when delivered or failed, on the client's I/O side."""
        self[0].on_done(lambda _: callback(self))

    def __repr__(self) -> str:
        batch, index, _timestamp = self
        state = "done" if batch.done else "pending"
        return f"<RecordFuture {batch.tp} #{index} {state}>"
