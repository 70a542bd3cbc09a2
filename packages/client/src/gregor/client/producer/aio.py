"""AsyncProducer: the producer for trio and asyncio code.

    async with AsyncProducer({"bootstrap.servers": "127.0.0.1:9092"}) as producer:
        metadata = await producer.send("orders", b"value", key=b"key")   # delivered
        future = await producer.produce("orders", b"next")               # queued
        await producer.flush()

Under trio the core runs in the caller's own loop (in a nursery the producer opens); under
asyncio it runs on an I/O thread and results come back through the asyncio loop. Either
way, produce() appends to the batch in the caller's thread, without a hop per record.
Delivery callbacks (`on_delivery`) run on the caller's event loop.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Generator, Mapping
from typing import Any

import trio

from gregor.client.config import ProducerConfig
from gregor.client.producer.batch import DeliveryCallback, ProducerBatch, RecordFuture
from gregor.client.producer.batches import append_batch
from gregor.client.producer.core import Headers, NeedMetadata, ProducerCore
from gregor.client.runtime import AsyncBridge, AsyncClient, Signal, awaiting, current_library
from gregor.client.types import RecordMetadata
from gregor.protocol.errors import RequestTimedOutError


class AsyncRecordFuture(RecordFuture):
    """A record's delivery, to await: `metadata = await future`.

    A RecordFuture that the accumulator makes as such (one C call per record); which event
    loop waits for it is found when it is awaited.
    """

    __slots__ = ()

    def result(self, timeout: float | None = 0) -> RecordMetadata:
        """The outcome of a future that is done (raises its error); never blocks."""
        return super().result(timeout)

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        return self._wait().__await__()

    async def _wait(self) -> RecordMetadata:
        if not self.done():
            signal = Signal(current_library())
            self.add_done_callback(lambda _: signal.set())
            await signal.wait(None)
        return self.result(0)


class AsyncProducer(AsyncClient):
    def __init__(self, config: Mapping[str, Any]) -> None:
        self.config = ProducerConfig.from_dict(config)
        self._core = ProducerCore(self.config)
        self._service = self._core.run
        self._bridge = AsyncBridge(f"gregor-producer-{self.config.client_id}")
        self._changed: Signal | None = None
        self._closed = False
        self._shares_loop = False  # the core runs in the caller's loop (trio)
        self._append: Callable[..., RecordFuture | None] = self._not_started
        self._core.accumulator.future_type = AsyncRecordFuture

    def _not_started(self, *args: object) -> RecordFuture | None:
        raise RuntimeError("the producer is not started (use `async with`)")

    def _started(self) -> None:
        self._changed = changed = self._bridge.signal()
        self._shares_loop = self._bridge.library == "trio"
        self._append = self._core.record_appender  # produce()'s hot path, bound once
        self._core.accumulator.listeners.append(changed.set)
        if self._bridge.library == "trio":
            self._core.sender.delivered = ProducerBatch.run_delivery_callbacks
        else:
            loop = asyncio.get_running_loop()

            def deliver(batch: ProducerBatch) -> None:
                loop.call_soon_threadsafe(batch.run_delivery_callbacks)

            self._core.sender.delivered = deliver

    def _signal(self) -> Signal:
        if self._changed is None:
            raise RuntimeError("the producer is not started (use `async with`)")
        return self._changed

    async def produce(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        headers: Headers = None,
        timestamp: int | None = None,
        on_delivery: DeliveryCallback | None = None,
    ) -> AsyncRecordFuture:
        """Queue a record; await the returned future for its delivery. Waits (up to
        max.block.ms) only for a new topic's metadata or for room in buffer.memory."""
        try:
            future = self._append(topic, value, key, partition, headers, timestamp, on_delivery)
        except NeedMetadata:
            future = None
        if future is None:  # the slow path: a new topic, or a full buffer
            future = await self._produce_waiting(
                functools.partial(
                    self._append, topic, value, key, partition, headers, timestamp, on_delivery
                ),
                topic,
            )
        if future[1] == 0 and self._shares_loop:
            # The sender runs in this loop: a record that starts a batch (likely the one
            # before it filled up) lets it ship, so a loop that never waits still streams.
            await trio.lowlevel.checkpoint()
        return future  # type: ignore[return-value]  # the accumulator makes AsyncRecordFutures

    async def produce_batch(
        self, topic: str, partition: int, data: bytes | bytearray | memoryview
    ) -> AsyncRecordFuture:
        """Queue one record batch encoded elsewhere (v2, e.g. as a consumer fetched it), to
        be sent as it is: no record is decoded or recompressed (see producer/batches.py).
        Await the returned future for the metadata of its first record: the base offset
        the broker assigned (record `i` of the batch is at that offset + i)."""
        append = functools.partial(append_batch, self._core, topic, partition, data)
        if self._changed is None:
            raise RuntimeError("the producer is not started (use `async with`)")
        try:
            future = append()
        except NeedMetadata:
            future = None
        if future is None:
            future = await self._produce_waiting(append, topic)
        elif self._shares_loop:
            await trio.lowlevel.checkpoint()  # the sender runs in this loop: let it ship
        return future  # type: ignore[return-value]  # the accumulator makes AsyncRecordFutures

    async def _produce_waiting(
        self, attempt: Callable[[], RecordFuture | None], topic: str
    ) -> RecordFuture:
        core = self._core
        changed = self._signal()
        accumulator = core.accumulator
        deadline = 0.0
        while True:
            completions = accumulator.completions
            changed.clear()
            try:
                future = attempt()
            except NeedMetadata:
                await self._bridge.call(core.wait_for_topic, topic)
                continue
            if future is not None:
                return future
            now = time.monotonic()
            deadline = deadline or now + core.max_block
            if accumulator.completions != completions:
                continue
            if now >= deadline or not await changed.wait(deadline - now):
                raise RequestTimedOutError(
                    f"no room in buffer.memory ({accumulator.buffer_memory} bytes) for a "
                    f"record to {topic!r} within max.block.ms"
                )

    async def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        headers: Headers = None,
        timestamp: int | None = None,
    ) -> RecordMetadata:
        """Produce one record and wait for its delivery."""
        future = await self.produce(topic, value, key, partition, headers, timestamp)
        return await future

    flush = awaiting(ProducerCore.flush)

    async def close(self, timeout: float | None = None) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            await self._bridge.call(self._core.close, float("inf") if timeout is None else timeout)
        finally:
            await super().close()

    async def partitions_for(self, topic: str) -> list[int]:
        if self._core.partitions_for(topic) is None:
            await self._bridge.call(self._core.wait_for_topic, topic)
        return list(self._core.partitions_for(topic) or [])

    # -- transactions ----------------------------------------------------------------------

    init_transactions = awaiting(ProducerCore.init_transactions)
    send_offsets_to_transaction = awaiting(ProducerCore.send_offsets_to_transaction)
    commit_transaction = awaiting(ProducerCore.commit_transaction)
    abort_transaction = awaiting(ProducerCore.abort_transaction)

    def begin_transaction(self) -> None:
        self._core.transactions.begin()
