"""A consumer group of the KIP-848 protocol: its members, epochs, the target assignment, and
each member's way towards it.

Pure bookkeeping, as `group.GroupMetadata` is for the classic protocol; the heartbeat rules
(`consumer_heartbeats`) drive it. The protocol, as Kafka defines it:

- the *group epoch* grows whenever what the assignment depends on changes: a member joins or
  leaves, a subscription changes, a subscribed topic gains partitions or appears;
- the *target assignment* is computed by the server-side assignor for a group epoch, and then
  carries that epoch (the *assignment epoch*);
- each member moves to its target on its own heartbeats: it is first told to give up what the
  target takes from it (it stays at its epoch, *unrevoked partitions*), and once it says it
  no longer owns them it gets the target epoch and what of its target is free. A partition
  another member still owns is given only once that member has released it (*unreleased
  partitions*), so no partition is ever owned by two members at once.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Iterable, Mapping

import attrs

# topic id -> partitions
Assignment = dict[uuid.UUID, frozenset[int]]
TopicPartitionId = tuple[uuid.UUID, int]


class MemberState(enum.Enum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


@attrs.define(slots=True)
class ConsumerMember:
    member_id: str
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    instance_id: str | None = None
    rack_id: str | None = None
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: Assignment = attrs.Factory(dict)
    pending_revocation: Assignment = attrs.Factory(dict)

    def owns(self) -> Iterable[TopicPartitionId]:
        for source in (self.assigned, self.pending_revocation):
            for topic_id, partitions in source.items():
                for p in partitions:
                    yield topic_id, p


def _partitions(assignment: Assignment) -> set[TopicPartitionId]:
    return {(t, p) for t, ps in assignment.items() for p in ps}


def _grouped(pairs: Iterable[TopicPartitionId]) -> Assignment:
    out: dict[uuid.UUID, set[int]] = {}
    for topic_id, p in pairs:
        out.setdefault(topic_id, set()).add(p)
    return {t: frozenset(ps) for t, ps in out.items()}


def as_assignment(pairs: Iterable[tuple[uuid.UUID, Iterable[int]]]) -> Assignment:
    return _grouped((t, p) for t, ps in pairs for p in ps)


def next_member_state(
    member: ConsumerMember,
    target: Assignment,
    target_epoch: int,
    owner_of: Callable[[TopicPartitionId], str | None],
    owned: Assignment | None,
) -> ConsumerMember:
    """The member after one step towards `target` (Kafka's CurrentAssignmentBuilder).

    `owned` is what the member says it owns (None: unchanged since its last heartbeat);
    `owner_of` names the member that owns a partition now, if any.
    """
    if member.state is MemberState.UNREVOKED_PARTITIONS:
        if owned is None or _partitions(owned) & _partitions(member.pending_revocation):
            return member  # still revoking
        member = attrs.evolve(member, pending_revocation={}, state=MemberState.STABLE)
    elif member.state is MemberState.STABLE and member.member_epoch == target_epoch:
        return member
    wanted = _partitions(target)
    current = _partitions(member.assigned)
    keep = current & wanted
    revoke = current - wanted
    if owned is not None:
        revoke &= _partitions(owned)  # what the member already gave up needs no revoking
    if revoke:
        return attrs.evolve(
            member,
            state=MemberState.UNREVOKED_PARTITIONS,
            assigned=_grouped(keep),
            pending_revocation=_grouped(revoke),
        )
    unreleased = False
    for tp in wanted - current:
        owner = owner_of(tp)
        if owner is None or owner == member.member_id:
            keep.add(tp)
        else:
            unreleased = True
    return attrs.evolve(
        member,
        state=MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE,
        previous_member_epoch=member.member_epoch
        if member.member_epoch != target_epoch
        else member.previous_member_epoch,
        member_epoch=target_epoch,
        assigned=_grouped(keep),
        pending_revocation={},
    )


@attrs.define(slots=True)
class Logged:
    """What `__consumer_offsets` holds of a group: the next write is what differs from it.
    The members and targets are the objects last written (they are replaced, never changed
    in place, so an unchanged one is the same object)."""

    group_epoch: int = 0
    target_epoch: int = 0
    subscribed_metadata: dict[str, tuple[uuid.UUID, int]] = attrs.Factory(dict)
    members: dict[str, ConsumerMember] = attrs.Factory(dict)
    target: dict[str, Assignment] = attrs.Factory(dict)


class ConsumerGroup:
    """The KIP-848 part of a group (its committed offsets stay in `GroupMetadata`)."""

    def __init__(self) -> None:
        self.group_epoch = 0
        self.members: dict[str, ConsumerMember] = {}
        self.target_epoch = 0
        self.target: dict[str, Assignment] = {}
        # What the last target was computed from: topic name -> (topic id, partitions).
        self.subscribed_metadata: dict[str, tuple[uuid.UUID, int]] = {}
        self.assignor_name = ""
        self._owners: dict[TopicPartitionId, str] = {}
        self.logged = Logged()

    def mark_logged(self) -> None:
        """What the group is now is in the log."""
        self.logged = Logged(
            self.group_epoch,
            self.target_epoch,
            self.subscribed_metadata,
            dict(self.members),
            dict(self.target),
        )

    def __repr__(self) -> str:
        return (
            f"<ConsumerGroup epoch={self.group_epoch} assignment epoch={self.target_epoch} "
            f"members={len(self.members)}>"
        )

    @property
    def state(self) -> str:
        """Kafka's names: Empty, Assigning, Reconciling, Stable."""
        if not self.members:
            return "Empty"
        if self.target_epoch != self.group_epoch:
            return "Assigning"
        if any(
            m.member_epoch != self.target_epoch or m.state is not MemberState.STABLE
            for m in self.members.values()
        ):
            return "Reconciling"
        return "Stable"

    def owner_of(self, tp: TopicPartitionId) -> str | None:
        return self._owners.get(tp)

    def put(self, member: ConsumerMember) -> None:
        """Add or replace a member, keeping the index of who owns which partition."""
        old = self.members.get(member.member_id)
        if old is not None:
            for tp in old.owns():
                if self._owners.get(tp) == old.member_id:
                    del self._owners[tp]
        self.members[member.member_id] = member
        for tp in member.owns():
            self._owners[tp] = member.member_id

    def remove(self, member_id: str) -> ConsumerMember | None:
        member = self.members.pop(member_id, None)
        if member is not None:
            for tp in member.owns():
                if self._owners.get(tp) == member_id:
                    del self._owners[tp]
            self.target.pop(member_id, None)
            self.group_epoch += 1
        return member

    def member_with_instance(self, instance_id: str) -> ConsumerMember | None:
        for member in self.members.values():
            if member.instance_id == instance_id:
                return member
        return None

    def set_target(self, epoch: int, assignor: str, target: Mapping[str, Assignment]) -> None:
        self.target_epoch = epoch
        self.assignor_name = assignor
        self.target = dict(target)
