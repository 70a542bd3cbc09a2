"""The server-side assignors of KIP-848 consumer groups (`group.consumer.assignors`).

- `uniform`: every member gets an equal share (within one) of the partitions it may have;
  sticky: a partition stays where the last target put it while that member may keep it.
- `range`: per topic, each subscribed member in member-id order gets a contiguous range, so
  members subscribed to co-partitioned topics get the same partition numbers of each.

An assignor sees each member's subscribed topics (names already resolved, regexes matched)
and the topics' ids and partition counts, and returns each member's target assignment.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Protocol

from gregor.broker.coordinator.group.consumer_group import Assignment

Subscriptions = Mapping[str, frozenset[str]]  # member id -> topic names
Topics = Mapping[str, tuple[uuid.UUID, int]]  # topic name -> (id, partitions)


class ServerAssignor(Protocol):
    name: str

    def assign(
        self, subscriptions: Subscriptions, topics: Topics, previous: Mapping[str, Assignment]
    ) -> dict[str, Assignment]: ...


def _freeze(chosen: Mapping[str, dict[uuid.UUID, set[int]]]) -> dict[str, Assignment]:
    return {
        member: {t: frozenset(ps) for t, ps in assignment.items() if ps}
        for member, assignment in chosen.items()
    }


class UniformAssignor:
    name = "uniform"

    def assign(
        self, subscriptions: Subscriptions, topics: Topics, previous: Mapping[str, Assignment]
    ) -> dict[str, Assignment]:
        chosen: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in subscriptions}
        counts = dict.fromkeys(subscriptions, 0)
        eligible = {
            name: sorted(m for m, subscribed in subscriptions.items() if name in subscribed)
            for name in topics
        }
        total = sum(topics[name][1] for name, members in eligible.items() if members)
        # What each member may keep of what it had: an equal share, and one more for as many
        # members as the split leaves over.
        floor, extra = divmod(total, max(1, len(subscriptions)))
        ids = {topic_id: name for name, (topic_id, _) in topics.items()}
        kept: dict[str, list[tuple[uuid.UUID, int]]] = {}
        for member in sorted(previous):
            if member in subscriptions:
                kept[member] = [
                    (topic_id, p)
                    for topic_id, partitions in sorted(previous[member].items())
                    if (name := ids.get(topic_id)) is not None and name in subscriptions[member]
                    for p in sorted(partitions)
                    if p < topics[name][1]
                ]
        placed: set[tuple[uuid.UUID, int]] = set()
        for member, pairs in kept.items():
            allowed = floor
            if len(pairs) > floor and extra > 0:
                allowed, extra = floor + 1, extra - 1
            for topic_id, p in pairs[:allowed]:
                chosen[member].setdefault(topic_id, set()).add(p)
                counts[member] += 1
                placed.add((topic_id, p))
        for name in sorted(topics):
            members = eligible[name]
            if not members:
                continue
            topic_id, partitions = topics[name]
            for p in range(partitions):
                if (topic_id, p) in placed:
                    continue
                member = min(members, key=lambda m: (counts[m], m))
                chosen[member].setdefault(topic_id, set()).add(p)
                counts[member] += 1
        return _freeze(chosen)


class RangeAssignor:
    name = "range"

    def assign(
        self, subscriptions: Subscriptions, topics: Topics, previous: Mapping[str, Assignment]
    ) -> dict[str, Assignment]:
        chosen: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in subscriptions}
        for name, (topic_id, partitions) in sorted(topics.items()):
            members = sorted(m for m, subscribed in subscriptions.items() if name in subscribed)
            if not members:
                continue
            share, extra = divmod(partitions, len(members))
            start = 0
            for i, member in enumerate(members):
                size = share + (1 if i < extra else 0)
                chosen[member][topic_id] = set(range(start, start + size))
                start += size
        return _freeze(chosen)


ASSIGNORS: dict[str, ServerAssignor] = {a.name: a for a in (UniformAssignor(), RangeAssignor())}
