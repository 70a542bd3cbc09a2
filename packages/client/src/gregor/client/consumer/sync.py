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
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from gregor.client.config import ConsumerConfig
from gregor.client.consumer.core import ConsumerCore, ListenerCall, split_callbacks
from gregor.client.consumer.records import ConsumerRecord
from gregor.client.consumer.subscription import ResetStrategy
from gregor.client.offsets import EARLIEST, LATEST
from gregor.client.runtime import IOThread
from gregor.client.types import OffsetAndMetadata, OffsetAndTimestamp, TopicPartition
from gregor.protocol.errors import InvalidGroupIdError, KafkaError

Offsets = Mapping[TopicPartition, OffsetAndMetadata | int]


def normalize_offsets(offsets: Offsets) -> dict[TopicPartition, OffsetAndMetadata]:
    return {
        TopicPartition(*tp): meta
        if isinstance(meta, OffsetAndMetadata)
        else OffsetAndMetadata(meta)
        for tp, meta in offsets.items()
    }


class Consumer:
    def __init__(self, config: Mapping[str, Any]) -> None:
        self.config = ConsumerConfig.from_dict(config)
        self._core = ConsumerCore(self.config)
        self._io = IOThread(f"gregor-consumer-{self.config.client_id}")
        self._io.start(self._core.run)
        self._closed = False

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Consumer {self.config.client_id}>"

    # -- what to read ----------------------------------------------------------------------

    def subscribe(
        self,
        topics: Iterable[str] | str | re.Pattern[str],
        listener: object | None = None,
        *,
        on_assign: Callable[..., Any] | None = None,
        on_revoke: Callable[..., Any] | None = None,
        on_lost: Callable[..., Any] | None = None,
    ) -> None:
        """Join the group for these topics (or a compiled pattern). The listener's
        on_assign / on_revoke / on_lost(consumer, partitions) run inside poll()."""
        self._core.subscribe(topics, split_callbacks(listener, on_assign, on_revoke, on_lost))

    def assign(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        """Read exactly these partitions, without group management."""
        self._core.assign(TopicPartition(*tp) for tp in partitions)

    def unsubscribe(self) -> None:
        self._run_listener(self._core.unsubscribe())
        if self._core.coordinator is not None:
            self._io.call(self._core.coordinator.leave, "unsubscribed")

    def assignment(self) -> list[TopicPartition]:
        return sorted(self._core.subscriptions.assigned())

    def subscription(self) -> set[str]:
        return set(self._core.subscriptions.topics)

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

    def __iter__(self) -> Iterator[ConsumerRecord]:
        while not self._closed:
            record = self.poll(1.0)
            if record is not None:
                yield record

    def _fetch(self, max_records: int, timeout: float | None) -> list[ConsumerRecord]:
        core = self._core
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self._prepare()
            records = core.take(max_records)
            if records:
                return records
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return []
            with core.buffer.changed:
                if not core.has_records():
                    core.buffer.changed.wait(1.0 if remaining is None else min(remaining, 1.0))

    def _prepare(self) -> None:
        """What poll() does before handing out records: rebalance, auto commit, positions."""
        if self._closed:
            raise KafkaError("the consumer is closed")
        core = self._core
        if core.coordinator is not None:
            core.coordinator.last_poll = time.monotonic()
            while core.rebalance_due():
                self._rebalance()
            if core.auto_commit_due():
                offsets = core.positions_to_commit()
                if offsets:
                    self._io.call_soon(self._io_nursery_spawn, core.commit_quietly, offsets)
        if core.positions_due():
            self._io.call(core.update_positions, core.api_timeout)

    def _io_nursery_spawn(self, fn: Callable[..., Any], *args: Any) -> None:
        self._core.client.nursery.start_soon(fn, *args)

    def _rebalance(self) -> None:
        core = self._core
        coordinator = core.coordinator
        assert coordinator is not None
        calls, commit = core.before_join()
        if commit:
            self._io.call(core.commit_quietly, commit)
        self._run_listener(calls)
        assigned = self._io.call(coordinator.join_group, core.join_topics())
        self._run_listener(core.after_join(assigned))

    def _run_listener(self, calls: list[ListenerCall]) -> None:
        self._core.run_listener(calls, self)

    # -- positions and commits -------------------------------------------------------------

    def commit(
        self, offsets: Offsets | None = None, *, asynchronous: bool = False
    ) -> concurrent.futures.Future[None] | None:
        """Commit offsets (default: the positions of everything handed out so far). With
        asynchronous=True, returns a future instead of waiting."""
        core = self._core
        if core.coordinator is None:
            raise InvalidGroupIdError("commit() needs a group.id")
        to_commit = (
            normalize_offsets(offsets) if offsets is not None else core.positions_to_commit()
        )
        if not asynchronous:
            self._io.call(core.coordinator.commit, to_commit, core.api_timeout)
            return None
        future: concurrent.futures.Future[None] = concurrent.futures.Future()

        async def commit() -> None:
            assert core.coordinator is not None
            try:
                await core.coordinator.commit(to_commit, core.api_timeout)
            except Exception as exc:
                future.set_exception(exc)
            else:
                future.set_result(None)

        self._io.call_soon(self._io_nursery_spawn, commit)
        return future

    def committed(
        self, partitions: Iterable[TopicPartition], timeout: float | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        core = self._core
        if core.coordinator is None:
            raise InvalidGroupIdError("committed() needs a group.id")
        wanted = [TopicPartition(*tp) for tp in partitions]
        return self._io.call(core.coordinator.committed, wanted, timeout or core.api_timeout)

    def position(self, partition: TopicPartition) -> int:
        """The offset of the next record poll() hands out from this partition."""
        tp = TopicPartition(*partition)
        state = self._core.subscriptions.state(tp)
        if state.position is None:
            self._io.call(self._core.update_positions, self._core.api_timeout)
        position = self._core.subscriptions.state(tp).position
        assert position is not None
        return position

    def seek(self, partition: TopicPartition, offset: int) -> None:
        self._core.seek(TopicPartition(*partition), offset)

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        self._core.seek_to(partitions, ResetStrategy.EARLIEST)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        self._core.seek_to(partitions, ResetStrategy.LATEST)

    def pause(self, *partitions: TopicPartition) -> None:
        self._core.pause(partitions)

    def resume(self, *partitions: TopicPartition) -> None:
        self._core.resume(partitions)

    def paused(self) -> set[TopicPartition]:
        return self._core.subscriptions.paused()

    # -- lookups ---------------------------------------------------------------------------

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int], timeout: float | None = None
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        wanted = {TopicPartition(*tp): ts for tp, ts in timestamps.items()}
        return self._io.call(
            self._core.offsets_for_times, wanted, timeout or self._core.api_timeout
        )

    def beginning_offsets(
        self, partitions: Iterable[TopicPartition], timeout: float | None = None
    ) -> dict[TopicPartition, int]:
        wanted = [TopicPartition(*tp) for tp in partitions]
        return self._io.call(
            self._core.log_ends, wanted, EARLIEST, timeout or self._core.api_timeout
        )

    def end_offsets(
        self, partitions: Iterable[TopicPartition], timeout: float | None = None
    ) -> dict[TopicPartition, int]:
        wanted = [TopicPartition(*tp) for tp in partitions]
        return self._io.call(self._core.log_ends, wanted, LATEST, timeout or self._core.api_timeout)

    def partitions_for(self, topic: str, timeout: float | None = None) -> list[int]:
        return self._io.call(self._core.partitions_for, topic, timeout or self._core.api_timeout)

    def list_topics(self, timeout: float | None = None) -> dict[str, list[int]]:
        return self._io.call(self._core.list_topics, timeout or self._core.api_timeout)

    # -- closing ---------------------------------------------------------------------------

    def close(self, *, commit: bool = True) -> None:
        """Commit (with enable.auto.commit), leave the group, stop."""
        if self._closed:
            return
        try:
            if self._core.subscriptions.group_managed:
                self._run_listener(self._core._revoke_all())
            self._io.call(self._core.close, commit)
        finally:
            self._closed = True
            self._io.stop()
