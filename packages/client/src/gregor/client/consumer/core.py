"""The consumer's core, shared by Consumer and AsyncConsumer.

The I/O side (`run`): metadata, the fetcher, heartbeats. The application's side: handing out
records from fetched batches, positions, and the steps of a rebalance that involve the
application (its listener, its positions). The wrappers only differ in how they wait and
how they reach the I/O side (a blocking call into the I/O thread, or an await), so every
decision is made here.

A rebalance, as the Java consumer runs it inside poll():
1. `before_join`: eager protocol: every owned partition is revoked (on_revoke; on_lost when
   the membership was lost and the partitions may already be someone else's) and, with
   auto commit, positions are committed first. Cooperative: only partitions of topics no
   longer subscribed are revoked.
2. `join_group` on the I/O side.
3. `after_join`: the new assignment is installed; partitions kept keep their positions;
   on_assign gets the added ones; cooperatively revoked ones get on_revoke, after which
   the member rejoins at once so they can be given away.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Awaitable, Callable, Generator, Iterable, Mapping, Sequence
from typing import Any

import attrs
import trio

from gregor.client.assignors import RebalanceProtocol, assignor_for
from gregor.client.config import ConsumerConfig
from gregor.client.consumer.fetcher import FetchBuffer, Fetcher, release
from gregor.client.consumer.group_heartbeats import ConsumerGroupMember
from gregor.client.consumer.group_membership import ConsumerCoordinator
from gregor.client.consumer.records import CompletedFetch, ConsumerRecord
from gregor.client.consumer.subscription import (
    ResetStrategy,
    SubscriptionState,
    SubscriptionType,
)
from gregor.client.network import NetworkClient
from gregor.client.offsets import EARLIEST, LATEST, list_offsets
from gregor.client.serialization import deserializer
from gregor.client.types import (
    ConsumerGroupMetadata,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    TopicPartition,
    as_offsets,
)
from gregor.protocol.errors import InvalidGroupIdError, KafkaError, OffsetOutOfRangeError

log = logging.getLogger(__name__)

# A listener step for the application to run: (method name, partitions).
ListenerCall = tuple[str, list[TopicPartition]]


@attrs.frozen
class IoStep:
    """Run a coroutine on the I/O side and send its result back."""

    fn: Callable[..., Awaitable[Any]]
    args: tuple[Any, ...]


@attrs.frozen
class SpawnStep:
    """Start a coroutine on the I/O side, without waiting for it."""

    fn: Callable[..., Awaitable[Any]]
    args: tuple[Any, ...]


@attrs.frozen
class ListenerStep:
    """Tell the rebalance listener, in the application's thread or loop."""

    calls: list[ListenerCall]


PollStep = IoStep | SpawnStep | ListenerStep


class ConsumerCore:
    def __init__(self, config: ConsumerConfig) -> None:
        self.config = config
        self.subscriptions = SubscriptionState(
            ResetStrategy[config.auto_offset_reset.upper()], config.exclude_internal_topics
        )
        self.client = NetworkClient(
            config, topics=(), allow_auto_topic_creation=config.allow_auto_create_topics
        )
        self.buffer = FetchBuffer(self.subscriptions)
        self.fetcher = Fetcher(config, self.client, self.subscriptions, self.buffer)
        self.coordinator: ConsumerCoordinator | None = None
        if config.group_id is not None and config.group_protocol == "consumer":
            self.coordinator = ConsumerGroupMember(config, self.client)
        elif config.group_id is not None:
            self.coordinator = ConsumerCoordinator(
                config,
                self.client,
                [assignor_for(spec) for spec in config.partition_assignment_strategy],
            )
        self.key_deserializer = deserializer(config.key_deserializer, "key.deserializer")
        self.value_deserializer = deserializer(config.value_deserializer, "value.deserializer")
        self.max_poll_records = config.max_poll_records
        self.api_timeout = config.default_api_timeout_ms / 1000
        self.read_committed = config.isolation_level == "read_committed"
        self._current: CompletedFetch | None = None
        self._joined_version = -1
        self.next_auto_commit = time.monotonic() + config.auto_commit_interval_ms / 1000
        self.closed = False

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(self.client.run)
            await nursery.start(self.fetcher.run)
            if self.coordinator is not None:
                nursery.start_soon(self.coordinator.run_heartbeats)
            task_status.started()

    # -- subscribing (the application's side) ----------------------------------------------

    def subscribe(
        self, topics: Iterable[str] | str | re.Pattern[str], listener: object | None
    ) -> None:
        if self.coordinator is None:
            raise InvalidGroupIdError("subscribe() needs a group.id; use assign() without one")
        self.subscriptions.subscribe(topics, listener)
        if self.subscriptions.type is SubscriptionType.PATTERN:
            self.client.set_topics(None)
        else:
            self.client.set_topics(self.subscriptions.topics)
        self.coordinator.request_rejoin("the subscription changed")

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        wanted = [TopicPartition(*tp) for tp in partitions]
        self.subscriptions.assign(wanted)
        self.client.set_topics({tp.topic for tp in wanted})
        self._current = None
        self.fetcher.wake()

    def unsubscribe(self) -> list[ListenerCall]:
        """Drop the subscription; the revocation for the listener (run it with the listener
        the subscription had, as Kafka's consumer calls onPartitionsRevoked before leaving;
        then leave)."""
        calls = self._revoke_all()
        self.subscriptions.unsubscribe()
        self._current = None
        return calls

    # -- rebalancing (the application's side) ----------------------------------------------

    def rebalance_due(self) -> bool:
        coordinator = self.coordinator
        if coordinator is None or not self.subscriptions.group_managed:
            return False
        if coordinator.fatal is not None:
            raise coordinator.fatal
        self._check_metadata_changes()
        return coordinator.rejoin_needed or self._joined_version != self.subscriptions.version

    def _check_metadata_changes(self) -> None:
        """A pattern matching new topics, or partitions added to a topic the leader
        assigned, call for a rebalance."""
        coordinator = self.coordinator
        assert coordinator is not None
        cluster = self.client.cluster
        if self.subscriptions.type is SubscriptionType.PATTERN and self.client.metadata_version:
            self.subscriptions.match_pattern(
                cluster.topics, lambda t: cluster.topics[t].is_internal
            )
            self.client.add_topics(self.subscriptions.topics)
        for topic, count in coordinator.partition_counts.items():
            current = cluster.partition_count(topic)
            if current is not None and current != count:
                coordinator.partition_counts[topic] = current
                coordinator.request_rejoin(f"topic {topic} now has {current} partitions")

    def before_join(self) -> tuple[list[ListenerCall], dict[TopicPartition, OffsetAndMetadata]]:
        """What to tell the listener, and what to commit, before (re)joining."""
        coordinator = self.coordinator
        assert coordinator is not None
        commit: dict[TopicPartition, OffsetAndMetadata] = {}
        if coordinator.protocol is RebalanceProtocol.EAGER or coordinator.lost:
            if self.config.enable_auto_commit and not coordinator.lost:
                commit = self.positions_to_commit()
            calls = self._revoke_all()
            self.subscriptions.set_assignment([])
            coordinator.owned = []
        else:
            gone = [tp for tp in coordinator.owned if tp.topic not in self.subscriptions.topics]
            calls = [("on_revoke", gone)] if gone else []
            self.subscriptions.remove_partitions(gone)
            coordinator.owned = [tp for tp in coordinator.owned if tp not in gone]
        self._current = None
        return calls, commit

    def _revoke_all(self) -> list[ListenerCall]:
        owned = self.subscriptions.assigned()
        if not owned or self.coordinator is None:
            return []
        return [("on_lost" if self.coordinator.lost else "on_revoke", owned)]

    def join_topics(self) -> list[str]:
        self._joined_version = self.subscriptions.version
        return sorted(self.subscriptions.topics)

    def after_join(self, assigned: Sequence[TopicPartition]) -> list[ListenerCall]:
        """Install a new assignment; what to tell the listener."""
        coordinator = self.coordinator
        assert coordinator is not None
        before = set(self.subscriptions.assigned())
        now = set(assigned)
        revoked = sorted(before - now)
        added = sorted(now - before)
        self.subscriptions.set_assignment(sorted(now))
        self.client.add_topics({tp.topic for tp in assigned})
        self._current = None
        self.fetcher.wake()
        calls: list[ListenerCall] = []
        if revoked:
            calls.append(("on_revoke", revoked))
            if coordinator.protocol is RebalanceProtocol.COOPERATIVE:
                coordinator.request_rejoin("partitions were revoked")
        calls.append(("on_assign", added))
        return calls

    def run_listener(
        self, calls: Sequence[ListenerCall], consumer: object, listener: object | None = None
    ) -> list[Any]:
        """Call the listener's methods (the subscription's, unless `listener` is given: on
        unsubscribe the subscription has already forgotten it); what they return
        (awaitables, for async ones)."""
        if listener is None:
            listener = self.subscriptions.listener
        results = []
        for name, partitions in calls:
            method = getattr(listener, name, None)
            if method is None and name == "on_lost":
                method = getattr(listener, "on_revoke", None)
            if method is not None:
                results.append(method(consumer, list(partitions)))
        return results

    def poll_steps(self) -> Generator[PollStep, Any, None]:
        """What poll() does before handing out records, as steps the wrapper runs in its own
        way (blocking or awaiting): rebalance if due, auto commit, resolve positions. An
        `IoStep` is sent back its result."""
        coordinator = self.coordinator
        if coordinator is not None:
            coordinator.last_poll = time.monotonic()
            while self.rebalance_due():
                calls, commit = self.before_join()
                if commit:
                    yield IoStep(self.commit_quietly, (commit,))
                yield ListenerStep(calls)
                assigned = yield IoStep(coordinator.join_group, (self.join_topics(),))
                yield ListenerStep(self.after_join(assigned))
            if self.auto_commit_due():
                offsets = self.positions_to_commit()
                if offsets:
                    yield SpawnStep(self.commit_quietly, (offsets,))
        if self.positions_due():
            yield IoStep(self.update_positions, (self.api_timeout,))

    # -- positions ---------------------------------------------------------------------------

    def positions_due(self) -> bool:
        return bool(self.subscriptions.missing_positions() or self.subscriptions.resets_due())

    async def update_positions(self, timeout: float) -> None:
        """Give every assigned partition a position: the group's committed offset, else a
        reset as auto.offset.reset says (I/O side)."""
        subscriptions = self.subscriptions
        missing = subscriptions.missing_positions()
        if missing and self.coordinator is not None:
            committed = await self.coordinator.committed(missing, timeout)
            for tp, meta in committed.items():
                if tp not in subscriptions.assignment:
                    continue
                if meta is not None:
                    subscriptions.seek(tp, meta.offset, meta.leader_epoch)
                else:
                    subscriptions.request_reset(tp)
        else:
            for tp in missing:
                subscriptions.request_reset(tp)
        resets = subscriptions.resets_due()
        if not resets:
            return
        hopeless = [tp for tp, s in resets.items() if s is ResetStrategy.NONE]
        if hopeless:
            raise OffsetOutOfRangeError(
                "no committed offset and auto.offset.reset=none for "
                + ", ".join(str(tp) for tp in sorted(hopeless))
            )
        found = await list_offsets(
            self.client,
            {tp: EARLIEST if s is ResetStrategy.EARLIEST else LATEST for tp, s in resets.items()},
            timeout,
            read_committed=self.read_committed,
        )
        for tp, answer in found.items():
            state = subscriptions.assignment.get(tp)
            if state is not None and state.reset is not None and answer is not None:
                subscriptions.seek(tp, answer.offset, answer.leader_epoch)
        self.fetcher.wake()

    def positions_to_commit(self) -> dict[TopicPartition, OffsetAndMetadata]:
        with self.subscriptions.lock:
            return {
                tp: OffsetAndMetadata(s.position, "", s.leader_epoch)
                for tp, s in self.subscriptions.assignment.items()
                if s.position is not None
            }

    def auto_commit_due(self) -> bool:
        if not self.config.enable_auto_commit or self.coordinator is None:
            return False
        now = time.monotonic()
        if now < self.next_auto_commit:
            return False
        self.next_auto_commit = now + self.config.auto_commit_interval_ms / 1000
        return True

    async def commit_quietly(self, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
        """An auto commit: failures are logged, the next one will try again."""
        assert self.coordinator is not None
        try:
            await self.coordinator.commit(offsets, self.api_timeout)
        except KafkaError as exc:
            log.warning("auto commit failed: %s", exc)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        tp = TopicPartition(*tp)
        self.subscriptions.seek(tp, offset)
        self._drop_fetched(tp)
        self.fetcher.wake()

    def seek_to(self, partitions: Iterable[TopicPartition], strategy: ResetStrategy) -> None:
        for tp in partitions or self.subscriptions.assigned():
            tp = TopicPartition(*tp)
            self.subscriptions.request_reset(tp, strategy)
            self._drop_fetched(tp)

    def _drop_fetched(self, tp: TopicPartition) -> None:
        """Fetched data of a partition whose position changed is of no use any more."""
        self._drop_current(tp)
        self.buffer.drop(tp)

    def _drop_current(self, tp: TopicPartition) -> None:
        if self._current is not None and self._current.tp == tp:
            with self.subscriptions.lock:
                release(self._current)
            self._current = None

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        paused = [TopicPartition(*tp) for tp in partitions]
        self.subscriptions.pause(paused)
        for tp in paused:
            self._drop_current(tp)

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        self.subscriptions.resume(TopicPartition(*tp) for tp in partitions)
        self.fetcher.wake()

    # -- records ---------------------------------------------------------------------------

    def take(self, max_records: int) -> list[ConsumerRecord]:
        """Up to `max_records` records from what was fetched (without waiting); positions
        move past them. Raises the error of a failed fetch."""
        out: list[ConsumerRecord] = []
        while len(out) < max_records:
            fetch = self._current
            if fetch is None:
                fetch = self._current = self.buffer.next_fetch()
                if fetch is None:
                    break
                if fetch.error is not None:
                    self._finish(fetch)
                    raise fetch.error
            want = max_records - len(out)
            records = fetch.take(want, self.key_deserializer, self.value_deserializer)
            subscriptions = self.subscriptions
            with subscriptions.lock:
                state = subscriptions.assignment.get(fetch.tp)
                if state is None or state.epoch != fetch.epoch or state.paused:
                    self._finish(fetch)  # sought, paused or revoked meanwhile
                    continue
                if records:
                    last = records[-1]
                    state.position = last.offset + 1
                    if last.leader_epoch is not None:
                        state.leader_epoch = last.leader_epoch
                    out.extend(records)
                if len(records) < want:
                    # Used up: the position moves past what it skipped (control batches,
                    # aborted transactions, compacted gaps).
                    if state.position is None or state.position < fetch.next_fetch_offset:
                        state.position = fetch.next_fetch_offset
                    self._finish(fetch)
        return out

    def _finish(self, fetch: CompletedFetch) -> None:
        with self.subscriptions.lock:
            release(fetch)
        if self._current is fetch:
            self._current = None
        self.fetcher.wake()

    def has_records(self) -> bool:
        return self._current is not None or self.buffer.has_data()

    # -- lookups and commits (I/O side; the wrappers expose these) -------------------------

    def _timeout(self, timeout: float | None) -> float:
        return self.api_timeout if timeout is None else timeout

    def _group(self, what: str) -> ConsumerCoordinator:
        if self.coordinator is None:
            raise InvalidGroupIdError(f"{what} needs a group.id")
        return self.coordinator

    def group_metadata(self) -> ConsumerGroupMetadata:
        coordinator = self._group("group_metadata()")
        generation, member_id = coordinator.generation_info
        return ConsumerGroupMetadata(
            coordinator.group_id, generation, member_id, coordinator.instance_id
        )

    async def commit_offsets(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None,
        timeout: float | None = None,
    ) -> None:
        """Commit offsets (default: the positions of everything handed out so far)."""
        coordinator = self._group("commit()")
        to_commit = as_offsets(offsets) if offsets is not None else self.positions_to_commit()
        await coordinator.commit(to_commit, self._timeout(timeout))

    async def committed(
        self, partitions: Iterable[TopicPartition], timeout: float | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offsets of these partitions (None: no commit)."""
        wanted = [TopicPartition(*tp) for tp in partitions]
        return await self._group("committed()").committed(wanted, self._timeout(timeout))

    async def position(self, partition: TopicPartition, timeout: float | None = None) -> int:
        """The offset of the next record handed out from this partition."""
        tp = TopicPartition(*partition)
        if self.subscriptions.state(tp).position is None:
            await self.update_positions(self._timeout(timeout))
        position = self.subscriptions.state(tp).position
        if position is None:
            raise OffsetOutOfRangeError(f"no position for {tp}")
        return position

    async def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int], timeout: float | None = None
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """The first offset at or after each timestamp (None: no record that recent)."""
        wanted = {TopicPartition(*tp): ts for tp, ts in timestamps.items()}
        return await list_offsets(
            self.client, wanted, self._timeout(timeout), read_committed=self.read_committed
        )

    async def beginning_offsets(
        self, partitions: Iterable[TopicPartition], timeout: float | None = None
    ) -> dict[TopicPartition, int]:
        return await self._log_ends(partitions, EARLIEST, timeout)

    async def end_offsets(
        self, partitions: Iterable[TopicPartition], timeout: float | None = None
    ) -> dict[TopicPartition, int]:
        """The log end offsets (the last stable offsets with read_committed)."""
        return await self._log_ends(partitions, LATEST, timeout)

    async def _log_ends(
        self, partitions: Iterable[TopicPartition], timestamp: int, timeout: float | None
    ) -> dict[TopicPartition, int]:
        found = await list_offsets(
            self.client,
            {TopicPartition(*tp): timestamp for tp in partitions},
            self._timeout(timeout),
            read_committed=self.read_committed,
        )
        return {tp: answer.offset for tp, answer in found.items() if answer is not None}

    async def partitions_for(self, topic: str, timeout: float | None = None) -> list[int]:
        cluster = await self.client.wait_for_topic(topic, self._timeout(timeout))
        return [p.partition for p in cluster.partitions_for(topic)]

    async def list_topics(self, timeout: float | None = None) -> dict[str, list[int]]:
        """Every topic of the cluster with its partitions."""
        topics = self.client.topics
        self.client.set_topics(None)
        try:
            cluster = await self.client.update_metadata(self._timeout(timeout))
        finally:
            self.client.set_topics(topics)
        return {
            name: [p.partition for p in info.partitions]
            for name, info in sorted(cluster.topics.items())
        }

    async def close(self, commit: bool) -> None:
        """Commit (with auto commit) and leave the group (I/O side)."""
        coordinator = self.coordinator
        if coordinator is None:
            return
        if commit and self.config.enable_auto_commit and self.subscriptions.group_managed:
            offsets = self.positions_to_commit()
            if offsets and coordinator.generation >= 0:
                await self.commit_quietly(offsets)
        await coordinator.leave("the consumer is closing")


def split_callbacks(
    listener: object | None,
    on_assign: Callable[..., Any] | None,
    on_revoke: Callable[..., Any] | None,
    on_lost: Callable[..., Any] | None,
) -> object | None:
    """One listener object from a listener or confluent-style callables."""
    if on_assign is None and on_revoke is None and on_lost is None:
        return listener
    if listener is not None:
        raise TypeError("give a listener or on_assign/on_revoke/on_lost, not both")
    return _Callbacks(on_assign, on_revoke, on_lost)


class _Callbacks:
    def __init__(
        self,
        on_assign: Callable[..., Any] | None,
        on_revoke: Callable[..., Any] | None,
        on_lost: Callable[..., Any] | None,
    ) -> None:
        if on_assign is not None:
            self.on_assign = on_assign
        if on_revoke is not None:
            self.on_revoke = on_revoke
        if on_lost is not None:
            self.on_lost = on_lost


__all__ = ["ConsumerCore", "ConsumerRecord", "ListenerCall", "split_callbacks"]
