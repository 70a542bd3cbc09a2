"""One classic group: membership, generation, protocol, and its committed offsets.

Pure bookkeeping, no I/O and no clocks of its own (the caller passes wall-clock
milliseconds): the coordinator drives it. Kafka's rules, kept here:

- the first member to join is the leader; if the leader does not rejoin a rebalance,
  another member that did becomes leader;
- the protocol type is set by the first member, and every later member must speak it and
  share at least one protocol with all others; the group's protocol is the one most members
  prefer among those all of them support;
- a static member (`group.instance.id`) keeps its place under a new member id when it
  rejoins, and its old member id is fenced;
- committed offsets live here too, with commits still being written kept apart as pending,
  so a fetch never sees an offset that is not yet durable; so are the offsets of open
  transactions (TxnOffsetCommit), by producer id, until their marker makes them committed
  (COMMIT, if newer than what is there) or drops them (ABORT).
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping

from gregor.broker.coordinator.group.consumer_group import ConsumerGroup
from gregor.broker.coordinator.group.member import MemberMetadata, Protocols
from gregor.broker.coordinator.group.offsets import CommittedOffset, OffsetAndMetadata
from gregor.broker.coordinator.group.results import (
    GroupOverview,
    GroupSummary,
    JoinedMember,
    JoinResult,
    Reply,
    SyncResult,
)
from gregor.broker.coordinator.group.state import VALID_PREVIOUS, GroupState
from gregor.client.timeouts import Timeout
from gregor.protocol.consumer_protocol import PROTOCOL_TYPE, ConsumerProtocolSubscription
from gregor.protocol.errors import DecodeError, ErrorCode
from gregor.protocol.primitives import INT16

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


class GroupMetadata:
    def __init__(self, group_id: str, state: GroupState, now_ms: int) -> None:
        self.group_id = group_id
        self.state = state
        self.current_state_timestamp: int | None = now_ms
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.generation_id = 0
        self.leader_id: str | None = None
        self.members: dict[str, MemberMetadata] = {}
        self.static_members: dict[str, str] = {}  # group.instance.id -> member id
        self.pending_members: set[str] = set()  # ids handed out with MEMBER_ID_REQUIRED
        self.pending_sync_members: set[str] = set()
        self.num_awaiting_join = 0
        self._protocol_votes: Counter[str] = Counter()
        self.offsets: dict[TopicPartition, CommittedOffset] = {}
        self.pending_offset_commits: dict[TopicPartition, OffsetAndMetadata] = {}
        # producer id -> the offsets of its open transaction (a record offset once written)
        self.pending_txn_offsets: dict[int, dict[TopicPartition, PendingTxnOffset]] = {}
        # For protocol type "consumer": the topics the members subscribe to (None when
        # unknown: not a consumer group, or a subscription that does not parse).
        self.subscribed_topics: set[str] | None = None
        # Set while an initial rebalance may be extended for members still arriving.
        self.new_member_added = False
        # The rebalance in progress (a delayed join) and the wait for every SyncGroup.
        self.join_timer: Timeout | None = None
        self.join_is_initial = False
        self.join_delay_ms = 0
        self.initial_delay_remaining_ms = 0
        self.sync_timer: Timeout | None = None
        self.sync_generation = -1
        # A group of the KIP-848 consumer protocol (its members are there, not in `members`).
        self.consumer: ConsumerGroup | None = None

    def __repr__(self) -> str:
        return (
            f"<Group {self.group_id} {self.state} generation={self.generation_id} "
            f"protocol={self.protocol_type}/{self.protocol_name} members={len(self.members)}>"
        )

    # -- state ---------------------------------------------------------------------------

    def is_(self, state: GroupState) -> bool:
        return self.state is state

    def transition_to(self, state: GroupState, now_ms: int) -> None:
        if self.state not in VALID_PREVIOUS[state]:
            raise RuntimeError(
                f"group {self.group_id} cannot move from {self.state} to {state} (allowed "
                f"from {sorted(str(s) for s in VALID_PREVIOUS[state])})"
            )
        self.state = state
        self.current_state_timestamp = now_ms

    @property
    def can_rebalance(self) -> bool:
        return self.state in VALID_PREVIOUS[GroupState.PREPARING_REBALANCE]

    @property
    def has_consumer_members(self) -> bool:
        """A KIP-848 consumer group with members."""
        return self.consumer is not None and bool(self.consumer.members)

    @property
    def is_consumer_group(self) -> bool:
        return self.protocol_type == PROTOCOL_TYPE

    # -- members -------------------------------------------------------------------------

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def get(self, member_id: str) -> MemberMetadata:
        return self.members[member_id]

    def __len__(self) -> int:
        return len(self.members)

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def add(self, member: MemberMetadata, reply: Reply[JoinResult] | None = None) -> None:
        if member.group_instance_id is not None:
            if member.group_instance_id in self.static_members:
                raise RuntimeError(
                    f"static member {member.group_instance_id} is already in {self.group_id}"
                )
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self._protocol_votes.update(member.protocol_names)
        member.awaiting_join = reply
        if reply is not None:
            self.num_awaiting_join += 1
        self.pending_members.discard(member.member_id)

    def remove(self, member_id: str) -> None:
        member = self.members.pop(member_id, None)
        if member is not None:
            self._protocol_votes.subtract(member.protocol_names)
            if member.is_awaiting_join:
                self.num_awaiting_join -= 1
            if member.group_instance_id is not None:
                self.static_members.pop(member.group_instance_id, None)
        if self.is_leader(member_id):
            self.leader_id = next(iter(self.members), None)
        self.pending_members.discard(member_id)
        self.pending_sync_members.discard(member_id)

    def update_member(
        self,
        member: MemberMetadata,
        protocols: Protocols,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        reply: Reply[JoinResult] | None,
    ) -> None:
        self._protocol_votes.subtract(member.protocol_names)
        member.supported_protocols = list(protocols)
        self._protocol_votes.update(member.protocol_names)
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        if reply is not None and not member.is_awaiting_join:
            self.num_awaiting_join += 1
        elif reply is None and member.is_awaiting_join:
            self.num_awaiting_join -= 1
        member.awaiting_join = reply

    def maybe_elect_new_joined_leader(self) -> bool:
        """If the leader did not rejoin, make a member that did the leader. False when the
        group has no leader or no member rejoined."""
        if self.leader_id is None:
            return False
        leader = self.members[self.leader_id]
        if leader.is_awaiting_join:
            return True
        for member_id, member in self.members.items():
            if member.is_awaiting_join:
                log.info(
                    "group %s: leader %s did not rejoin in time; %s is the new leader",
                    self.group_id,
                    self.leader_id,
                    member_id,
                )
                self.leader_id = member_id
                return True
        return False

    def replace_static_member(
        self, group_instance_id: str, old_member_id: str, new_member_id: str
    ) -> MemberMetadata:
        """A static member rejoined with a new member id: the same member, renamed. The
        requests still parked under the old id are fenced."""
        member = self.members.pop(old_member_id)
        self.maybe_invoke_join(
            member, JoinResult.failed(old_member_id, ErrorCode.FENCED_INSTANCE_ID)
        )
        self.maybe_invoke_sync(member, SyncResult.failed(ErrorCode.FENCED_INSTANCE_ID))
        member.member_id = new_member_id
        self.members[new_member_id] = member
        if self.is_leader(old_member_id):
            self.leader_id = new_member_id
        self.static_members[group_instance_id] = new_member_id
        return member

    def current_static_member_id(self, group_instance_id: str) -> str | None:
        return self.static_members.get(group_instance_id)

    def add_pending_member(self, member_id: str) -> None:
        if member_id in self.members:
            raise RuntimeError(f"{member_id} is already a member of {self.group_id}")
        self.pending_members.add(member_id)

    def add_pending_sync_member(self, member_id: str) -> None:
        if member_id not in self.members:
            raise RuntimeError(f"{member_id} is not a member of {self.group_id}")
        self.pending_sync_members.add(member_id)

    @property
    def has_received_sync_from_all_members(self) -> bool:
        return not self.pending_sync_members

    @property
    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_awaiting_join and not self.pending_members

    def not_yet_rejoined_members(self) -> list[MemberMetadata]:
        return [m for m in self.members.values() if not m.is_awaiting_join]

    @property
    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    @staticmethod
    def generate_member_id(client_id: str, group_instance_id: str | None) -> str:
        prefix = client_id if group_instance_id is None else group_instance_id
        return f"{prefix}-{uuid.uuid4()}"

    # -- parked requests -----------------------------------------------------------------

    def maybe_invoke_join(self, member: MemberMetadata, result: JoinResult) -> None:
        reply = member.awaiting_join
        if reply is not None:
            member.awaiting_join = None
            self.num_awaiting_join -= 1
            reply.set(result)

    def maybe_invoke_sync(self, member: MemberMetadata, result: SyncResult) -> bool:
        """Answer the member's parked SyncGroup; whether there was one."""
        reply = member.awaiting_sync
        if reply is None:
            return False
        member.awaiting_sync = None
        reply.set(result)
        return True

    # -- protocols -----------------------------------------------------------------------

    def supports_protocols(self, protocol_type: str, protocols: set[str]) -> bool:
        if self.is_(GroupState.EMPTY):
            return bool(protocol_type) and bool(protocols)
        return self.protocol_type == protocol_type and any(
            self._protocol_votes[p] == len(self.members) for p in protocols
        )

    def candidate_protocols(self) -> set[str]:
        everyone = len(self.members)
        return {p for p, n in self._protocol_votes.items() if n == everyone}

    def select_protocol(self) -> str:
        if not self.members:
            raise RuntimeError(f"cannot select a protocol for the empty group {self.group_id}")
        candidates = self.candidate_protocols()
        votes = Counter(member.vote(candidates) for member in self.members.values())
        # Ties go to the protocol first voted for, as members are listed in join order.
        return max(votes, key=lambda p: votes[p])

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(GroupState.EMPTY, now_ms)
        self.pending_sync_members.clear()

    def current_member_metadata(self) -> tuple[JoinedMember, ...]:
        """Every member and its metadata for the group's protocol (the leader's JoinGroup)."""
        if self.state in (GroupState.DEAD, GroupState.PREPARING_REBALANCE):
            raise RuntimeError(f"no member metadata of group {self.group_id} in {self.state}")
        assert self.protocol_name is not None
        return tuple(
            JoinedMember(m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
            for m in self.members.values()
        )

    def compute_subscribed_topics(self) -> set[str] | None:
        if self.protocol_type != PROTOCOL_TYPE:
            return None
        if not self.members:
            return set()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        try:
            for member in self.members.values():
                topics |= set(_subscribed_topics(member.metadata(self.protocol_name)))
        except DecodeError as exc:
            log.warning(
                "group %s: cannot read the consumer protocol of its members (%s); the "
                "coordinator does not know the subscribed topics",
                self.group_id,
                exc,
            )
            return None
        return topics

    def is_subscribed_to_topic(self, topic: str) -> bool:
        return True if self.subscribed_topics is None else topic in self.subscribed_topics

    # -- descriptions --------------------------------------------------------------------

    def summary(self) -> GroupSummary:
        if self.is_(GroupState.STABLE):
            protocol = self.protocol_name
            assert protocol is not None
            members = tuple(m.summary(protocol) for m in self.members.values())
        else:
            protocol = None
            members = tuple(m.summary(None) for m in self.members.values())
        return GroupSummary(
            ErrorCode.NONE, str(self.state), self.protocol_type or "", protocol or "", members
        )

    def overview(self) -> GroupOverview:
        if self.consumer is not None:
            return GroupOverview(self.group_id, PROTOCOL_TYPE, self.consumer.state, "consumer")
        return GroupOverview(self.group_id, self.protocol_type or "", str(self.state))

    # -- offsets -------------------------------------------------------------------------

    def offset(self, partition: TopicPartition) -> OffsetAndMetadata | None:
        found = self.offsets.get(partition)
        return None if found is None else found.value

    def all_offsets(self) -> dict[TopicPartition, OffsetAndMetadata]:
        return {tp: committed.value for tp, committed in self.offsets.items()}

    @property
    def has_offsets(self) -> bool:
        return (
            bool(self.offsets)
            or bool(self.pending_offset_commits)
            or bool(self.pending_txn_offsets)
        )

    def initialize_offsets(self, offsets: Mapping[TopicPartition, CommittedOffset]) -> None:
        self.offsets.update(offsets)

    def prepare_offset_commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
        self.pending_offset_commits.update(offsets)

    def on_offset_commit_append(
        self, partition: TopicPartition, committed: CommittedOffset
    ) -> None:
        if partition in self.pending_offset_commits:
            current = self.offsets.get(partition)
            if current is None or current.older_than(committed):
                self.offsets[partition] = committed
        if self.pending_offset_commits.get(partition) == committed.value:
            del self.pending_offset_commits[partition]

    def fail_pending_offset_write(
        self, partition: TopicPartition, value: OffsetAndMetadata
    ) -> None:
        if self.pending_offset_commits.get(partition) == value:
            del self.pending_offset_commits[partition]

    def has_pending_offset_commit(self, partition: TopicPartition) -> bool:
        return partition in self.pending_offset_commits or any(
            partition in pending for pending in self.pending_txn_offsets.values()
        )

    # -- transactional offsets (TxnOffsetCommit) -----------------------------------------

    def prepare_txn_offset_commit(
        self, producer_id: int, offsets: Mapping[TopicPartition, OffsetAndMetadata]
    ) -> None:
        pending = self.pending_txn_offsets.setdefault(producer_id, {})
        for tp, value in offsets.items():
            pending[tp] = PendingTxnOffset(value)

    def on_txn_offset_commit_append(
        self, producer_id: int, partition: TopicPartition, committed: CommittedOffset
    ) -> None:
        pending = self.pending_txn_offsets.get(producer_id, {})
        found = pending.get(partition)
        if found is not None and found.value == committed.value:
            found.committed = committed

    def fail_pending_txn_offset_write(
        self, producer_id: int, partition: TopicPartition, value: OffsetAndMetadata
    ) -> None:
        pending = self.pending_txn_offsets.get(producer_id)
        if pending is None:
            return
        found = pending.get(partition)
        if found is not None and found.committed is None and found.value == value:
            del pending[partition]
        if not pending:
            del self.pending_txn_offsets[producer_id]

    def has_pending_txn_offsets(self, producer_id: int) -> bool:
        return producer_id in self.pending_txn_offsets

    def complete_pending_txn_offsets(self, producer_id: int, commit: bool) -> int:
        """The producer's marker arrived: its written offsets count (if newer than the
        committed ones) or are dropped. How many became visible."""
        pending = self.pending_txn_offsets.pop(producer_id, {})
        applied = 0
        if commit:
            for tp, found in pending.items():
                committed = found.committed
                if committed is None:
                    continue  # its write failed, or has not finished: it was never answered
                current = self.offsets.get(tp)
                if current is None or current.older_than(committed):
                    self.offsets[tp] = committed
                    applied += 1
        return applied

    def remove_offsets(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        removed = {}
        for partition in list(partitions):
            self.pending_offset_commits.pop(partition, None)
            for pending in self.pending_txn_offsets.values():
                pending.pop(partition, None)
            found = self.offsets.pop(partition, None)
            if found is not None:
                removed[partition] = found.value
        return removed

    def remove_all_offsets(self) -> dict[TopicPartition, OffsetAndMetadata]:
        return self.remove_offsets(list(self.offsets))

    def remove_expired_offsets(
        self, now_ms: int, retention_ms: int
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """Offsets past retention: of an Empty group, counted from when it became empty; of a
        stable consumer group, offsets of topics nobody subscribes to any more, counted from
        their commit; of a group without protocol (offsets only), from their commit."""
        if self.protocol_type is not None and self.is_(GroupState.EMPTY):
            since_empty = self.current_state_timestamp
            expired = self._expired(
                now_ms,
                retention_ms,
                lambda c: since_empty if since_empty is not None else c.value.commit_timestamp_ms,
            )
        elif (
            self.protocol_type == PROTOCOL_TYPE
            and self.subscribed_topics is not None
            and self.is_(GroupState.STABLE)
        ):
            expired = self._expired(
                now_ms, retention_ms, lambda c: c.value.commit_timestamp_ms, self.subscribed_topics
            )
        elif self.protocol_type is None:
            expired = self._expired(now_ms, retention_ms, lambda c: c.value.commit_timestamp_ms)
        else:
            return {}
        for partition in expired:
            del self.offsets[partition]
        return expired

    def _expired(
        self,
        now_ms: int,
        retention_ms: int,
        base: Callable[[CommittedOffset], int],
        subscribed: Collection[str] = (),
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        out = {}
        for partition, committed in self.offsets.items():
            if partition[0] in subscribed or partition in self.pending_offset_commits:
                continue
            expire = committed.value.expire_timestamp_ms
            if expire is None:
                is_expired = now_ms - base(committed) >= retention_ms
            else:
                is_expired = now_ms >= expire  # an explicit retention of OffsetCommit v2-v4
            if is_expired:
                out[partition] = committed.value
        return out


class PendingTxnOffset:
    """A transactional offset: its value, and where it was written once it was."""

    __slots__ = ("committed", "value")

    def __init__(self, value: OffsetAndMetadata) -> None:
        self.value = value
        self.committed: CommittedOffset | None = None


def _subscribed_topics(metadata: bytes) -> list[str]:
    """The topics of a consumer subscription, read as v0: every later version starts with
    v0's fields, so this reads any version."""
    if len(metadata) < 2:
        raise DecodeError(f"a subscription of {len(metadata)} bytes has no version")
    if INT16.unpack_from(metadata, 0)[0] < 0:
        raise DecodeError("a subscription with a negative version")
    subscription, _ = ConsumerProtocolSubscription.decode_prefix(metadata, 0, 2)
    return subscription.topics
