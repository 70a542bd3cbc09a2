"""The range assignor: each topic's partitions cut into contiguous ranges, one per member.

Members subscribed to a topic, in order (static members first), get `P // C` partitions
each and the first `P % C` one more, so topics with the same partition count are
co-partitioned: partition i of every topic goes to the same member. With racks (KIP-881),
partitions whose replicas share a member's rack go to that member first, within the same
per-member counts (and together for co-partitioned topics); the rest then fill in range
order.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from gregor.client.assignors.base import (
    Assignment,
    Assignor,
    MemberSubscription,
    TopicLayout,
    rack_aware,
    sorted_members,
    subscribed_topics,
)
from gregor.client.types import TopicPartition


class _TopicState:
    """Who may still get how many of one topic's partitions."""

    def __init__(
        self,
        topic: str,
        racks: list[frozenset[str]],
        consumers: list[str],
        member_racks: dict[str, str],
    ) -> None:
        self.topic = topic
        self.racks = racks
        self.consumers = consumers
        self.member_racks = member_racks
        self.unassigned = dict.fromkeys(range(len(racks)))  # an ordered set
        self.count = dict.fromkeys(consumers, 0)
        self.per_consumer = len(racks) // len(consumers) if consumers else 0
        self.extra = len(racks) % len(consumers) if consumers else 0

    def room(self, consumer: str) -> int:
        quota = self.per_consumer + (1 if self.extra > 0 else 0)
        return max(0, quota - self.count[consumer])

    def racks_match(self, consumer: str, partition: int) -> bool:
        rack = self.member_racks.get(consumer)
        return rack is None or rack in self.racks[partition]

    def give(self, consumer: str, partitions: list[int], assignment: Assignment) -> None:
        assignment[consumer].extend(TopicPartition(self.topic, p) for p in partitions)
        self.count[consumer] += len(partitions)
        if self.count[consumer] > self.per_consumer:
            self.extra -= 1
        for p in partitions:
            del self.unassigned[p]

    def fill(self, assignment: Assignment, rack_matching: bool) -> None:
        for consumer in self.consumers:
            if not self.unassigned:
                return
            take = [
                p for p in self.unassigned if not rack_matching or self.racks_match(consumer, p)
            ][: self.room(consumer)]
            if take:
                self.give(consumer, take, assignment)


class RangeAssignor(Assignor):
    name = "range"

    def assign(self, topics: TopicLayout, members: Mapping[str, MemberSubscription]) -> Assignment:
        order = sorted_members(members)
        member_racks = {m: rack for m in order if (rack := members[m].rack_id)}
        states = [
            _TopicState(
                topic,
                list(topics[topic]),
                [m for m in order if topic in members[m].topics],
                member_racks,
            )
            for topic in subscribed_topics(topics, members)
        ]
        assignment: Assignment = {m: [] for m in order}
        use_racks = rack_aware(topics, members)
        if use_racks:
            self._rack_pass(states, assignment)
        for state in states:
            state.fill(assignment, rack_matching=False)
        for partitions in assignment.values():
            partitions.sort()
        return assignment

    @staticmethod
    def _rack_pass(states: list[_TopicState], assignment: Assignment) -> None:
        """Rack-matched partitions first; co-partitioned topics move together."""
        groups: dict[tuple[tuple[str, ...], int], list[_TopicState]] = defaultdict(list)
        for state in states:
            groups[(tuple(state.consumers), len(state.racks))].append(state)
        for (consumers, count), group in groups.items():
            if len(group) == 1:
                group[0].fill(assignment, rack_matching=True)
                continue
            remaining = list(consumers)
            for p in range(count):
                for consumer in remaining:
                    if all(s.racks_match(consumer, p) and s.room(consumer) > 0 for s in group):
                        for state in group:
                            state.give(consumer, [p], assignment)
                        if all(s.room(consumer) == 0 for s in group):
                            remaining.remove(consumer)
                        break
                if not remaining:
                    break
