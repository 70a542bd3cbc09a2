"""Producer: the blocking producer (confluent-kafka's shape), its I/O on a background thread.

    producer = Producer({"bootstrap.servers": "127.0.0.1:9092"})
    future = producer.produce("orders", b"value", key=b"key", on_delivery=report)
    producer.flush()
    future.result().offset

produce() serializes, partitions and appends the record to its batch right here, in the
calling thread; the I/O thread only ships batches. Delivery callbacks (`on_delivery`) run
in the thread that calls poll() or flush(), as confluent-kafka does, so application code
never runs on the I/O thread.
"""

from __future__ import annotations

import collections
import functools
import time
from collections.abc import Callable, Mapping
from typing import Any

from gregor.client.config import ProducerConfig
from gregor.client.producer.batch import DeliveryCallback, ProducerBatch, RecordFuture
from gregor.client.producer.batches import append_batch
from gregor.client.producer.core import Headers, NeedMetadata, ProducerCore
from gregor.client.runtime import IOThread, blocking
from gregor.protocol.errors import RequestTimedOutError


class Producer:
    def __init__(self, config: Mapping[str, Any]) -> None:
        self.config = ProducerConfig.from_dict(config)
        self._core = ProducerCore(self.config)
        self._append = self._core.record_appender  # produce()'s hot path, bound once
        self._delivered: collections.deque[ProducerBatch] = collections.deque()
        self._core.sender.delivered = self._delivered.append
        self._io = IOThread(f"gregor-producer-{self.config.client_id}")
        self._io.start(self._core.run)
        self._closed = False

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Producer {self.config.client_id}>"

    # -- producing -------------------------------------------------------------------------

    def produce(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        headers: Headers = None,
        timestamp: int | None = None,
        on_delivery: DeliveryCallback | None = None,
    ) -> RecordFuture:
        """Queue a record for sending; its future resolves once the broker acknowledges it.

        Blocks (up to max.block.ms) only to learn a new topic's partitions or to wait for
        room in buffer.memory.
        """
        try:
            future = self._append(topic, value, key, partition, headers, timestamp, on_delivery)
        except NeedMetadata:
            future = None
        if future is None:  # the slow path: a new topic, or a full buffer
            future = self._produce_waiting(
                functools.partial(
                    self._append, topic, value, key, partition, headers, timestamp, on_delivery
                ),
                topic,
            )
        return future

    def produce_batch(
        self, topic: str, partition: int, data: bytes | bytearray | memoryview
    ) -> RecordFuture:
        """Queue one record batch encoded elsewhere (v2, e.g. as a consumer fetched it), to
        be sent as it is (see producer/batches.py): the sync twin of
        AsyncProducer.produce_batch. Its future gives the metadata of its first record."""
        append = functools.partial(append_batch, self._core, topic, partition, data)
        try:
            future = append()
        except NeedMetadata:
            future = None
        return self._produce_waiting(append, topic) if future is None else future

    def _produce_waiting(
        self, attempt: Callable[[], RecordFuture | None], topic: str
    ) -> RecordFuture:
        """produce() when the topic is new or the buffer is full: wait, up to max.block.ms."""
        core = self._core
        accumulator = core.accumulator
        deadline = time.monotonic() + core.max_block
        while True:
            completions = accumulator.completions
            try:
                future = attempt()
            except NeedMetadata:
                self._io.call(core.wait_for_topic, topic)
                continue
            if future is not None:
                return future
            now = time.monotonic()
            with accumulator.changed:
                if accumulator.completions != completions:
                    continue  # room was made since we tried
                if now >= deadline or not accumulator.changed.wait(deadline - now):
                    raise RequestTimedOutError(
                        f"no room in buffer.memory ({accumulator.buffer_memory} bytes) "
                        f"for a record to {topic!r} within max.block.ms"
                    )

    def poll(self, timeout: float = 0.0) -> int:
        """Run the delivery callbacks of records settled so far; returns how many ran.
        Waits up to `timeout` seconds for at least one when there are none yet."""
        deadline = time.monotonic() + timeout
        served = self._serve_callbacks()
        accumulator = self._core.accumulator
        while not served and timeout > 0:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or accumulator.incomplete == 0:
                break
            with accumulator.changed:
                accumulator.changed.wait(remaining)
            served = self._serve_callbacks()
        return served

    def _serve_callbacks(self) -> int:
        served = 0
        delivered = self._delivered
        while delivered:
            batch = delivered.popleft()
            batch.run_delivery_callbacks()
            served += len(batch.callbacks or ())
        return served

    def flush(self, timeout: float | None = None) -> int:
        """Send everything queued and wait for it to settle; returns how many batches are
        still outstanding (0 unless the timeout passed). Runs delivery callbacks."""
        accumulator = self._core.accumulator
        deadline = None if timeout is None else time.monotonic() + timeout
        with accumulator.lock:
            accumulator.flushing += 1
        self._core.sender.wake()
        try:
            with accumulator.changed:
                while accumulator.incomplete:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        break
                    accumulator.changed.wait(remaining)
        finally:
            with accumulator.lock:
                accumulator.flushing -= 1
        self._serve_callbacks()
        return accumulator.incomplete

    def partitions_for(self, topic: str) -> list[int]:
        """The partition ids of a topic (waiting for its metadata, up to max.block.ms)."""
        partitions = self._core.partitions_for(topic)
        if partitions is None:
            self._io.call(self._core.wait_for_topic, topic)
            partitions = self._core.partitions_for(topic) or []
        return list(partitions)

    def close(self, timeout: float | None = None) -> None:
        """Send what is queued (waiting up to `timeout`, default forever), then stop."""
        if self._closed:
            return
        self._closed = True
        limit = float("inf") if timeout is None else timeout
        try:
            self._io.call(self._core.close, limit)
        finally:
            self._io.stop()
            self._serve_callbacks()

    # -- transactions ----------------------------------------------------------------------

    init_transactions = blocking(ProducerCore.init_transactions)
    send_offsets_to_transaction = blocking(ProducerCore.send_offsets_to_transaction)
    commit_transaction = blocking(ProducerCore.commit_transaction)
    abort_transaction = blocking(ProducerCore.abort_transaction)

    def begin_transaction(self) -> None:
        self._core.transactions.begin()
