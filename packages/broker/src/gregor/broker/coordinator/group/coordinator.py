"""GroupCoordinator: the classic group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup),
offset commits and fetches, and the group admin APIs, as Kafka's coordinator runs them.

The protocol, in short:

1. Members send JoinGroup. From JoinGroup v4 a member without an id first gets a new id with
   MEMBER_ID_REQUIRED and joins again with it. The first join of an Empty group waits
   `group.initial.rebalance.delay.ms` (longer while members keep arriving, up to the
   rebalance timeout) for the others; later rebalances complete as soon as every known member
   has rejoined, or at the rebalance timeout without the ones that did not.
2. Completing the join makes a new generation: the protocol is chosen, every member gets the
   generation, the leader also every member's metadata.
3. The leader computes the assignment and sends it in its SyncGroup; the group's metadata is
   written to `__consumer_offsets` and, once replicated, every member's parked SyncGroup
   answers with its assignment. The group is Stable.
4. Members heartbeat within their session timeout; one that does not is removed, which
   starts a rebalance. So do a LeaveGroup, a leader's JoinGroup, and a follower's JoinGroup
   with changed metadata.

A static member (`group.instance.id`) that restarts rejoins under its instance id and takes
its old place without a rebalance; a second process with the same instance id fences the
first (FENCED_INSTANCE_ID).

Everything here runs on the broker's event loop, between awaits: a handler calls in, the
state changes at once, and anything to wait for (other members, a write, a timeout) ends in
a `Reply` being set. Timeouts are timers on trio's clock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Protocol

import trio

from gregor.broker.coordinator.group.config import GroupConfig
from gregor.broker.coordinator.group.group import GroupMetadata, TopicPartition
from gregor.broker.coordinator.group.manager import GroupMetadataManager
from gregor.broker.coordinator.group.member import MemberMetadata, Protocols
from gregor.broker.coordinator.group.offsets import FetchedOffset, OffsetAndMetadata
from gregor.broker.coordinator.group.results import (
    UNKNOWN_MEMBER_ID,
    GroupOverview,
    GroupSummary,
    JoinResult,
    LeaveResult,
    LeftMember,
    Reply,
    SyncResult,
)
from gregor.broker.coordinator.group.state import GroupState
from gregor.broker.coordinator.group.storage import OffsetsTopic
from gregor.broker.coordinator.timers import TimerQueue
from gregor.broker.topic_names import CONSUMER_OFFSETS
from gregor.protocol.apis import ApiKey
from gregor.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

# A new member's JoinGroup is parked at most this long; if its client gave up meanwhile, the
# member would otherwise linger in the rebalance.
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000
CLASSIC = "classic"
# APIs that accept the empty group id (old clients commit and fetch offsets with it).
_EMPTY_GROUP_ID_ALLOWED = frozenset(
    {ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH, ApiKey.DESCRIBE_GROUPS, ApiKey.DELETE_GROUPS}
)

Offsets = Mapping[TopicPartition, OffsetAndMetadata]


class PartitionRole(Protocol):
    """What the coordinator needs of a partition whose leadership changed."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def leader_epoch(self) -> int: ...
    @property
    def is_leader(self) -> bool: ...


class GroupCoordinator:
    def __init__(
        self,
        broker_id: int,
        config: GroupConfig,
        topic: OffsetsTopic,
        partition_count: Callable[[], int] | None = None,
        wall_clock: Callable[[], int] | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.config = config
        count = partition_count or (lambda: config.offsets_topic_partitions)
        self.manager = (
            GroupMetadataManager(config, topic, count)
            if wall_clock is None
            else GroupMetadataManager(config, topic, count, wall_clock)
        )
        self.timers = TimerQueue(f"group-coordinator-{broker_id}")
        self.active = False

    def __repr__(self) -> str:
        return f"<GroupCoordinator {self.broker_id}>"

    def _now(self) -> int:
        return self.manager.now_ms()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(self.timers.run)
            await nursery.start(self.manager.run)
            self.active = True
            log.info("group coordinator %d started", self.broker_id)
            task_status.started()
            try:
                await trio.sleep_forever()
            finally:
                self.active = False
                self.manager.shutting_down = True

    def partition_for(self, group_id: str) -> int:
        return self.manager.partition_for(group_id)

    # -- checks --------------------------------------------------------------------------

    def _validate_group_status(self, group_id: str, api: ApiKey) -> int | None:
        """The error for a request about this group, or None when this broker serves it."""
        if not group_id and api not in _EMPTY_GROUP_ID_ALLOWED:
            return ErrorCode.INVALID_GROUP_ID
        if not self.active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if self.manager.is_group_loading(group_id):
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if not self.manager.is_group_local(group_id):
            return ErrorCode.NOT_COORDINATOR
        return None

    @staticmethod
    def _validate_current_member(
        group: GroupMetadata, member_id: str, group_instance_id: str | None, operation: str
    ) -> int | None:
        """An instance id must map to this member id; the member id must be in the group."""
        if group_instance_id is not None:
            current = group.current_static_member_id(group_instance_id)
            if current is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if current != member_id:
                log.info(
                    "group %s: %s of member %s with instance id %s is fenced by member %s",
                    group.group_id,
                    operation,
                    member_id,
                    group_instance_id,
                    current,
                )
                return ErrorCode.FENCED_INSTANCE_ID
            return None
        return None if group.has(member_id) else ErrorCode.UNKNOWN_MEMBER_ID

    def _accept_joining_member(self, group: GroupMetadata, member_id: str) -> bool:
        state = group.state
        if state in (GroupState.EMPTY, GroupState.DEAD):
            return True
        if state is GroupState.PREPARING_REBALANCE:
            # Those already waiting count, not the size: a smaller group.max.size then lets
            # the last to rejoin go.
            return (
                group.has(member_id) and group.get(member_id).is_awaiting_join
            ) or group.num_awaiting_join < self.config.max_size
        return group.has(member_id) or len(group) < self.config.max_size

    # -- JoinGroup -----------------------------------------------------------------------

    def handle_join_group(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        require_known_member_id: bool,
        support_skipping_assignment: bool,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: Protocols,
        reply: Reply[JoinResult],
        reason: str | None = None,
    ) -> None:
        error = self._validate_group_status(group_id, ApiKey.JOIN_GROUP)
        if error is not None:
            reply.set(JoinResult.failed(member_id, error))
            return
        if not (
            self.config.min_session_timeout_ms
            <= session_timeout_ms
            <= self.config.max_session_timeout_ms
        ):
            reply.set(JoinResult.failed(member_id, ErrorCode.INVALID_SESSION_TIMEOUT))
            return
        is_unknown_member = member_id == UNKNOWN_MEMBER_ID
        group = self.manager.get_or_maybe_create_group(group_id, is_unknown_member)
        if group is None:
            reply.set(JoinResult.failed(member_id, ErrorCode.UNKNOWN_MEMBER_ID))
            return
        reason = reason or "not provided"
        if not self._accept_joining_member(group, member_id):
            group.remove(member_id)
            reply.set(JoinResult.failed(UNKNOWN_MEMBER_ID, ErrorCode.GROUP_MAX_SIZE_REACHED))
        elif is_unknown_member:
            self._new_member_join(
                group,
                group_instance_id,
                require_known_member_id,
                support_skipping_assignment,
                client_id,
                client_host,
                rebalance_timeout_ms,
                session_timeout_ms,
                protocol_type,
                protocols,
                reply,
                reason,
            )
        else:
            self._current_member_join(
                group,
                member_id,
                group_instance_id,
                client_id,
                client_host,
                rebalance_timeout_ms,
                session_timeout_ms,
                protocol_type,
                protocols,
                reply,
                reason,
            )
        if group.is_(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group)

    def _new_member_join(
        self,
        group: GroupMetadata,
        group_instance_id: str | None,
        require_known_member_id: bool,
        support_skipping_assignment: bool,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: Protocols,
        reply: Reply[JoinResult],
        reason: str,
    ) -> None:
        if group.is_(GroupState.DEAD):
            # Just removed (moved to another coordinator, or deleted): find it again.
            reply.set(JoinResult.failed(UNKNOWN_MEMBER_ID, ErrorCode.COORDINATOR_NOT_AVAILABLE))
            return
        if not group.supports_protocols(protocol_type, {name for name, _ in protocols}):
            reply.set(JoinResult.failed(UNKNOWN_MEMBER_ID, ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
            return
        new_member_id = group.generate_member_id(client_id, group_instance_id)
        if group_instance_id is not None:
            old_member_id = group.current_static_member_id(group_instance_id)
            if old_member_id is not None:
                log.info(
                    "group %s: static member %s rejoins as %s (was %s) in state %s",
                    group.group_id,
                    group_instance_id,
                    new_member_id,
                    old_member_id,
                    group.state,
                )
                self._update_static_member_and_rebalance(
                    group,
                    old_member_id,
                    new_member_id,
                    group_instance_id,
                    protocols,
                    rebalance_timeout_ms,
                    session_timeout_ms,
                    reply,
                    reason,
                    support_skipping_assignment,
                )
                return
        elif require_known_member_id:
            log.info(
                "group %s: a new member gets id %s and must join again with it",
                group.group_id,
                new_member_id,
            )
            group.add_pending_member(new_member_id)
            self.timers.call_later(
                session_timeout_ms / 1000, self._on_expire_pending_member, group, new_member_id
            )
            reply.set(JoinResult.failed(new_member_id, ErrorCode.MEMBER_ID_REQUIRED))
            return
        self._add_member_and_rebalance(
            rebalance_timeout_ms,
            session_timeout_ms,
            new_member_id,
            group_instance_id,
            client_id,
            client_host,
            protocol_type,
            protocols,
            group,
            reply,
            reason,
        )

    def _current_member_join(
        self,
        group: GroupMetadata,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: Protocols,
        reply: Reply[JoinResult],
        reason: str,
    ) -> None:
        if group.is_(GroupState.DEAD):
            reply.set(JoinResult.failed(member_id, ErrorCode.COORDINATOR_NOT_AVAILABLE))
            return
        if not group.supports_protocols(protocol_type, {name for name, _ in protocols}):
            reply.set(JoinResult.failed(member_id, ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
            return
        if member_id in group.pending_members:
            # The second join of a member that was given its id: now it is added.
            if group_instance_id is not None:
                raise RuntimeError(
                    f"a pending member {member_id} of group {group.group_id} cannot be static"
                )
            self._add_member_and_rebalance(
                rebalance_timeout_ms,
                session_timeout_ms,
                member_id,
                None,
                client_id,
                client_host,
                protocol_type,
                protocols,
                group,
                reply,
                reason,
            )
            return
        error = self._validate_current_member(group, member_id, group_instance_id, "join-group")
        if error is not None:
            reply.set(JoinResult.failed(member_id, error))
            return
        member = group.get(member_id)
        state = group.state
        if state is GroupState.PREPARING_REBALANCE:
            self._update_member_and_rebalance(
                group,
                member,
                protocols,
                rebalance_timeout_ms,
                session_timeout_ms,
                f"member {member_id} joining during {state}; client reason: {reason}",
                reply,
            )
        elif state is GroupState.COMPLETING_REBALANCE:
            if member.matches(protocols):
                # The same join again (its response was lost): the current generation.
                reply.set(self._join_result(group, member_id, with_members=True))
            else:
                self._update_member_and_rebalance(
                    group,
                    member,
                    protocols,
                    rebalance_timeout_ms,
                    session_timeout_ms,
                    f"member {member_id} updating its metadata during {state}; "
                    f"client reason: {reason}",
                    reply,
                )
        elif state is GroupState.STABLE:
            if group.is_leader(member_id) or not member.matches(protocols):
                # A leader's join asks for a rebalance (its view of the topics changed).
                self._update_member_and_rebalance(
                    group,
                    member,
                    protocols,
                    rebalance_timeout_ms,
                    session_timeout_ms,
                    f"member {member_id} rejoining during {state}; client reason: {reason}",
                    reply,
                )
            else:
                reply.set(self._join_result(group, member_id, with_members=False))
        else:
            log.warning(
                "group %s: member %s rejoins in unexpected state %s",
                group.group_id,
                member_id,
                state,
            )
            reply.set(JoinResult.failed(member_id, ErrorCode.UNKNOWN_MEMBER_ID))

    def _join_result(
        self, group: GroupMetadata, member_id: str, *, with_members: bool
    ) -> JoinResult:
        """The current generation for a member (the leader gets every member's metadata)."""
        return JoinResult(
            member_id=member_id,
            error=ErrorCode.NONE,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader_id=group.leader_id or "",
            members=(
                group.current_member_metadata()
                if with_members and group.is_leader(member_id)
                else ()
            ),
        )

    def _add_member_and_rebalance(
        self,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        protocol_type: str,
        protocols: Protocols,
        group: GroupMetadata,
        reply: Reply[JoinResult],
        reason: str,
    ) -> None:
        member = MemberMetadata(
            member_id,
            group_instance_id,
            client_id,
            client_host,
            rebalance_timeout_ms,
            session_timeout_ms,
            protocol_type,
            protocols,
        )
        member.is_new = True
        if group.is_(GroupState.PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True  # the initial rebalance may wait longer
        group.add(member, reply)
        self._schedule_heartbeat(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self._maybe_prepare_rebalance(
            group,
            f"adding new member {member_id} with group instance id {group_instance_id}; "
            f"client reason: {reason}",
        )

    def _update_static_member_and_rebalance(
        self,
        group: GroupMetadata,
        old_member_id: str,
        new_member_id: str,
        group_instance_id: str,
        protocols: Protocols,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        reply: Reply[JoinResult],
        reason: str,
        support_skipping_assignment: bool,
    ) -> None:
        current_leader = group.leader_id
        member = group.replace_static_member(group_instance_id, old_member_id, new_member_id)
        self._schedule_heartbeat(group, member, member.session_timeout_ms)
        old_rebalance_timeout = member.rebalance_timeout_ms
        old_session_timeout = member.session_timeout_ms
        old_protocols = list(member.supported_protocols)
        group.update_member(member, protocols, rebalance_timeout_ms, session_timeout_ms, reply)
        state = group.state
        if state is GroupState.STABLE:
            if group.protocol_name != group.select_protocol():
                self._maybe_prepare_rebalance(
                    group,
                    f"static member {new_member_id} with instance id {group_instance_id} "
                    f"rejoined with other protocols; client reason: {reason}",
                )
                return
            # Same protocol: no rebalance; persist the new member id and answer with the
            # current generation.
            assignment = {m.member_id: m.assignment for m in group.members.values()}

            def stored(error: int) -> None:
                if error != ErrorCode.NONE:
                    log.warning(
                        "group %s: persisting static member %s failed: %s",
                        group.group_id,
                        group_instance_id,
                        ErrorCode(error).name,
                    )
                    group.update_member(
                        member, old_protocols, old_rebalance_timeout, old_session_timeout, None
                    )
                    old = group.replace_static_member(
                        group_instance_id, new_member_id, old_member_id
                    )
                    self._schedule_heartbeat(group, old, old.session_timeout_ms)
                    reply.set(
                        JoinResult(
                            member_id=UNKNOWN_MEMBER_ID,
                            error=error,
                            generation_id=group.generation_id,
                            protocol_type=group.protocol_type,
                            protocol_name=group.protocol_name,
                            leader_id=current_leader or "",
                        )
                    )
                    return
                if support_skipping_assignment:
                    # JoinGroup v9+: the leader learns it leads but must not reassign.
                    is_leader = group.is_leader(new_member_id)
                    result = JoinResult(
                        member_id=new_member_id,
                        error=ErrorCode.NONE,
                        generation_id=group.generation_id,
                        protocol_type=group.protocol_type,
                        protocol_name=group.protocol_name,
                        leader_id=group.leader_id or "",
                        skip_assignment=is_leader,
                        members=group.current_member_metadata() if is_leader else (),
                    )
                else:
                    # Older versions get the old leader id, so a rejoining leader does not
                    # compute an assignment that a stable group would not hand out.
                    result = JoinResult(
                        member_id=new_member_id,
                        error=ErrorCode.NONE,
                        generation_id=group.generation_id,
                        protocol_type=group.protocol_type,
                        protocol_name=group.protocol_name,
                        leader_id=current_leader or "",
                    )
                group.maybe_invoke_join(member, result)

            self.manager.store_group(group, assignment, stored)
        elif state is GroupState.COMPLETING_REBALANCE:
            # The leader may be assigning to the old member id: start over.
            self._prepare_rebalance(
                group,
                f"updating metadata of static member {new_member_id} with instance id "
                f"{group_instance_id}; client reason: {reason}",
            )
        elif state in (GroupState.EMPTY, GroupState.DEAD):
            raise RuntimeError(
                f"group {group.group_id} in {state} cannot have static member {group_instance_id}"
            )

    def _update_member_and_rebalance(
        self,
        group: GroupMetadata,
        member: MemberMetadata,
        protocols: Protocols,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        reason: str,
        reply: Reply[JoinResult],
    ) -> None:
        group.update_member(member, protocols, rebalance_timeout_ms, session_timeout_ms, reply)
        self._maybe_prepare_rebalance(group, reason)

    # -- rebalancing ---------------------------------------------------------------------

    def _maybe_prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.can_rebalance:
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.is_(GroupState.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(group, ErrorCode.REBALANCE_IN_PROGRESS)
        self._remove_sync_expiration(group)
        initial = group.is_(GroupState.EMPTY)
        group.transition_to(GroupState.PREPARING_REBALANCE, self._now())
        log.info(
            "group %s: preparing to rebalance from generation %d (%s-%d); reason: %s",
            group.group_id,
            group.generation_id,
            CONSUMER_OFFSETS,
            self.partition_for(group.group_id),
            reason,
        )
        if initial:
            delay = self.config.initial_rebalance_delay_ms
            self._schedule_join(
                group, delay, initial=True, remaining_ms=max(group.rebalance_timeout_ms - delay, 0)
            )
        else:
            self._schedule_join(group, group.rebalance_timeout_ms, initial=False)

    def _schedule_join(
        self, group: GroupMetadata, delay_ms: int, *, initial: bool, remaining_ms: int = 0
    ) -> None:
        """Wait for members to join: at most `delay_ms`; the initial wait of an Empty group
        always runs its course (and may be extended by `remaining_ms`)."""
        if group.join_timer is not None:
            group.join_timer.cancel()
        group.join_is_initial = initial
        group.join_delay_ms = delay_ms
        group.initial_delay_remaining_ms = remaining_ms
        group.join_timer = self.timers.call_later(delay_ms / 1000, self._on_join_timeout, group)
        if not initial:
            self._try_complete_join(group)

    def _try_complete_join(self, group: GroupMetadata) -> None:
        """Complete the rebalance's join phase if every member has joined."""
        if group.join_timer is None or group.join_is_initial:
            return
        if group.has_all_members_joined:
            group.join_timer.cancel()
            group.join_timer = None
            self._on_complete_join(group)

    def _on_join_timeout(self, group: GroupMetadata) -> None:
        group.join_timer = None
        if group.join_is_initial and group.new_member_added and group.initial_delay_remaining_ms:
            group.new_member_added = False
            configured = self.config.initial_rebalance_delay_ms
            remaining = group.initial_delay_remaining_ms
            self._schedule_join(
                group,
                min(configured, remaining),
                initial=True,
                remaining_ms=max(remaining - group.join_delay_ms, 0),
            )
            return
        self._on_complete_join(group)

    def _on_complete_join(self, group: GroupMetadata) -> None:
        for member in group.not_yet_rejoined_members():
            if not member.is_static:
                log.info(
                    "group %s: removing member %s, which did not rejoin in time",
                    group.group_id,
                    member.member_id,
                )
                group.remove(member.member_id)
                self._cancel_heartbeat(member)
        if group.is_(GroupState.DEAD):
            log.info("group %s is dead; skipping the rebalance", group.group_id)
            return
        if not group.maybe_elect_new_joined_leader() and group.members:
            log.error("group %s cannot complete its rebalance: no member rejoined", group.group_id)
            self._schedule_join(group, group.rebalance_timeout_ms, initial=False)
            return
        group.init_next_generation(self._now())
        if group.is_(GroupState.EMPTY):
            log.info("group %s is empty in generation %d", group.group_id, group.generation_id)

            def stored(error: int) -> None:
                if error != ErrorCode.NONE:
                    # Safe: a later rebalance or expiry writes again.
                    log.warning(
                        "group %s: writing the empty group failed: %s",
                        group.group_id,
                        ErrorCode(error).name,
                    )

            self.manager.store_group(group, {}, stored)
            return
        log.info(
            "group %s: generation %d with %d members, protocol %s",
            group.group_id,
            group.generation_id,
            len(group),
            group.protocol_name,
        )
        for member in list(group.members.values()):
            group.maybe_invoke_join(
                member, self._join_result(group, member.member_id, with_members=True)
            )
            self._schedule_heartbeat(group, member, member.session_timeout_ms)
            member.is_new = False
            group.add_pending_sync_member(member.member_id)
        self._schedule_pending_sync(group)

    def _schedule_pending_sync(self, group: GroupMetadata) -> None:
        if group.sync_timer is not None:
            group.sync_timer.cancel()
        group.sync_generation = group.generation_id
        group.sync_timer = self.timers.call_later(
            group.rebalance_timeout_ms / 1000,
            self._on_expire_pending_sync,
            group,
            group.generation_id,
        )
        self._check_pending_sync(group)

    def _check_pending_sync(self, group: GroupMetadata) -> None:
        """Stop waiting for SyncGroups once every member sent one (or the rebalance moved)."""
        if group.sync_timer is None:
            return
        if (
            group.sync_generation != group.generation_id
            or group.state in (GroupState.DEAD, GroupState.EMPTY, GroupState.PREPARING_REBALANCE)
            or group.has_received_sync_from_all_members
        ):
            group.sync_timer.cancel()
            group.sync_timer = None

    def _remove_sync_expiration(self, group: GroupMetadata) -> None:
        group.pending_sync_members.clear()
        self._check_pending_sync(group)

    def _on_expire_pending_sync(self, group: GroupMetadata, generation_id: int) -> None:
        group.sync_timer = None
        if generation_id != group.generation_id or group.state not in (
            GroupState.COMPLETING_REBALANCE,
            GroupState.STABLE,
        ):
            log.error(
                "group %s: sync expiration of generation %d in %s (generation %d)",
                group.group_id,
                generation_id,
                group.state,
                group.generation_id,
            )
            return
        if group.has_received_sync_from_all_members:
            return
        missing = sorted(group.pending_sync_members)
        for member_id in missing:
            member = group.get(member_id)
            group.remove(member_id)
            self._cancel_heartbeat(member)
        self._prepare_rebalance(
            group, f"removing {missing}, which did not send their SyncGroup in time"
        )

    def _reset_and_propagate_assignment_error(self, group: GroupMetadata, error: int) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    def _set_and_propagate_assignment(
        self, group: GroupMetadata, assignment: Mapping[str, bytes]
    ) -> None:
        for member in group.members.values():
            member.assignment = assignment[member.member_id]
        self._propagate_assignment(group, ErrorCode.NONE)

    def _propagate_assignment(self, group: GroupMetadata, error: int) -> None:
        ok = error == ErrorCode.NONE
        for member in list(group.members.values()):
            if not member.assignment and ok:
                log.warning(
                    "group %s: member %s gets an empty assignment in generation %d",
                    group.group_id,
                    member.member_id,
                    group.generation_id,
                )
            result = SyncResult(
                error,
                group.protocol_type if ok else None,
                group.protocol_name if ok else None,
                member.assignment,
            )
            if group.maybe_invoke_sync(member, result):
                # Its session may have run out while it waited for the assignment.
                self._schedule_heartbeat(group, member, member.session_timeout_ms)

    # -- heartbeats ----------------------------------------------------------------------

    def _schedule_heartbeat(
        self, group: GroupMetadata, member: MemberMetadata, timeout_ms: int
    ) -> None:
        """The member showed it is alive: its session restarts for `timeout_ms`."""
        self._cancel_heartbeat(member)
        member.heartbeat_satisfied = False
        # A member parked in a rebalance is not timed: the rebalance is.
        if group.is_(GroupState.DEAD) or member.has_satisfied_heartbeat:
            return
        member.heartbeat_timer = self.timers.call_later(
            timeout_ms / 1000, self._on_expire_heartbeat, group, member
        )

    @staticmethod
    def _cancel_heartbeat(member: MemberMetadata) -> None:
        if member.heartbeat_timer is not None:
            member.heartbeat_timer.cancel()
            member.heartbeat_timer = None

    def _on_expire_heartbeat(self, group: GroupMetadata, member: MemberMetadata) -> None:
        member.heartbeat_timer = None
        if group.is_(GroupState.DEAD):
            return
        if group.members.get(member.member_id) is not member:
            return  # it left already
        if not member.has_satisfied_heartbeat:
            log.info(
                "group %s: member %s failed (session timeout %d ms); removing it",
                group.group_id,
                member.member_id,
                member.session_timeout_ms,
            )
            self._remove_member_and_update_group(
                group, member, f"removing member {member.member_id} on heartbeat expiration"
            )

    def _on_expire_pending_member(self, group: GroupMetadata, member_id: str) -> None:
        if group.is_(GroupState.DEAD) or member_id not in group.pending_members:
            return
        log.info(
            "group %s: pending member %s did not join within its session timeout",
            group.group_id,
            member_id,
        )
        self._remove_pending_member_and_update_group(group, member_id)

    def _remove_member_and_update_group(
        self, group: GroupMetadata, member: MemberMetadata, reason: str
    ) -> None:
        # A new member may be parked in the rebalance: it hears it is gone (and rejoins).
        group.maybe_invoke_join(
            member, JoinResult.failed(UNKNOWN_MEMBER_ID, ErrorCode.UNKNOWN_MEMBER_ID)
        )
        group.remove(member.member_id)
        self._cancel_heartbeat(member)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, reason)
        elif group.is_(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group)

    def _remove_pending_member_and_update_group(self, group: GroupMetadata, member_id: str) -> None:
        group.remove(member_id)
        if group.is_(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group)

    # -- SyncGroup -----------------------------------------------------------------------

    def handle_sync_group(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        protocol_type: str | None,
        protocol_name: str | None,
        group_instance_id: str | None,
        assignment: Mapping[str, bytes],
        reply: Reply[SyncResult],
    ) -> None:
        error = self._validate_group_status(group_id, ApiKey.SYNC_GROUP)
        if error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            # The rebalance's state is lost with the coordinator that had it: the member
            # must join again (old clients do not know LOAD_IN_PROGRESS here).
            reply.set(SyncResult.failed(ErrorCode.REBALANCE_IN_PROGRESS))
            return
        if error is not None:
            reply.set(SyncResult.failed(error))
            return
        group = self.manager.get_group(group_id)
        if group is None:
            reply.set(SyncResult.failed(ErrorCode.UNKNOWN_MEMBER_ID))
            return
        error = self._validate_sync_group(
            group, generation_id, member_id, protocol_type, protocol_name, group_instance_id
        )
        if error is not None:
            reply.set(SyncResult.failed(error))
            return
        state = group.state
        if state is GroupState.EMPTY:
            reply.set(SyncResult.failed(ErrorCode.UNKNOWN_MEMBER_ID))
        elif state is GroupState.PREPARING_REBALANCE:
            reply.set(SyncResult.failed(ErrorCode.REBALANCE_IN_PROGRESS))
        elif state is GroupState.COMPLETING_REBALANCE:
            group.get(member_id).awaiting_sync = reply
            self._remove_pending_sync_member(group, member_id)
            if group.is_leader(member_id):
                self._complete_sync(group, member_id, generation_id, assignment)
        elif state is GroupState.STABLE:
            self._remove_pending_sync_member(group, member_id)
            member = group.get(member_id)
            reply.set(
                SyncResult(
                    ErrorCode.NONE, group.protocol_type, group.protocol_name, member.assignment
                )
            )
            self._schedule_heartbeat(group, member, member.session_timeout_ms)
        else:
            raise RuntimeError(f"SyncGroup reached dead group {group.group_id}")

    def _complete_sync(
        self,
        group: GroupMetadata,
        leader_id: str,
        generation_id: int,
        given: Mapping[str, bytes],
    ) -> None:
        """The leader's assignment: write the group, then answer every member."""
        log.info(
            "group %s: assignment from leader %s for generation %d (%d members, %d static)",
            group.group_id,
            leader_id,
            group.generation_id,
            len(group),
            len(group.static_members),
        )
        missing = [m for m in group.members if m not in given]
        if missing:
            log.warning(
                "group %s: empty assignments for members %s in generation %d",
                group.group_id,
                missing,
                group.generation_id,
            )
        assignment = {m: given.get(m, b"") for m in group.members}

        def stored(error: int) -> None:
            # A member may have joined meanwhile: only the same rebalance completes.
            if not (
                group.is_(GroupState.COMPLETING_REBALANCE) and generation_id == group.generation_id
            ):
                return
            if error != ErrorCode.NONE:
                self._reset_and_propagate_assignment_error(group, error)
                self._maybe_prepare_rebalance(
                    group,
                    f"error {ErrorCode(error).name} when storing the group assignment "
                    f"during SyncGroup (member {leader_id})",
                )
            else:
                self._set_and_propagate_assignment(group, assignment)
                group.transition_to(GroupState.STABLE, self._now())

        self.manager.store_group(group, assignment, stored)

    def _validate_sync_group(
        self,
        group: GroupMetadata,
        generation_id: int,
        member_id: str,
        protocol_type: str | None,
        protocol_name: str | None,
        group_instance_id: str | None,
    ) -> int | None:
        if group.is_(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = self._validate_current_member(group, member_id, group_instance_id, "sync-group")
        if error is not None:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if protocol_type is not None and protocol_type != group.protocol_type:
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        if protocol_name is not None and protocol_name != group.protocol_name:
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        return None

    def _remove_pending_sync_member(self, group: GroupMetadata, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        self._check_pending_sync(group)

    # -- Heartbeat -----------------------------------------------------------------------

    def handle_heartbeat(
        self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int
    ) -> int:
        error = self._validate_group_status(group_id, ApiKey.HEARTBEAT)
        if error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            return ErrorCode.NONE  # loading: the member is not known yet either way
        if error is not None:
            return error
        group = self.manager.get_group(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.is_(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = self._validate_current_member(group, member_id, group_instance_id, "heartbeat")
        if error is not None:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        state = group.state
        if state is GroupState.EMPTY:
            return ErrorCode.UNKNOWN_MEMBER_ID
        member = group.get(member_id)
        self._schedule_heartbeat(group, member, member.session_timeout_ms)
        if state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    # -- LeaveGroup ----------------------------------------------------------------------

    def handle_leave_group(
        self, group_id: str, leaving: Sequence[tuple[str, str | None, str | None]]
    ) -> LeaveResult:
        """`leaving`: (member id, group instance id, reason) of each member."""
        error = self._validate_group_status(group_id, ApiKey.LEAVE_GROUP)
        if error is not None:
            return LeaveResult(error)
        group = self.manager.get_group(group_id)
        if group is None:
            return LeaveResult(
                ErrorCode.NONE,
                tuple(LeftMember(m, i, ErrorCode.UNKNOWN_MEMBER_ID) for m, i, _ in leaving),
            )
        if group.is_(GroupState.DEAD):
            return LeaveResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        results = []
        for member_id, group_instance_id, reason in leaving:
            results.append(
                LeftMember(
                    member_id,
                    group_instance_id,
                    self._leave_one(group, member_id, group_instance_id, reason),
                )
            )
        return LeaveResult(ErrorCode.NONE, tuple(results))

    def _leave_one(
        self,
        group: GroupMetadata,
        member_id: str,
        group_instance_id: str | None,
        reason: str | None,
    ) -> int:
        if member_id == UNKNOWN_MEMBER_ID:
            # An administrator removes a static member by its instance id.
            current = (
                None
                if group_instance_id is None
                else group.current_static_member_id(group_instance_id)
            )
            if current is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            self._remove_leaving_member(group, current, reason)
            return ErrorCode.NONE
        if member_id in group.pending_members:
            self._remove_pending_member_and_update_group(group, member_id)
            log.info("group %s: pending member %s left", group.group_id, member_id)
            return ErrorCode.NONE
        error = self._validate_current_member(group, member_id, group_instance_id, "leave-group")
        if error is not None:
            return error
        self._remove_leaving_member(group, member_id, reason)
        return ErrorCode.NONE

    def _remove_leaving_member(
        self, group: GroupMetadata, member_id: str, reason: str | None
    ) -> None:
        member = group.get(member_id)
        why = reason or "not provided"
        self._remove_member_and_update_group(
            group, member, f"removing member {member_id} on LeaveGroup; client reason: {why}"
        )
        log.info("group %s: member %s left; client reason: %s", group.group_id, member_id, why)

    # -- offsets -------------------------------------------------------------------------

    def handle_commit_offsets(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: Offsets,
        reply: Reply[dict[TopicPartition, int]],
    ) -> None:
        error = self._validate_group_status(group_id, ApiKey.OFFSET_COMMIT)
        if error is not None:
            reply.set(dict.fromkeys(offsets, error))
            return
        group = self.manager.get_group(group_id)
        if group is None:
            if generation_id >= 0:
                # A commit of a generation of a group that is gone.
                reply.set(dict.fromkeys(offsets, ErrorCode.ILLEGAL_GENERATION))
                return
            # Not using group management: the group exists for its offsets.
            log.info("group %s: created by a commit of offsets", group_id)
            group = self.manager.add_group(GroupMetadata(group_id, GroupState.EMPTY, self._now()))
        error = self._validate_offset_commit(group, generation_id, member_id, group_instance_id)
        if error is not None:
            reply.set(dict.fromkeys(offsets, error))
            return
        state = group.state
        if state is GroupState.EMPTY:
            self.manager.store_offsets(group, offsets, reply.set)
        elif state in (GroupState.STABLE, GroupState.PREPARING_REBALANCE):
            # A commit during the rebalance is allowed; the heartbeat tells of the rebalance.
            member = group.get(member_id)
            self._schedule_heartbeat(group, member, member.session_timeout_ms)
            self.manager.store_offsets(group, offsets, reply.set)
        elif state is GroupState.COMPLETING_REBALANCE:
            reply.set(dict.fromkeys(offsets, ErrorCode.REBALANCE_IN_PROGRESS))
        else:
            raise RuntimeError(f"offset commit reached group {group_id} in {state}")

    def _validate_offset_commit(
        self,
        group: GroupMetadata,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
    ) -> int | None:
        if group.is_(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and group.is_(GroupState.EMPTY):
            return None  # an admin client or a consumer without group management
        if generation_id >= 0 or member_id != UNKNOWN_MEMBER_ID or group_instance_id is not None:
            error = self._validate_current_member(
                group, member_id, group_instance_id, "offset-commit"
            )
            if error is not None:
                return error
            if generation_id != group.generation_id:
                return ErrorCode.ILLEGAL_GENERATION
            return None
        if not group.is_(GroupState.EMPTY):
            return ErrorCode.UNKNOWN_MEMBER_ID  # only members commit for a live group
        return None

    def handle_fetch_offsets(
        self,
        group_id: str,
        require_stable: bool,
        partitions: Iterable[TopicPartition] | None = None,
    ) -> tuple[int, dict[TopicPartition, FetchedOffset]]:
        error = self._validate_group_status(group_id, ApiKey.OFFSET_FETCH)
        if error is not None:
            return error, {}
        # Whatever the group's state: a group may use Kafka only to store offsets.
        return ErrorCode.NONE, self.manager.get_offsets(group_id, require_stable, partitions)

    def handle_delete_offsets(
        self, group_id: str, partitions: Sequence[TopicPartition]
    ) -> tuple[int, dict[TopicPartition, int]]:
        error = self._validate_group_status(group_id, ApiKey.OFFSET_DELETE)
        if error is not None:
            return error, {}
        group = self.manager.get_group(group_id)
        if group is None or group.is_(GroupState.DEAD):
            return self._missing_group_error(group_id), {}
        results: dict[TopicPartition, int] = {}
        eligible: list[TopicPartition] = []
        if group.is_(GroupState.EMPTY):
            eligible = list(partitions)
        elif group.is_consumer_group:
            for tp in partitions:
                if group.is_subscribed_to_topic(tp[0]):
                    results[tp] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
                else:
                    eligible.append(tp)
        else:
            return ErrorCode.NON_EMPTY_GROUP, {}
        if eligible:
            removed = self.manager.cleanup_group_metadata(
                [group], lambda g: g.remove_offsets(eligible)
            )
            results.update(dict.fromkeys(eligible, ErrorCode.NONE))
            log.info("group %s: deleted offsets of %s (%d removed)", group_id, eligible, removed)
        return ErrorCode.NONE, results

    def _missing_group_error(self, group_id: str) -> int:
        return (
            ErrorCode.GROUP_ID_NOT_FOUND
            if self.manager.group_not_exists(group_id)
            else ErrorCode.NOT_COORDINATOR
        )

    # -- admin ---------------------------------------------------------------------------

    def handle_delete_groups(self, group_ids: Collection[str]) -> dict[str, int]:
        errors: dict[str, int] = {}
        doomed: list[GroupMetadata] = []
        for group_id in dict.fromkeys(group_ids):
            error = self._validate_group_status(group_id, ApiKey.DELETE_GROUPS)
            if error is not None:
                errors[group_id] = error
                continue
            group = self.manager.get_group(group_id)
            if group is None or group.is_(GroupState.DEAD):
                errors[group_id] = self._missing_group_error(group_id)
            elif group.is_(GroupState.EMPTY):
                group.transition_to(GroupState.DEAD, self._now())
                doomed.append(group)
            else:
                errors[group_id] = ErrorCode.NON_EMPTY_GROUP
        if doomed:
            removed = self.manager.cleanup_group_metadata(doomed, lambda g: g.remove_all_offsets())
            for group in doomed:
                errors[group.group_id] = ErrorCode.NONE
            log.info(
                "deleted groups %s (%d offsets removed)", [g.group_id for g in doomed], removed
            )
        return errors

    def handle_list_groups(
        self, states: Collection[str], types: Collection[str]
    ) -> tuple[int, list[GroupOverview]]:
        if not self.active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
        error = (
            ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if self.manager.is_loading else ErrorCode.NONE
        )
        wanted_states = {s.lower() for s in states}
        # Every group here is a classic group: another type filter matches none.
        if types and CLASSIC not in {t.lower() for t in types}:
            return error, []
        groups = [
            group.overview()
            for group in self.manager.groups.values()
            if not wanted_states or str(group.state).lower() in wanted_states
        ]
        return error, groups

    def handle_describe_group(self, group_id: str) -> GroupSummary:
        error = self._validate_group_status(group_id, ApiKey.DESCRIBE_GROUPS)
        if error is not None:
            return GroupSummary(error, "")
        group = self.manager.get_group(group_id)
        if group is None:
            return GroupSummary(ErrorCode.NONE, str(GroupState.DEAD))
        return group.summary()

    # -- leadership of __consumer_offsets partitions -------------------------------------

    def on_leadership_change(
        self, led: Sequence[PartitionRole], resigned: Sequence[PartitionRole]
    ) -> None:
        """The replica manager's news: load the offsets partitions led now, unload the rest."""
        for p in led:
            if p.topic == CONSUMER_OFFSETS and p.is_leader:
                self.on_election(p.partition, p.leader_epoch)
        for p in resigned:
            if p.topic == CONSUMER_OFFSETS:
                self.on_resignation(p.partition, p.leader_epoch)

    def on_election(self, partition: int, epoch: int) -> None:
        log.info(
            "group coordinator %d: elected for partition %d in epoch %d",
            self.broker_id,
            partition,
            epoch,
        )
        self.manager.schedule_load(partition, epoch, self._on_group_loaded)

    def on_resignation(self, partition: int, epoch: int | None) -> None:
        log.info(
            "group coordinator %d: resigned partition %d in epoch %s",
            self.broker_id,
            partition,
            epoch,
        )
        self.manager.remove_groups_for_partition(partition, epoch, self._on_group_unloaded)

    def _on_group_loaded(self, group: GroupMetadata) -> None:
        if len(group) > self.config.max_size:
            self._prepare_rebalance(
                group,
                f"the loaded group is over capacity ({self.config.max_size}); rebalancing so "
                "its members can commit their offsets",
            )
        for member in list(group.members.values()):
            self._schedule_heartbeat(group, member, member.session_timeout_ms)

    def _on_group_unloaded(self, group: GroupMetadata) -> None:
        log.info("group %s of generation %d unloaded", group.group_id, group.generation_id)
        previous = group.state
        group.transition_to(GroupState.DEAD, self._now())
        if previous is GroupState.PREPARING_REBALANCE:
            for member in list(group.members.values()):
                group.maybe_invoke_join(
                    member, JoinResult.failed(member.member_id, ErrorCode.NOT_COORDINATOR)
                )
        elif previous in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            for member in list(group.members.values()):
                group.maybe_invoke_sync(member, SyncResult.failed(ErrorCode.NOT_COORDINATOR))
        self._remove_sync_expiration(group)
        for member in group.members.values():
            self._cancel_heartbeat(member)
        if group.join_timer is not None:
            group.join_timer.cancel()
            group.join_timer = None
