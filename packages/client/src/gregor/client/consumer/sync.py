"""Consumer: the blocking consumer, its I/O (fetching, heartbeats) on a background thread.

    consumer = Consumer({"bootstrap.servers": "...", "group.id": "billing"})
    consumer.subscribe(["orders"])
    for record in consumer:
        handle(record)
        consumer.commit()

Fetches keep running ahead while the application works; poll() and consume() hand over
what arrived. Rebalances happen inside poll(), and the rebalance listener runs in the
application's thread, as in the Java and confluent clients.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from gregor.client.consumer.base import ConsumerBase
from gregor.client.consumer.batches import FetchedBatch, take_batches
from gregor.client.consumer.core import ConsumerCore, IoStep, ListenerCall, SpawnStep
from gregor.client.consumer.records import ConsumerRecord
from gregor.client.runtime import ClientClosedError, IOThread, blocking
from gregor.client.types import OffsetAndMetadata, TopicPartition

T = TypeVar("T")


class Consumer(ConsumerBase):
    def __init__(self, config: Mapping[str, Any]) -> None:
        super().__init__(config)
        self._io = IOThread(f"gregor-consumer-{self.config.client_id}")
        self._io.start(self._core.run)

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def unsubscribe(self) -> None:
        listener = self._core.subscriptions.listener
        self._run_listener(self._core.unsubscribe(), listener)
        if self._core.coordinator is not None:
            self._io.call(self._core.coordinator.leave, "unsubscribed")

    # -- reading ---------------------------------------------------------------------------

    def poll(self, timeout: float | None = None) -> ConsumerRecord | None:
        """The next record, waiting up to `timeout` seconds (None: forever); None when
        nothing arrived in time. Its position counts as consumed once returned."""
        records = self._fetch(1, timeout)
        return records[0] if records else None

    def consume(
        self, num_messages: int | None = None, timeout: float | None = None
    ) -> list[ConsumerRecord]:
        """Up to `num_messages` records (default: max.poll.records), waiting up to
        `timeout` for the first; the cheap way to read many."""
        return self._fetch(num_messages or self.config.max_poll_records, timeout)

    def consume_batches(
        self, max_records: int | None = None, timeout: float | None = None
    ) -> list[FetchedBatch]:
        """Fetched record batches as bytes, whole fetches at a time up to about
        `max_records` records (default: max.poll.records), waiting up to `timeout` for the
        first: `AsyncConsumer.getmany_batches` for threads (see consumer/batches.py)."""
        return self._take_waiting(
            take_batches, max_records or self.config.max_poll_records, timeout
        )

    def __iter__(self) -> Iterator[ConsumerRecord]:
        while not self._closed:
            record = self.poll(1.0)
            if record is not None:
                yield record

    def _fetch(self, max_records: int, timeout: float | None) -> list[ConsumerRecord]:
        return self._take_waiting(ConsumerCore.take, max_records, timeout)

    def _take_waiting(
        self, take: Callable[[ConsumerCore, int], list[T]], max_records: int, timeout: float | None
    ) -> list[T]:
        self._ensure_open()
        core = self._core
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                self._prepare()
            except ClientClosedError:
                if self._closed:  # another thread closed the consumer during this poll
                    return []
                raise
            taken = take(core, max_records)
            if taken:
                return taken
            remaining = None if deadline is None else deadline - time.monotonic()
            if self._closed or (remaining is not None and remaining <= 0):
                return []
            with core.buffer.changed:
                if not core.has_records() and not self._closed:
                    core.buffer.changed.wait(1.0 if remaining is None else min(remaining, 1.0))

    def _prepare(self) -> None:
        """What poll() does before handing out records (rebalance, auto commit, positions)."""
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
                result = self._io.call(step.fn, *step.args)
            elif isinstance(step, SpawnStep):
                self._io.spawn(step.fn, *step.args)
            else:
                self._run_listener(step.calls)

    def _ensure_open(self) -> None:
        if self._closed:
            raise ClientClosedError("the consumer is closed")

    def _run_listener(self, calls: list[ListenerCall], listener: object = None) -> None:
        self._core.run_listener(calls, self, listener)

    # -- positions, commits, lookups -------------------------------------------------------

    def commit(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None,
        *,
        asynchronous: bool = False,
    ) -> concurrent.futures.Future[None] | None:
        """Commit offsets (default: the positions of everything handed out so far). With
        asynchronous=True, returns a future instead of waiting."""
        core = self._core
        if not asynchronous:
            self._io.call(core.commit_offsets, offsets)
            return None
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        core._group("commit()")
        chosen = core.positions_to_commit() if offsets is None else offsets

        async def commit() -> None:
            try:
                await core.commit_offsets(chosen)
            except Exception as exc:
                future.set_exception(exc)
            else:
                future.set_result(None)

        self._io.spawn(commit)
        return future

    committed = blocking(ConsumerCore.committed)
    position = blocking(ConsumerCore.position)
    offsets_for_times = blocking(ConsumerCore.offsets_for_times)
    beginning_offsets = blocking(ConsumerCore.beginning_offsets)
    end_offsets = blocking(ConsumerCore.end_offsets)
    partitions_for = blocking(ConsumerCore.partitions_for)
    list_topics = blocking(ConsumerCore.list_topics)

    # -- closing ---------------------------------------------------------------------------

    def close(self, *, commit: bool = True) -> None:
        """Commit (with enable.auto.commit), leave the group, stop."""
        if self._closed:
            return
        # Closed first, so that a poll or an iteration on another thread ends (with no
        # records) instead of starting more work on an I/O thread that is about to stop.
        self._closed = True
        with self._core.buffer.changed:
            self._core.buffer.changed.notify_all()
        try:
            if self._core.subscriptions.group_managed:
                self._run_listener(self._core._revoke_all())
            self._io.call(self._core.close, commit)
        finally:
            self._io.stop()
