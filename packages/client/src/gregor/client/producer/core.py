"""The producer's core, shared by Producer and AsyncProducer.

The part that runs in the caller's thread (`append_record`, then `Accumulator.append`, each
with a C twin for its common case) serializes, picks the partition and encodes the record
into its batch; the part on the trio loop (`run`) keeps metadata fresh and sends. The
wrappers only decide how to wait: for metadata of a new topic, for room in the buffer, for
a flush.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from time import time_ns
from typing import Any

import trio

from gregor.client.config import ProducerConfig
from gregor.client.network import NetworkClient
from gregor.client.partitioner import StickyPartitions, key_partitioner
from gregor.client.producer.accumulator import Accumulator
from gregor.client.producer.batch import DeliveryCallback, RecordFuture
from gregor.client.producer.sender import Sender
from gregor.client.producer.transactions import TransactionAbortedError, TransactionManager
from gregor.client.serialization import serializer
from gregor.client.types import ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition, as_offsets
from gregor.client.wakeup import Wakeup
from gregor.protocol.errors import KafkaError, UnknownTopicOrPartitionError
from gregor.protocol.native import native_function
from gregor.protocol.records import Compression

Headers = Mapping[str, bytes | str | None] | Iterable[tuple[str, bytes | str | None]] | None

_CODECS = {
    "none": Compression.NONE,
    "gzip": Compression.GZIP,
    "snappy": Compression.SNAPPY,
    "lz4": Compression.LZ4,
    "zstd": Compression.ZSTD,
}


def normalize_headers(headers: Headers) -> list[tuple[str, bytes | None]]:
    if not headers:
        return []
    items = headers.items() if isinstance(headers, Mapping) else headers
    out: list[tuple[str, bytes | None]] = []
    for name, value in items:
        if not isinstance(name, str):
            raise TypeError(f"header names are str, not {type(name).__name__}")
        out.append((name, value.encode() if isinstance(value, str) else value))
    return out


class NeedMetadata(Exception):
    """`append_record` cannot choose a partition before metadata knows the topic."""

    def __init__(self, topic: str) -> None:
        super().__init__(topic)
        self.topic = topic


class ProducerCore:
    def __init__(self, config: ProducerConfig) -> None:
        self.config = config
        # Ordering with retries needs one batch in flight per partition, unless nothing is
        # retried; the sender allows more once the broker numbers batches (idempotence).
        per_partition = config.max_in_flight_requests_per_connection if config.retries == 0 else 1
        self.client = NetworkClient(
            config, max_in_flight=config.max_in_flight_requests_per_connection
        )
        sticky = StickyPartitions(
            config.batch_size, adaptive=config.partitioner_adaptive_partitioning_enable
        )
        self.accumulator = Accumulator(
            batch_size=config.batch_size,
            linger_ms=config.linger_ms,
            buffer_memory=config.buffer_memory,
            compression=_CODECS[config.compression_type],
            max_request_size=config.max_request_size,
            max_in_flight_per_partition=per_partition,
            sticky=sticky,
        )
        self._append = self.accumulator.appender()  # the hot path's last step, bound once
        self.transactions = TransactionManager(config, self.client)
        self.sender = Sender(config, self.accumulator, self.client, self.transactions)
        self.key_serializer = serializer(config.key_serializer, "key.serializer")
        self.value_serializer = serializer(config.value_serializer, "value.serializer")
        self.serializing = self.key_serializer is not None or self.value_serializer is not None
        self.partition_for_key = key_partitioner(config.partitioner, config.partitioner_ignore_keys)
        # Every built-in sends a missing key to the sticky partition except murmur2 and
        # consistent, which hash it as empty; those ask the key partitioner.
        self.keyless_is_sticky = self.partition_for_key(".", None, 1) is None
        # What the C twin of append_record takes: records as given, keyless ones sticky.
        self.plain = self.keyless_is_sticky and not self.serializing
        # append_record, or its C twin bound to this core: what produce() calls.
        self.record_appender: RecordAppender = (
            self.append_record
            if _native_append_record is None
            else functools.partial(_native_append_record, self)
        )
        self.max_block = config.max_block_ms / 1000

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(self.client.run)
            await nursery.start(self.sender.run)
            task_status.started()

    # -- the caller's side -----------------------------------------------------------------

    def append_record(
        self,
        topic: str,
        value: Any,
        key: Any,
        partition: int | None,
        headers: Headers,
        timestamp: int | None,
        on_delivery: DeliveryCallback | None,
    ) -> RecordFuture | None:
        """Serialize, partition and append one record: its future, or None when the buffer
        has no room now. Raises NeedMetadata while the topic's partitions are unknown.

        This runs in the caller's thread for every record, so it is written flat.
        """
        info = self.client.cluster.topics.get(topic)
        if info is None:
            if not isinstance(topic, str) or not topic:
                raise TypeError(f"topic must be a non-empty str, not {topic!r}")
            raise NeedMetadata(topic)
        if self.serializing:
            if self.key_serializer is not None:
                key = self.key_serializer(key, topic)
            if self.value_serializer is not None:
                value = self.value_serializer(value, topic)
        if partition is None:
            if key is not None or not self.keyless_is_sticky:
                partition = self.partition_for_key(topic, key, len(info.partitions))
        elif not 0 <= partition < len(info.partitions):
            raise UnknownTopicOrPartitionError(
                f"partition {partition} of topic {topic!r} does not exist "
                f"(it has {len(info.partitions)} partitions)"
            )
        if timestamp is None:
            timestamp = time_ns() // 1_000_000
        return self._append(
            topic,
            partition,
            info,
            key,
            value,
            normalize_headers(headers) if headers else (),
            timestamp,
            on_delivery,
        )

    def partitions_for(self, topic: str) -> Sequence[int] | None:
        count = self.client.cluster.partition_count(topic)
        return None if count is None else list(range(count))

    # -- the loop's side -------------------------------------------------------------------

    async def wait_for_topic(self, topic: str) -> None:
        await self.client.wait_for_topic(topic, self.max_block)

    async def flush(self, timeout: float | None = None) -> int:
        """Send everything queued and wait for it to settle (on the loop); how many batches
        are still outstanding."""
        accumulator = self.accumulator
        settled = Wakeup()
        settled.bind()
        accumulator.listeners.append(settled.set)
        with accumulator.lock:
            accumulator.flushing += 1
        self.sender.wake()
        try:
            with trio.move_on_after(math.inf if timeout is None else timeout):
                while accumulator.incomplete:
                    settled.clear()
                    await settled.wait(math.inf)
        finally:
            accumulator.listeners.remove(settled.set)
            with accumulator.lock:
                accumulator.flushing -= 1
        return accumulator.incomplete

    # -- transactions ----------------------------------------------------------------------

    async def init_transactions(self) -> None:
        """Get the producer id and epoch of this transactional.id (fencing older ones)."""
        await self.transactions.init_transactions()
        # The broker orders a partition's numbered batches: several may fly.
        self.accumulator.max_in_flight_per_partition = (
            self.config.max_in_flight_requests_per_connection
        )

    async def send_offsets_to_transaction(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
        group_metadata: ConsumerGroupMetadata | str,
    ) -> None:
        """Commit consumed offsets as part of the transaction (read-process-write), for the
        consumer's `group_metadata()` (a bare group id skips the generation check)."""
        if isinstance(group_metadata, str):
            group_metadata = ConsumerGroupMetadata(group_metadata)
        await self.transactions.send_offsets(as_offsets(offsets), group_metadata)

    async def commit_transaction(self) -> None:
        """Send what is queued, then commit; raises TransactionAbortableError when a record
        (or the offsets) could not join the transaction."""
        self.transactions.check_commit()
        await self.flush()
        await self.transactions.end(True)

    async def abort_transaction(self) -> None:
        """Abort, as the Java client does: what is queued and not sent yet is dropped (its
        records fail with TransactionAbortedError), what is in flight is waited for, then
        the coordinator writes the abort markers."""
        self.transactions.abort_started()
        self.sender._fail_all(
            TransactionAbortedError("the transaction was aborted before these records were sent")
        )
        await self.flush()
        await self.transactions.end(False)

    async def close(self, timeout: float) -> None:
        """Send what is queued, wait up to `timeout`, then fail whatever is left."""
        self.sender.closing = True
        await self.flush(timeout)
        error = KafkaError("the producer was closed before these records were sent")
        self.accumulator.stop(KafkaError("the producer is closed"))
        self.sender._fail_all(error)


RecordAppender = Callable[
    [str, Any, Any, int | None, Headers, int | None, DeliveryCallback | None],
    RecordFuture | None,
]


def _bind_native() -> Callable[..., RecordFuture | None] | None:
    """ProducerCore.append_record's C twin, when the accumulator's append has one."""
    bind = native_function("bind_core", "gregor.client.producer._accumulate")
    if bind is None or not Accumulator.has_native_append():
        return None
    append_record: Callable[..., RecordFuture | None] = bind(ProducerCore)
    return append_record


_native_append_record = _bind_native()
