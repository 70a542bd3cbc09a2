"""What the consumer reads: its subscription, its partitions, and where it is in each.

Two positions per partition:
- `position`: the next offset the application gets (what commit and position() report);
- `fetch_offset`: the next offset the fetcher asks for, which runs ahead of the position
  while fetched batches wait to be handed over (prefetching).
A seek, a reset or a revocation bumps the partition's `epoch`; fetched data carries the
epoch it was asked for under, and data from an older epoch is dropped. The application's
thread and the I/O loop both touch this state, so it lives under one lock.
"""

from __future__ import annotations

import enum
import re
import threading
from collections.abc import Callable, Iterable, Sequence

import attrs

from gregor.client.types import TopicPartition


class SubscriptionType(enum.Enum):
    NONE = "none"
    TOPICS = "topics"  # subscribe([...]): the group assigns
    PATTERN = "pattern"  # subscribe(re): the group assigns, topics matched on metadata
    ASSIGNED = "assigned"  # assign([...]): no group management


class ResetStrategy(enum.Enum):
    EARLIEST = -2  # ListOffsets timestamps
    LATEST = -1
    NONE = 0


@attrs.define
class PartitionState:
    position: int | None = None  # None: unknown (to be fetched from commits or reset)
    leader_epoch: int | None = None
    fetch_offset: int | None = None
    epoch: int = 0
    paused: bool = False
    reset: ResetStrategy | None = None  # a reset is due
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    in_flight: bool = False  # a fetch for this partition is out
    buffered: int = 0  # completed fetches waiting to be handed over
    # The replica the leader told us to read from (KIP-392), until when (time.monotonic()).
    preferred_read_replica: int = -1
    preferred_until: float = 0.0

    @property
    def has_position(self) -> bool:
        return self.position is not None


class SubscriptionError(ValueError):
    """subscribe and assign mixed, or called with nothing to subscribe to."""


class SubscriptionState:
    def __init__(self, default_reset: ResetStrategy, exclude_internal: bool = True) -> None:
        self.lock = threading.RLock()
        self.type = SubscriptionType.NONE
        self.topics: frozenset[str] = frozenset()
        self.pattern: re.Pattern[str] | None = None
        self.assignment: dict[TopicPartition, PartitionState] = {}
        self.default_reset = default_reset
        self.exclude_internal = exclude_internal
        self.listener: object | None = None
        self.version = 0  # bumped when the subscription changes: the group must rejoin

    # -- subscribing -----------------------------------------------------------------------

    def subscribe(
        self, topics: Iterable[str] | str | re.Pattern[str], listener: object | None
    ) -> None:
        with self.lock:
            if self.type is SubscriptionType.ASSIGNED:
                raise SubscriptionError("subscribe() after assign(): unsubscribe() first")
            if isinstance(topics, re.Pattern):
                self.type = SubscriptionType.PATTERN
                self.pattern = topics
                self.topics = frozenset()
            else:
                names = [topics] if isinstance(topics, str) else list(topics)
                if not names:
                    self.unsubscribe()
                    return
                for name in names:
                    if not isinstance(name, str) or not name.strip():
                        raise SubscriptionError(f"not a topic name: {name!r}")
                self.type = SubscriptionType.TOPICS
                self.topics = frozenset(names)
                self.pattern = None
            self.listener = listener
            self.version += 1

    def match_pattern(self, all_topics: Iterable[str], internal: Callable[[str], bool]) -> bool:
        """For a pattern subscription, take the matching topics; True if they changed."""
        with self.lock:
            if self.pattern is None:
                return False
            matched = frozenset(
                t
                for t in all_topics
                if self.pattern.fullmatch(t) and not (self.exclude_internal and internal(t))
            )
            if matched == self.topics:
                return False
            self.topics = matched
            self.version += 1
            return True

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        with self.lock:
            if self.type in (SubscriptionType.TOPICS, SubscriptionType.PATTERN):
                raise SubscriptionError("assign() after subscribe(): unsubscribe() first")
            wanted = list(dict.fromkeys(partitions))
            self.type = SubscriptionType.ASSIGNED if wanted else SubscriptionType.NONE
            self.topics = frozenset(tp.topic for tp in wanted)
            self.set_assignment(wanted)

    def unsubscribe(self) -> None:
        with self.lock:
            self.type = SubscriptionType.NONE
            self.topics = frozenset()
            self.pattern = None
            self.listener = None
            self.set_assignment([])
            self.version += 1

    @property
    def group_managed(self) -> bool:
        return self.type in (SubscriptionType.TOPICS, SubscriptionType.PATTERN)

    # -- the assignment --------------------------------------------------------------------

    def set_assignment(self, partitions: Sequence[TopicPartition]) -> None:
        """Keep the state of partitions that stay; new ones start without a position."""
        with self.lock:
            old = self.assignment
            self.assignment = {tp: old.get(tp) or PartitionState() for tp in partitions}
            for tp, state in old.items():
                if tp not in self.assignment:
                    state.epoch += 1  # in-flight data for it is now stale

    def add_partitions(self, partitions: Iterable[TopicPartition]) -> None:
        with self.lock:
            for tp in partitions:
                self.assignment.setdefault(tp, PartitionState())

    def remove_partitions(self, partitions: Iterable[TopicPartition]) -> None:
        with self.lock:
            for tp in partitions:
                state = self.assignment.pop(tp, None)
                if state is not None:
                    state.epoch += 1

    def assigned(self) -> list[TopicPartition]:
        with self.lock:
            return list(self.assignment)

    def state(self, tp: TopicPartition) -> PartitionState:
        state = self.assignment.get(tp)
        if state is None:
            raise SubscriptionError(f"{tp} is not assigned to this consumer")
        return state

    # -- positions -------------------------------------------------------------------------

    def seek(self, tp: TopicPartition, offset: int, leader_epoch: int | None = None) -> None:
        with self.lock:
            state = self.state(tp)
            state.position = offset
            state.fetch_offset = offset
            state.leader_epoch = leader_epoch
            state.reset = None
            state.epoch += 1

    def request_reset(self, tp: TopicPartition, strategy: ResetStrategy | None = None) -> None:
        with self.lock:
            state = self.state(tp)
            state.reset = strategy or self.default_reset
            state.position = None
            state.fetch_offset = None
            state.epoch += 1

    def missing_positions(self) -> list[TopicPartition]:
        """Partitions with neither a position nor a reset pending (ask the group first)."""
        with self.lock:
            return [
                tp for tp, s in self.assignment.items() if s.position is None and s.reset is None
            ]

    def resets_due(self) -> dict[TopicPartition, ResetStrategy]:
        with self.lock:
            return {tp: s.reset for tp, s in self.assignment.items() if s.reset is not None}

    def positions(self) -> dict[TopicPartition, int]:
        """The positions of every assigned partition that has one (what a commit sends)."""
        with self.lock:
            return {tp: s.position for tp, s in self.assignment.items() if s.position is not None}

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        with self.lock:
            for tp in partitions:
                self.state(tp).paused = True

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        with self.lock:
            for tp in partitions:
                self.state(tp).paused = False

    def paused(self) -> set[TopicPartition]:
        with self.lock:
            return {tp for tp, s in self.assignment.items() if s.paused}
