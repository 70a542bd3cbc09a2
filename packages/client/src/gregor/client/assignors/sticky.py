"""The sticky and cooperative-sticky assignors: balanced, and moving as little as possible.

Both start from what each member owned before (its claim), resolved across members: when
two members claim a partition, the one from the newer generation keeps it, and claims from
the same generation cancel out (neither keeps it). Then:

- When every member subscribes to the same topics, each member gets `P // N` or one more
  partition, with exactly `P % N` members getting one more: members keep what they owned up
  to those quotas, and the rest is dealt round-robin to members below their quota.
- Otherwise members keep what they owned of topics they still subscribe to, each unassigned
  partition goes to the eligible member with the fewest partitions, and partitions then
  move from a member to an eligible one with at least two fewer until no such move is left
  (every move makes the spread strictly smaller, so this ends). Newly placed partitions are
  moved before long-held ones.

With racks, owned partitions whose replicas are not on the member's rack are not kept, and
rack-matching members are preferred wherever the counts allow.

The eager sticky assignor learns what members owned from their user data (they give up
everything before joining); the cooperative one from the subscription's owned partitions
and generation (KIP-429, KIP-792), and leaves out of this round's assignment every partition
that changes owner: its owner revokes it first, and it is assigned in the rebalance that
follows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gregor.client.assignors.base import (
    Assignment,
    Assignor,
    MemberSubscription,
    RebalanceProtocol,
    TopicLayout,
    rack_aware,
    sorted_members,
    subscribed_topics,
)
from gregor.client.types import TopicPartition, partitions_by_topic
from gregor.protocol.consumer_protocol import (
    CooperativeStickyAssignorUserData,
    StickyAssignorUserData,
    TopicPartitions,
    decode_sticky_user_data,
)
from gregor.protocol.errors import DecodeError

NO_GENERATION = -1


def group_by_topic(partitions: Sequence[TopicPartition]) -> list[TopicPartitions]:
    return [TopicPartitions(t, ps) for t, ps in partitions_by_topic(partitions).items()]


class _Plan:
    """The state of one assignment run."""

    def __init__(
        self,
        topics: TopicLayout,
        members: Mapping[str, MemberSubscription],
        claims: Mapping[str, tuple[list[TopicPartition], int | None]],
    ) -> None:
        self.topics = topics
        self.members = members
        self.order = sorted_members(members)
        self.rank = {m: i for i, m in enumerate(self.order)}
        self.all_topics = subscribed_topics(topics, members)
        self.use_racks = rack_aware(topics, members)
        self.racks = {m: members[m].rack_id for m in self.order if members[m].rack_id}
        self.assignment: Assignment = {m: [] for m in self.order}
        self.owner: dict[TopicPartition, str] = {}  # the resolved previous owner
        self.contested: set[TopicPartition] = set()
        self._resolve(claims)

    def _resolve(self, claims: Mapping[str, tuple[list[TopicPartition], int | None]]) -> None:
        generation_of: dict[TopicPartition, int] = {}
        for member in self.order:
            partitions, generation = claims.get(member, ([], None))
            gen = NO_GENERATION if generation is None else generation
            for tp in partitions:
                layout = self.topics.get(tp.topic)
                if layout is None or not 0 <= tp.partition < len(layout):
                    continue
                if tp in self.contested:
                    continue
                other = self.owner.get(tp)
                if other is None or gen > generation_of[tp]:
                    self.owner[tp] = member
                    generation_of[tp] = gen
                elif gen == generation_of[tp]:
                    # Two owners in one generation: trust neither.
                    del self.owner[tp]
                    self.contested.add(tp)

    def racks_match(self, member: str, tp: TopicPartition) -> bool:
        rack = self.racks.get(member)
        return rack is None or not self.use_racks or rack in self.topics[tp.topic][tp.partition]

    def owned_by(self, member: str) -> list[TopicPartition]:
        """What a member may keep: owned, subscribed, on its rack; by partition then topic."""
        subscribed = self.members[member].topics
        kept = [
            tp
            for tp, owner in self.owner.items()
            if owner == member and tp.topic in subscribed and self.racks_match(member, tp)
        ]
        return sorted(kept, key=lambda tp: (tp.partition, tp.topic))

    def all_partitions(self, topics: Sequence[str]) -> list[TopicPartition]:
        return [TopicPartition(t, p) for t in topics for p in range(len(self.topics[t]))]

    def result(self, cooperative: bool) -> Assignment:
        if cooperative:
            for member, partitions in self.assignment.items():
                partitions[:] = [
                    tp
                    for tp in partitions
                    if tp not in self.contested and self.owner.get(tp, member) == member
                ]
        for partitions in self.assignment.values():
            partitions.sort()
        return self.assignment


def _assign_equal_subscriptions(plan: _Plan) -> None:
    """Every member subscribes to the same topics: quotas of P // N and one more."""
    total = sum(len(plan.topics[t]) for t in plan.all_topics)
    count = len(plan.order)
    low, extra = divmod(total, count)
    high = low + (1 if extra else 0)
    over = 0  # members holding `high` when high > low
    assignment = plan.assignment
    taken: set[TopicPartition] = set()
    for member in plan.order:
        owned = plan.owned_by(member)
        keep = low
        if extra and len(owned) >= high and over < extra:
            keep = high
            over += 1
        assignment[member] = owned[:keep]
        taken.update(assignment[member])
    unassigned = [tp for tp in plan.all_partitions(plan.all_topics) if tp not in taken]
    slots = extra - over  # members that may still go from `low` to `high`

    def candidates() -> list[str]:
        under = [m for m in plan.order if len(assignment[m]) < low]
        if under:
            return under
        return [m for m in plan.order if len(assignment[m]) == low] if slots > 0 else []

    turn = 0
    for rack_pass in (True, False) if plan.use_racks else (False,):
        remaining = []
        for tp in unassigned:
            choice = candidates()
            if rack_pass:
                choice = [m for m in choice if m in plan.racks and plan.racks_match(m, tp)]
            if not choice:
                remaining.append(tp)
                continue
            member = choice[turn % len(choice)]
            turn += 1
            if len(assignment[member]) == low:
                slots -= 1  # this member goes from `low` to `high`
            assignment[member].append(tp)
        unassigned = remaining


def _assign_general(plan: _Plan) -> None:
    """Members subscribe to different topics: place, then move until nothing can improve."""
    members = plan.members
    potential: dict[str, list[str]] = {
        t: [m for m in plan.order if t in members[m].topics] for t in plan.all_topics
    }
    topic_order = sorted(plan.all_topics, key=lambda t: (len(potential[t]), t))
    assignment = plan.assignment
    current: dict[TopicPartition, str] = {}
    for member in plan.order:
        assignment[member] = plan.owned_by(member)
        for tp in assignment[member]:
            current[tp] = member
    placed = []
    for tp in plan.all_partitions(topic_order):
        if tp in current:
            continue
        target = _least_loaded(plan, potential[tp.topic], tp)
        assignment[target].append(tp)
        current[tp] = target
        placed.append(tp)
    movable = [tp for tp in plan.all_partitions(topic_order) if len(potential[tp.topic]) > 1]
    for candidates in (placed, movable):
        moved = True
        while moved:
            moved = False
            for tp in candidates:
                owner = current[tp]
                target = _least_loaded(plan, potential[tp.topic], tp)
                if len(assignment[owner]) > len(assignment[target]) + 1:
                    assignment[owner].remove(tp)
                    assignment[target].append(tp)
                    current[tp] = target
                    moved = True


def _least_loaded(plan: _Plan, eligible: list[str], tp: TopicPartition) -> str:
    """The eligible member with the fewest partitions; on its rack when one is as light."""
    assignment = plan.assignment
    return min(
        eligible,
        key=lambda m: (
            len(assignment[m]),
            0 if m in plan.racks and plan.racks_match(m, tp) else 1,
            plan.rank[m],
        ),
    )


class _StickyBase(Assignor):
    """The algorithm; subclasses say where a member's previous partitions come from."""

    cooperative = False

    def __init__(self) -> None:
        self.partitions: list[TopicPartition] | None = None
        self.generation = NO_GENERATION

    def on_assignment(self, partitions: Sequence[TopicPartition], generation: int) -> None:
        self.partitions = list(partitions)
        self.generation = generation

    def claim(self, member: MemberSubscription) -> tuple[list[TopicPartition], int | None]:
        raise NotImplementedError

    def assign(self, topics: TopicLayout, members: Mapping[str, MemberSubscription]) -> Assignment:
        plan = _Plan(topics, members, {m: self.claim(s) for m, s in members.items()})
        if not plan.order:
            return {}
        wanted = {frozenset(t for t in members[m].topics if t in topics) for m in plan.order}
        if len(wanted) == 1:
            _assign_equal_subscriptions(plan)
        else:
            _assign_general(plan)
        return plan.result(self.cooperative)


class StickyAssignor(_StickyBase):
    """Eager sticky: previous partitions travel in the user data."""

    name = "sticky"

    def subscription_user_data(self, topics: Sequence[str]) -> bytes | None:
        if self.partitions is None:
            return None
        data = StickyAssignorUserData(group_by_topic(self.partitions), self.generation)
        return data.encode(1)

    def claim(self, member: MemberSubscription) -> tuple[list[TopicPartition], int | None]:
        data = decode_sticky_user_data(member.user_data)
        if data is None:
            return [], None
        partitions = [
            TopicPartition(t.topic, p) for t in data.previous_assignment for p in t.partitions
        ]
        # A v0 user data has no generation; decoding fills the default.
        return partitions, None if data.generation == NO_GENERATION else data.generation


class CooperativeStickyAssignor(_StickyBase):
    """Cooperative sticky: owned partitions are in the subscription; moves take two rounds."""

    name = "cooperative-sticky"
    protocols = (RebalanceProtocol.COOPERATIVE, RebalanceProtocol.EAGER)
    cooperative = True

    def subscription_user_data(self, topics: Sequence[str]) -> bytes | None:
        # For leaders that read subscriptions older than v2, which carry no generation.
        return CooperativeStickyAssignorUserData(self.generation).encode(0)

    def claim(self, member: MemberSubscription) -> tuple[list[TopicPartition], int | None]:
        owned = list(member.owned_partitions)
        if member.generation_id != NO_GENERATION:
            return owned, member.generation_id
        if member.user_data is None:
            return owned, None
        try:
            data = CooperativeStickyAssignorUserData.decode_prefix(member.user_data, 0)[0]
        except DecodeError:
            return owned, NO_GENERATION
        return owned, data.generation
