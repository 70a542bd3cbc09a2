"""What an assignor is given and what it returns.

The group leader runs one assignor over every member's subscription and the partitions of
the subscribed topics. Members are described by what they sent in JoinGroup (the consumer
protocol subscription) plus their group.instance.id; topics by their partitions, each with
the racks its replicas live on (for rack-aware assignment, KIP-881).
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import ClassVar

import attrs

from gregor.client.types import TopicPartition

# For each topic, for each partition index, the racks of its replicas (empty: unknown).
TopicLayout = Mapping[str, Sequence[frozenset[str]]]
Assignment = dict[str, list[TopicPartition]]


class RebalanceProtocol(enum.Enum):
    """Eager: every member gives up everything before a rebalance. Cooperative: members give
    up only what moves, in a second rebalance (KIP-429)."""

    EAGER = 0
    COOPERATIVE = 1


@attrs.frozen
class MemberSubscription:
    """One member as the leader sees it."""

    member_id: str
    topics: tuple[str, ...]
    owned_partitions: tuple[TopicPartition, ...] = ()
    generation_id: int = -1  # the generation the owned partitions are from; -1: unknown
    user_data: bytes | None = None
    rack_id: str | None = None
    group_instance_id: str | None = None

    @property
    def sort_key(self) -> tuple[int, str]:
        """Static members first, by instance id, then dynamic ones by member id (as Kafka):
        a restarted static member gets a new member id but keeps its place."""
        if self.group_instance_id is not None:
            return (0, self.group_instance_id)
        return (1, self.member_id)


class Assignor(ABC):
    """A partition assignment strategy (partition.assignment.strategy)."""

    name: ClassVar[str]
    protocols: ClassVar[tuple[RebalanceProtocol, ...]] = (RebalanceProtocol.EAGER,)

    def subscription_user_data(self, topics: Sequence[str]) -> bytes | None:
        """What this member adds to its subscription for the leader's assignor."""
        return None

    def on_assignment(self, partitions: Sequence[TopicPartition], generation: int) -> None:
        """Called on every member with what it was given, after each rebalance."""
        return None

    @abstractmethod
    def assign(self, topics: TopicLayout, members: Mapping[str, MemberSubscription]) -> Assignment:
        """Every member's partitions (sorted). Topics missing from `topics` are not assigned;
        every member id appears in the result, possibly with nothing."""


def sorted_members(members: Mapping[str, MemberSubscription]) -> list[str]:
    return [m.member_id for m in sorted(members.values(), key=lambda m: m.sort_key)]


def subscribed_topics(topics: TopicLayout, members: Mapping[str, MemberSubscription]) -> list[str]:
    """The topics some member subscribes to and the metadata knows, sorted."""
    wanted = {topic for member in members.values() for topic in member.topics}
    return sorted(topic for topic in wanted if topic in topics and len(topics[topic]) > 0)


def rack_aware(topics: TopicLayout, members: Mapping[str, MemberSubscription]) -> bool:
    """Whether racks can matter: members name racks, partitions have replicas there, and not
    every partition is on every rack (then any placement is as good as any other)."""
    member_racks = {m.rack_id for m in members.values() if m.rack_id}
    if not member_racks:
        return False
    partition_racks = [racks for layout in topics.values() for racks in layout]
    all_racks = frozenset().union(*partition_racks) if partition_racks else frozenset()
    if member_racks.isdisjoint(all_racks):
        return False
    return any(racks != all_racks for racks in partition_racks)
