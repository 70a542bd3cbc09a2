"""AsyncConsumer: the consumer for trio and asyncio code.

    async with AsyncConsumer({"bootstrap.servers": "...", "group.id": "billing"}) as consumer:
        consumer.subscribe(["orders"])
        async for record in consumer:
            await handle(record)

Under trio the core (fetcher, heartbeats) runs in the caller's loop; under asyncio on an
I/O thread. Fetched batches are handed over without a hop per record. Rebalance listeners
run on the caller's loop, and may be coroutine functions.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, TypeVar

from gregor.client.consumer.base import ConsumerBase
from gregor.client.consumer.batches import FetchedBatch, take_batches
from gregor.client.consumer.core import ConsumerCore, IoStep, ListenerCall, SpawnStep
from gregor.client.consumer.records import ConsumerRecord
from gregor.client.runtime import AsyncBridge, AsyncClient, ClientClosedError, Signal, awaiting
from gregor.client.types import OffsetAndMetadata, TopicPartition

T = TypeVar("T")


class AsyncConsumer(ConsumerBase, AsyncClient):
    def __init__(self, config: Mapping[str, Any]) -> None:
        super().__init__(config)
        self._service = self._core.run
        self._bridge = AsyncBridge(f"gregor-consumer-{self.config.client_id}")
        self._data: Signal | None = None

    def _started(self) -> None:
        self._data = data = self._bridge.signal()
        self._core.buffer.listeners.append(data.set)

    async def unsubscribe(self) -> None:
        listener = self._core.subscriptions.listener
        await self._run_listener(self._core.unsubscribe(), listener)
        if self._core.coordinator is not None:
            await self._bridge.call(self._core.coordinator.leave, "unsubscribed")

    # -- reading ---------------------------------------------------------------------------

    async def getone(self, timeout: float | None = None) -> ConsumerRecord | None:
        """The next record, waiting up to `timeout` seconds (None: until one arrives)."""
        records = await self._fetch(1, timeout)
        return records[0] if records else None

    poll = getone

    async def getmany(
        self, max_records: int | None = None, timeout: float | None = 0.0
    ) -> list[ConsumerRecord]:
        """Up to `max_records` records (default: max.poll.records), waiting up to `timeout`
        seconds for the first."""
        return await self._fetch(max_records or self.config.max_poll_records, timeout)

    async def getmany_batches(
        self, max_records: int | None = None, timeout: float | None = 0.0
    ) -> list[FetchedBatch]:
        """Fetched record batches as bytes, whole fetches at a time up to about
        `max_records` records (default: max.poll.records), waiting up to `timeout` seconds
        for the first (see consumer/batches.py)."""
        return await self._take_waiting(
            take_batches, max_records or self.config.max_poll_records, timeout
        )

    def __aiter__(self) -> AsyncIterator[ConsumerRecord]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[ConsumerRecord]:
        while not self._closed:
            for record in await self._fetch(self.config.max_poll_records, 1.0):
                yield record

    async def _fetch(self, max_records: int, timeout: float | None) -> list[ConsumerRecord]:
        return await self._take_waiting(ConsumerCore.take, max_records, timeout)

    async def _take_waiting(
        self, take: Callable[[ConsumerCore, int], list[T]], max_records: int, timeout: float | None
    ) -> list[T]:
        self._ensure_open()
        core = self._core
        data = self._data
        if data is None:
            raise RuntimeError("the consumer is not started (use `async with`)")
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                await self._prepare()
            except ClientClosedError:
                if self._closed:  # another task closed the consumer during this getmany
                    return []
                raise
            data.clear()
            records = take(core, max_records)
            if records:
                return records
            remaining = None if deadline is None else deadline - time.monotonic()
            if self._closed or (remaining is not None and remaining <= 0):
                return []
            if not core.has_records():
                await data.wait(1.0 if remaining is None else min(remaining, 1.0))

    async def _prepare(self) -> None:
        """What getmany() does before handing out records (rebalance, auto commit,
        positions)."""
        self._ensure_open()
        steps = self._core.poll_steps()
        result: Any = None
        while True:
            try:
                step = steps.send(result)
            except StopIteration:
                return
            result = None
            if isinstance(step, IoStep):
                result = await self._bridge.call(step.fn, *step.args)
            elif isinstance(step, SpawnStep):
                self._bridge.spawn(step.fn, *step.args)
            else:
                await self._run_listener(step.calls)

    def _ensure_open(self) -> None:
        if self._closed:
            raise ClientClosedError("the consumer is closed")

    async def _run_listener(self, calls: list[ListenerCall], listener: object = None) -> None:
        for result in self._core.run_listener(calls, self, listener):
            if inspect.isawaitable(result):
                await result

    # -- positions, commits, lookups -------------------------------------------------------

    async def commit(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None
    ) -> None:
        """Commit offsets (default: the positions of everything handed out so far)."""
        chosen = self._core.positions_to_commit() if offsets is None else offsets
        await self._bridge.call(self._core.commit_offsets, chosen)

    committed = awaiting(ConsumerCore.committed)
    position = awaiting(ConsumerCore.position)
    offsets_for_times = awaiting(ConsumerCore.offsets_for_times)
    beginning_offsets = awaiting(ConsumerCore.beginning_offsets)
    end_offsets = awaiting(ConsumerCore.end_offsets)
    partitions_for = awaiting(ConsumerCore.partitions_for)
    list_topics = awaiting(ConsumerCore.list_topics)

    async def close(self, *, commit: bool = True) -> None:
        if self._closed:
            return
        # Closed first, so that a getmany or an iteration in another task ends (with no
        # records) instead of starting more work on a core that is about to stop.
        self._closed = True
        if self._data is not None:
            self._data.set()
        try:
            if self._core.subscriptions.group_managed:
                await self._run_listener(self._core._revoke_all())
            await self._bridge.call(self._core.close, commit)
        finally:
            await super().close()
