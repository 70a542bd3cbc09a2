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
import time
from collections.abc import Generator, Mapping
from typing import Any

from gregor.client.config import ProducerConfig
from gregor.client.producer.batch import DeliveryCallback, ProducerBatch, RecordFuture
from gregor.client.producer.core import Headers, NeedMetadata, ProducerCore
from gregor.client.runtime import AsyncBridge, Signal
from gregor.client.types import OffsetAndMetadata, RecordMetadata, TopicPartition, as_offsets
from gregor.protocol.errors import RequestTimedOutError


class AsyncRecordFuture:
    """A record's delivery, to await: `metadata = await future`."""

    __slots__ = ("_future", "_library")

    def __init__(self, future: RecordFuture, library: str) -> None:
        self._future = future
        self._library = library

    def done(self) -> bool:
        return self._future.done()

    def result(self) -> RecordMetadata:
        """The outcome of a future that is done (raises its error)."""
        return self._future.result(0)

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        return self._wait().__await__()

    async def _wait(self) -> RecordMetadata:
        if not self._future.done():
            signal = Signal(self._library)
            self._future.add_done_callback(lambda _: signal.set())
            await signal.wait(None)
        return self._future.result(0)


class AsyncProducer:
    def __init__(self, config: Mapping[str, Any]) -> None:
        self.config = ProducerConfig.from_dict(config)
        self._core = ProducerCore(self.config)
        self._bridge = AsyncBridge(f"gregor-producer-{self.config.client_id}")
        self._changed: Signal | None = None
        self._closed = False

    async def start(self) -> None:
        await self._bridge.start(self._core.run)
        self._changed = changed = self._bridge.signal()
        self._core.accumulator.listeners.append(changed.set)
        if self._bridge.library == "trio":
            self._core.sender.delivered = ProducerBatch.run_delivery_callbacks
        else:
            loop = asyncio.get_running_loop()

            def deliver(batch: ProducerBatch) -> None:
                loop.call_soon_threadsafe(batch.run_delivery_callbacks)

            self._core.sender.delivered = deliver

    async def __aenter__(self) -> AsyncProducer:
        await self.start()
        self._bridge.in_context = True
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self.close()
        finally:
            await self._bridge.stop(leaving_context=True)

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
        core = self._core
        changed = self._signal()
        accumulator = core.accumulator
        deadline = 0.0
        while True:
            completions = accumulator.completions
            changed.clear()
            try:
                future = core.append_record(
                    topic, value, key, partition, headers, timestamp, on_delivery
                )
            except NeedMetadata:
                await self._bridge.call(core.wait_for_topic, topic)
                continue
            if future is not None:
                return AsyncRecordFuture(future, self._bridge.library)
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

    async def flush(self, timeout: float | None = None) -> int:
        """Send everything queued and wait for it to settle; how many batches remain."""
        accumulator = self._core.accumulator
        changed = self._signal()
        deadline = None if timeout is None else time.monotonic() + timeout
        with accumulator.lock:
            accumulator.flushing += 1
        self._core.sender.wake()
        try:
            while True:
                changed.clear()
                if not accumulator.incomplete:
                    break
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    break
                await changed.wait(remaining)
        finally:
            with accumulator.lock:
                accumulator.flushing -= 1
        return accumulator.incomplete

    async def close(self, timeout: float | None = None) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            await self._bridge.call(self._core.close, float("inf") if timeout is None else timeout)
        finally:
            await self._bridge.stop()

    async def partitions_for(self, topic: str) -> list[int]:
        if self._core.partitions_for(topic) is None:
            await self._bridge.call(self._core.wait_for_topic, topic)
        return list(self._core.partitions_for(topic) or [])

    # -- transactions ----------------------------------------------------------------------

    async def init_transactions(self) -> None:
        await self._bridge.call(self._core.transactions.init_transactions)

    def begin_transaction(self) -> None:
        self._core.transactions.begin()

    async def send_offsets_to_transaction(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
        group_id: str,
        generation_id: int = -1,
        member_id: str = "",
        group_instance_id: str | None = None,
    ) -> None:
        normalized = as_offsets(offsets)
        await self._bridge.call(
            self._core.transactions.send_offsets,
            normalized,
            group_id,
            generation_id,
            member_id,
            group_instance_id,
        )

    async def commit_transaction(self) -> None:
        await self.flush()
        await self._bridge.call(self._core.transactions.end, True)

    async def abort_transaction(self) -> None:
        await self.flush()
        await self._bridge.call(self._core.transactions.end, False)


__all__ = ["AsyncProducer", "AsyncRecordFuture"]
