"""The record accumulator: per-partition queues of batches between produce() and the sender.

- produce() appends to the open batch of its partition, starting a new one when the record
  would take it past `batch.size` (a record larger than that gets a batch of its own).
- A partition is ready to send when its first batch is full, has waited `linger.ms`, or a
  flush or close is under way; its retry backoff must have passed; and, for ordering, no
  other batch of it may be in flight (up to `max.in.flight` when idempotence numbers them,
  so the broker can put retries back in order).
- `buffer.memory` bounds the bytes of records not yet acknowledged. An append that does not
  fit returns None and the caller waits for room (up to `max.block.ms`).

Appends come from the application's threads, drains from the sender, so one lock guards
the queues; it is held for a record's encoding, which is the cheap path either way. When an
append makes a batch ready while the sender sleeps, it wakes the sender.

`Accumulator.append` is the reference. Its common case (the record only counts: its batch
stays open, the sticky partition stays) has a C twin (`_accumulate.c`, when built), which
hands every other record to the reference; `appender()` gives whichever is in use.
"""

from __future__ import annotations

import functools
import itertools
import threading
from collections import deque
from collections.abc import Callable, Sequence
from time import monotonic

import attrs

from gregor.client.cluster import Cluster, TopicInfo
from gregor.client.partitioner import StickyChoice, StickyPartitions
from gregor.client.producer.batch import DeliveryCallback, ProducerBatch, RecordFuture
from gregor.client.types import TopicPartition
from gregor.protocol.errors import KafkaError, MessageTooLargeError
from gregor.protocol.native import native_function
from gregor.protocol.records import BATCH_HEADER_SIZE, Compression, iter_batches

_new_tuple = tuple.__new__

# A record's overhead beyond its key and value: length, attributes, deltas, header count.
_RECORD_OVERHEAD = 21


def record_size(
    key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes | None]]
) -> int:
    size = _RECORD_OVERHEAD + (len(key) if key else 0) + (len(value) if value else 0)
    for name, header_value in headers:
        size += len(name) + (len(header_value) if header_value else 0) + 4
    return size


@attrs.define
class ReadyCheck:
    """What `ready` found: who to send to, and when to look again."""

    nodes: set[int] = attrs.Factory(set)
    next_check: float = float("inf")  # time.monotonic() of the next linger or backoff expiry
    unknown_leaders: set[str] = attrs.Factory(set)


class Accumulator:
    # Slots: the C twin of `append` (_accumulate.c) reads and writes them by offset.
    __slots__ = (
        "_in_flight",
        "_open",
        "_order",
        "_queues",
        "_sticky_current",
        "_switch_after",
        "_tps",
        "batch_size",
        "buffer_memory",
        "changed",
        "completions",
        "compression",
        "flushing",
        "future_type",
        "incomplete",
        "linger",
        "listeners",
        "lock",
        "max_in_flight_per_partition",
        "max_record_size",
        "max_request_size",
        "memory_used",
        "sticky",
        "stopped",
        "wake_sender",
        "wake_wanted",
    )

    def __init__(
        self,
        *,
        batch_size: int,
        linger_ms: int,
        buffer_memory: int,
        compression: Compression,
        max_request_size: int,
        max_in_flight_per_partition: int = 1,
        sticky: StickyPartitions | None = None,
    ) -> None:
        sticky = sticky or StickyPartitions(batch_size)
        self.batch_size = batch_size
        self.linger = linger_ms / 1000
        self.buffer_memory = buffer_memory
        self.compression = compression
        self.max_request_size = max_request_size
        self.max_in_flight_per_partition = max_in_flight_per_partition
        self.lock = threading.Lock()
        # Waiters for room in the buffer, or for every batch to complete (flush).
        self.changed = threading.Condition(self.lock)
        self.listeners: list[Callable[[], None]] = []  # called (unlocked) on completions
        self._queues: dict[TopicPartition, deque[ProducerBatch]] = {}
        self._in_flight: dict[TopicPartition, int] = {}
        self._tps: dict[str, list[TopicPartition]] = {}
        # Each partition's batch still open for appends (None: start one), by topic.
        self._open: dict[str, list[ProducerBatch | None]] = {}
        self.sticky = sticky
        self._sticky_current = sticky.current
        self._switch_after = sticky.switch_after
        self.max_record_size = min(max_request_size - BATCH_HEADER_SIZE, buffer_memory)
        self._order = itertools.count()
        self.memory_used = 0
        self.incomplete = 0  # batches created and not yet completed
        self.completions = 0  # bumped on every completion: waiters for room compare it
        self.flushing = 0
        # Set when appends must fail: the producer closed, or hit a fatal error.
        self.stopped: KafkaError | None = None
        self.wake_sender: Callable[[], None] = lambda: None
        # Set when the sender looks at the queues (ready), cleared by the append that wakes
        # it: a batch started or closed after that look must wake it, even while it is still
        # busy with what it saw, or it would sleep on a stale view (a lost wake-up).
        self.wake_wanted = False
        # What append returns: RecordFuture, or a subclass of the same layout (async).
        self.future_type: type[RecordFuture] = RecordFuture

    # -- the application's side ------------------------------------------------------------

    def append(
        self,
        topic: str,
        partition: int | None,
        info: TopicInfo,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes | None]],
        timestamp: int,
        callback: DeliveryCallback | None,
    ) -> RecordFuture | None:
        """Add a record to `partition` of `topic` (None: the topic's sticky partition); its
        future, or None when the buffer has no room for it now.

        This is the producer's hot path: one lock, no calls beyond the record's encoding.
        """
        size = _RECORD_OVERHEAD + (len(key) if key else 0) + (len(value) if value else 0)
        if headers:
            size += record_size(None, None, headers) - _RECORD_OVERHEAD
        if size > self.max_record_size:
            self._too_large(topic, size)
        wake = False
        lock = self.lock
        lock.acquire()  # not `with`: half the cost here, and as safe with the try below
        try:
            if self.memory_used + size > self.buffer_memory or self.stopped is not None:
                if self.stopped is not None:
                    raise self.stopped
                return None
            choice = None
            if partition is None:
                choice = self._sticky_current.get(topic)
                if choice is None or choice.partition >= len(info.partitions):
                    choice = self._switch(topic, info)
                partition = choice.partition
            open_batches = self._open.get(topic)
            if open_batches is None or partition >= len(open_batches):
                open_batches = self._add_topic(topic, len(info.partitions))
            batch = open_batches[partition]
            if (
                batch is None
                or not batch.is_open
                or (batch.count and batch.size + size > self.batch_size)
            ):
                batch = self._new_batch(topic, partition, open_batches)
                wake = True  # a sleeping sender learns the new batch's linger deadline
            index = batch.count
            try:
                batch.builder.append(value, key, headers, timestamp)
            except Exception:
                if index == 0:  # do not leave an empty batch behind
                    self._drop_empty(batch)
                raise
            batch.count = index + 1
            batch.size += size
            self.memory_used += size
            if callback is not None:
                if batch.callbacks is None:
                    batch.callbacks = []
                batch.callbacks.append((index, timestamp, callback))
            if batch.size >= self.batch_size:
                batch.is_open = False
                wake = True
            if choice is not None:
                choice.produced += size
                if choice.produced >= self._switch_after:
                    self._switch(topic, info)
            if wake and self.wake_wanted:
                self.wake_wanted = False
            else:
                wake = False
        finally:
            lock.release()
        if wake:
            self.wake_sender()
        return _new_tuple(self.future_type, (batch, index, timestamp))

    def append_batch(self, batch: ProducerBatch, partitions: int) -> bool:
        """Queue a batch encoded elsewhere (see batches.py), complete as it is, after
        everything appended to its partition so far; False when buffer.memory has no room
        for it now (a batch larger than all of it goes when the buffer is empty)."""
        tp = batch.tp
        with self.lock:
            if self.stopped is not None:
                raise self.stopped
            if self.memory_used and self.memory_used + batch.size > self.buffer_memory:
                return False
            open_batches = self._open.get(tp.topic)
            if open_batches is None or tp.partition >= len(open_batches):
                open_batches = self._add_topic(tp.topic, partitions)
            previous = open_batches[tp.partition]
            if previous is not None:
                previous.is_open = False  # records produced after it go in a batch after it
                open_batches[tp.partition] = None
            batch.order = (next(self._order),)
            batch.created = monotonic()
            batch.is_open = False
            self._queues.setdefault(tp, deque()).append(batch)
            self.memory_used += batch.size
            self.incomplete += 1
            wake = self.wake_wanted
            self.wake_wanted = False
        if wake:
            self.wake_sender()
        return True

    @staticmethod
    def has_native_append() -> bool:
        return _native_append is not None

    def appender(self) -> Append:
        """`self.append`, or its C twin bound to this accumulator when it is built."""
        if _native_append is None:
            return self.append
        return functools.partial(_native_append, self)

    def _add_topic(self, topic: str, partitions: int) -> list[ProducerBatch | None]:
        """Per-partition state of a topic seen for the first time (or grown)."""
        self._tps[topic] = [TopicPartition(topic, p) for p in range(partitions)]
        previous = self._open.get(topic) or []
        open_batches = self._open[topic] = previous + [None] * (partitions - len(previous))
        return open_batches

    def _new_batch(
        self, topic: str, partition: int, open_batches: list[ProducerBatch | None]
    ) -> ProducerBatch:
        tp = self._tps[topic][partition]
        previous = open_batches[partition]
        if previous is not None:
            previous.is_open = False
        queue = self._queues.get(tp)
        if queue is None:
            queue = self._queues[tp] = deque()
        batch = ProducerBatch(tp, self.compression, monotonic(), (next(self._order),))
        queue.append(batch)
        open_batches[partition] = batch
        self.incomplete += 1
        return batch

    def _drop_empty(self, batch: ProducerBatch) -> None:
        self._queues[batch.tp].remove(batch)
        self._open[batch.tp.topic][batch.tp.partition] = None
        self.incomplete -= 1

    def _switch(self, topic: str, info: TopicInfo) -> StickyChoice:
        sizes = None
        if self.sticky.adaptive:
            queues = self._queues
            sizes = lambda p: len(queues.get(TopicPartition(topic, p)) or ())  # noqa: E731
        return self.sticky.choose(topic, len(info.partitions), info.available, sizes)

    def _too_large(self, topic: str, size: int) -> None:
        limit = (
            f"max.request.size={self.max_request_size}"
            if size + BATCH_HEADER_SIZE > self.max_request_size
            else f"buffer.memory={self.buffer_memory}"
        )
        raise MessageTooLargeError(f"a record of {size} bytes to {topic!r} exceeds {limit}")

    def queue_size(self, partition: int, topic: str) -> int:
        """Batches waiting for a partition (the adaptive partitioner's load signal)."""
        queue = self._queues.get(TopicPartition(topic, partition))
        return len(queue) if queue else 0

    # -- the sender's side -----------------------------------------------------------------

    def ready(self, cluster: Cluster, now: float, delivery_timeout: float) -> ReadyCheck:
        """Nodes with something to send now, and when something else will be (a linger or
        backoff ending, or a batch reaching its delivery timeout)."""
        check = ReadyCheck()
        linger = self.linger
        hurry = self.flushing > 0 or self.stopped is not None
        limit = self.max_in_flight_per_partition
        with self.lock:
            self.wake_wanted = True
            for tp, queue in self._queues.items():
                if not queue:
                    continue
                first = queue[0]
                check.next_check = min(check.next_check, first.created + delivery_timeout)
                if self._in_flight.get(tp, 0) >= limit:
                    continue
                leader = cluster.leader_for(tp)
                if leader < 0:
                    check.unknown_leaders.add(tp.topic)
                    continue
                if first.retry_at > now:
                    check.next_check = min(check.next_check, first.retry_at)
                elif hurry or not first.is_open or len(queue) > 1 or now - first.created >= linger:
                    check.nodes.add(leader)
                else:
                    check.next_check = min(check.next_check, first.created + linger)
        return check

    def drain(
        self, cluster: Cluster, nodes: set[int], now: float
    ) -> tuple[dict[int, list[ProducerBatch]], bool]:
        """Take the first sendable batch of each partition led by these nodes, up to
        max.request.size per node. Drained batches count as in flight until done. Also
        says whether batches are left behind for these nodes (the next of a partition, or
        one over the request's size) that a drain right away might take."""
        out: dict[int, list[ProducerBatch]] = {}
        sizes: dict[int, int] = {}
        left = False
        limit = self.max_in_flight_per_partition
        with self.lock:
            for tp, queue in self._queues.items():
                if not queue or self._in_flight.get(tp, 0) >= limit:
                    continue
                leader = cluster.leader_for(tp)
                if leader not in nodes:
                    continue
                first = queue[0]
                if first.retry_at > now:
                    continue
                size = first.size + BATCH_HEADER_SIZE
                if out.get(leader) and sizes[leader] + size > self.max_request_size:
                    left = True
                    continue
                queue.popleft()
                first.is_open = False
                self._in_flight[tp] = self._in_flight.get(tp, 0) + 1
                out.setdefault(leader, []).append(first)
                sizes[leader] = sizes.get(leader, 0) + size
                left = left or bool(queue)
        return out, left

    def expire(self, now: float, delivery_timeout: float) -> list[ProducerBatch]:
        """Remove queued batches older than delivery.timeout.ms (the caller fails them)."""
        expired: list[ProducerBatch] = []
        with self.lock:
            for queue in self._queues.values():
                while queue and now - queue[0].created >= delivery_timeout:
                    batch = queue.popleft()
                    batch.is_open = False
                    expired.append(batch)
        return expired

    def reenqueue(self, batch: ProducerBatch, retry_at: float) -> None:
        """Put a batch back in its queue, before every batch created after it, for a retry
        after its backoff (with several in flight, failures may come back in any order)."""
        with self.lock:
            batch.retry_at = retry_at
            self._in_flight[batch.tp] -= 1
            queue = self._queues.setdefault(batch.tp, deque())
            at = next((i for i, b in enumerate(queue) if b.order > batch.order), len(queue))
            queue.insert(at, batch)

    def split(self, batch: ProducerBatch) -> list[ProducerBatch]:
        """Replace an in-flight batch the broker found too large (it holds two records or
        more) with two parts, each about half its bytes, queued where it was: before every
        batch created after it. The parts hold its share of buffer.memory; it completes
        once they have (the sender sees to that). A part still too large splits again."""
        records = [r for b in iter_batches(batch.seal()) for r in b.records()]
        sizes = [record_size(r.key, r.value, r.headers) for r in records]
        cut, half = 1, sizes[0]
        while cut < len(records) - 1 and half + sizes[cut] <= batch.size // 2:
            half += sizes[cut]
            cut += 1
        parts: list[tuple[int, ProducerBatch]] = []
        for k, (start, stop) in enumerate(((0, cut), (cut, len(records)))):
            # Ordered after everything before the batch and before everything after it.
            part = ProducerBatch(batch.tp, self.compression, batch.created, (*batch.order, k))
            part.parent = batch
            part.attempts = batch.attempts
            for record in records[start:stop]:
                part.builder.append(record.value, record.key, record.headers, record.timestamp)
            part.count = stop - start
            part.size = sum(sizes[start:stop])
            parts.append((start, part))
        with self.lock:
            batch.parts = parts
            batch.unsettled_parts = len(parts)
            self.memory_used += sum(p.size for _, p in parts) - batch.size
            batch.size = 0
            self.incomplete += len(parts)
            self._in_flight[batch.tp] -= 1
            queue = self._queues.setdefault(batch.tp, deque())
            at = next((i for i, b in enumerate(queue) if b.order > batch.order), len(queue))
            for _, part in reversed(parts):
                queue.insert(at, part)
        return [part for _, part in parts]

    def sent(self, batch: ProducerBatch) -> None:
        """A drained batch is no longer in flight (it completed or will be re-enqueued)."""
        with self.lock:
            self._in_flight[batch.tp] -= 1

    def completed(self, batches: Sequence[ProducerBatch]) -> None:
        """Account for batches that reached their outcome: memory back, flush progress."""
        with self.lock:
            for batch in batches:
                self.memory_used -= batch.size
                self.incomplete -= 1
            self.completions += 1
            self.changed.notify_all()
        for listener in self.listeners:
            listener()

    def abort_all(self, error: KafkaError) -> list[ProducerBatch]:
        """Take every queued batch out (the caller fails them with `error`)."""
        with self.lock:
            batches = [b for queue in self._queues.values() for b in queue]
            for queue in self._queues.values():
                queue.clear()
        for batch in batches:
            batch.is_open = False
        return batches

    def stop(self, error: KafkaError) -> None:
        """No more appends: each one raises `error` from now on."""
        with self.lock:
            if self.stopped is None:
                self.stopped = error

    def has_unsent(self) -> bool:
        with self.lock:
            return any(self._queues.values())

    def queued_partitions(self) -> list[TopicPartition]:
        """The partitions with batches waiting to be sent."""
        with self.lock:
            return [tp for tp, queue in self._queues.items() if queue]


Append = Callable[
    [
        str,
        int | None,
        TopicInfo,
        bytes | None,
        bytes | None,
        Sequence[tuple[str, bytes | None]],
        int,
        DeliveryCallback | None,
    ],
    RecordFuture | None,
]


def _bind_native() -> Callable[..., RecordFuture | None] | None:
    bind = native_function("bind", "gregor.client.producer._accumulate")
    if bind is None:
        return None
    # The classes whose slots it reads and writes (by offset: they have __slots__).
    append: Callable[..., RecordFuture | None] = bind(
        Accumulator, ProducerBatch, StickyChoice, RecordFuture
    )
    return append


# Accumulator.append's C twin: (accumulator, *append's arguments) -> the same result.
_native_append = _bind_native()
