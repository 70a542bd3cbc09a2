"""The timed part of the classic protocol: rebalances, sessions, and pending syncs.

- A rebalance waits for members to (re)join: the first of an Empty group for
  `group.initial.rebalance.delay.ms` (again while new members keep arriving, within the
  rebalance timeout); later ones until every known member has rejoined, or for the
  rebalance timeout, after which dynamic members that did not rejoin are dropped.
- Completing it makes the next generation and answers every parked JoinGroup; members then
  have the rebalance timeout to send their SyncGroup, or are dropped (and the group
  rebalances again).
- The leader's assignment is written to `__consumer_offsets`; once replicated, every parked
  SyncGroup gets its member's assignment; if the write fails, every one gets the error.
- Each member's session restarts with every sign of life (a heartbeat, a commit, a join or
  sync answered); a member whose session runs out is removed. A member parked in a
  rebalance is not timed by its session but by the rebalance.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from gregor.broker.coordinator.group.config import GroupConfig
from gregor.broker.coordinator.group.group import GroupMetadata
from gregor.broker.coordinator.group.manager import GroupMetadataManager
from gregor.broker.coordinator.group.member import JoinRequest, MemberMetadata
from gregor.broker.coordinator.group.results import (
    UNKNOWN_MEMBER_ID,
    JoinResult,
    Reply,
    SyncResult,
)
from gregor.broker.coordinator.group.state import GroupState
from gregor.broker.topic_names import CONSUMER_OFFSETS
from gregor.client.timeouts import TimerQueue
from gregor.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

# A new member's JoinGroup is parked at most this long; if its client gave up meanwhile, the
# member would otherwise linger in the rebalance.
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000


class Rebalancer:
    def __init__(
        self, config: GroupConfig, manager: GroupMetadataManager, timers: TimerQueue
    ) -> None:
        self.config = config
        self.manager = manager
        self.timers = timers

    def now(self) -> int:
        return self.manager.now_ms()

    def expire_pending_member_later(
        self, group: GroupMetadata, member_id: str, timeout_ms: int
    ) -> None:
        """A member given its id with MEMBER_ID_REQUIRED must join within `timeout_ms`."""
        self.timers.call_later(timeout_ms / 1000, self._on_expire_pending_member, group, member_id)

    def join_result(
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

    def add_member_and_rebalance(
        self, group: GroupMetadata, member_id: str, join: JoinRequest, reply: Reply[JoinResult]
    ) -> None:
        member = MemberMetadata.joining(member_id, join)
        member.is_new = True
        if group.is_(GroupState.PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True  # the initial rebalance may wait longer
        group.add(member, reply)
        self.schedule_heartbeat(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self.maybe_prepare_rebalance(
            group,
            f"adding new member {member_id} with group instance id {join.group_instance_id}; "
            f"client reason: {join.why}",
        )

    def update_member_and_rebalance(
        self,
        group: GroupMetadata,
        member: MemberMetadata,
        join: JoinRequest,
        reason: str,
        reply: Reply[JoinResult],
    ) -> None:
        group.update_member(
            member, join.protocols, join.rebalance_timeout_ms, join.session_timeout_ms, reply
        )
        self.maybe_prepare_rebalance(group, f"{reason}; client reason: {join.why}")

    def maybe_prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.can_rebalance:
            self.prepare_rebalance(group, reason)

    def prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.is_(GroupState.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(group, ErrorCode.REBALANCE_IN_PROGRESS)
        self._remove_sync_expiration(group)
        initial = group.is_(GroupState.EMPTY)
        group.transition_to(GroupState.PREPARING_REBALANCE, self.now())
        log.info(
            "group %s: preparing to rebalance from generation %d (%s-%d); reason: %s",
            group.group_id,
            group.generation_id,
            CONSUMER_OFFSETS,
            self.manager.partition_for(group.group_id),
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
            self.try_complete_join(group)
            if group.join_timer is not None:
                self._log_awaited(group, delay_ms)

    @staticmethod
    def _log_awaited(group: GroupMetadata, delay_ms: int) -> None:
        """Name the members a rebalance waits for: one that never comes back (a client that
        restarted under a new member id without leaving) holds the whole group until its
        session expires, and this line says which it is."""
        awaited = group.not_yet_rejoined_members()
        shown = ", ".join(
            f"{m.member_id} (client {m.client_id} at {m.client_host}, session timeout "
            f"{m.session_timeout_ms} ms)"
            for m in awaited[:5]
        )
        more = f" and {len(awaited) - 5} more" if len(awaited) > 5 else ""
        log.info(
            "group %s: waiting up to %d ms for %d member(s) to rejoin: %s%s",
            group.group_id,
            delay_ms,
            len(awaited),
            shown,
            more,
        )

    def try_complete_join(self, group: GroupMetadata) -> None:
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
                self.cancel_heartbeat(member)
        if group.is_(GroupState.DEAD):
            log.info("group %s is dead; skipping the rebalance", group.group_id)
            return
        if not group.maybe_elect_new_joined_leader() and group.members:
            log.error("group %s cannot complete its rebalance: no member rejoined", group.group_id)
            self._schedule_join(group, group.rebalance_timeout_ms, initial=False)
            return
        group.init_next_generation(self.now())
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
                member, self.join_result(group, member.member_id, with_members=True)
            )
            self.schedule_heartbeat(group, member, member.session_timeout_ms)
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
            self.cancel_heartbeat(member)
        self.prepare_rebalance(
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
                self.schedule_heartbeat(group, member, member.session_timeout_ms)

    def schedule_heartbeat(
        self, group: GroupMetadata, member: MemberMetadata, timeout_ms: int
    ) -> None:
        """The member showed it is alive: its session restarts for `timeout_ms`."""
        self.cancel_heartbeat(member)
        member.heartbeat_satisfied = False
        # A member parked in a rebalance is not timed: the rebalance is.
        if group.is_(GroupState.DEAD) or member.has_satisfied_heartbeat:
            return
        member.heartbeat_timer = self.timers.call_later(
            timeout_ms / 1000, self._on_expire_heartbeat, group, member
        )

    @staticmethod
    def cancel_heartbeat(member: MemberMetadata) -> None:
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
            self.remove_member_and_update_group(
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
        self.remove_pending_member_and_update_group(group, member_id)

    def remove_member_and_update_group(
        self, group: GroupMetadata, member: MemberMetadata, reason: str
    ) -> None:
        # A new member may be parked in the rebalance: it hears it is gone (and rejoins).
        group.maybe_invoke_join(
            member, JoinResult.failed(UNKNOWN_MEMBER_ID, ErrorCode.UNKNOWN_MEMBER_ID)
        )
        group.remove(member.member_id)
        self.cancel_heartbeat(member)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self.maybe_prepare_rebalance(group, reason)
        elif group.is_(GroupState.PREPARING_REBALANCE):
            self.try_complete_join(group)

    def remove_pending_member_and_update_group(self, group: GroupMetadata, member_id: str) -> None:
        group.remove(member_id)
        if group.is_(GroupState.PREPARING_REBALANCE):
            self.try_complete_join(group)

    def complete_sync(
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
                self.maybe_prepare_rebalance(
                    group,
                    f"error {ErrorCode(error).name} when storing the group assignment "
                    f"during SyncGroup (member {leader_id})",
                )
            else:
                self._set_and_propagate_assignment(group, assignment)
                group.transition_to(GroupState.STABLE, self.now())

        self.manager.store_group(group, assignment, stored)

    def remove_pending_sync_member(self, group: GroupMetadata, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        self._check_pending_sync(group)

    def on_group_loaded(self, group: GroupMetadata) -> None:
        if len(group) > self.config.max_size:
            self.prepare_rebalance(
                group,
                f"the loaded group is over capacity ({self.config.max_size}); rebalancing so "
                "its members can commit their offsets",
            )
        for member in list(group.members.values()):
            self.schedule_heartbeat(group, member, member.session_timeout_ms)

    def on_group_unloaded(self, group: GroupMetadata) -> None:
        log.info("group %s of generation %d unloaded", group.group_id, group.generation_id)
        previous = group.state
        group.transition_to(GroupState.DEAD, self.now())
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
            self.cancel_heartbeat(member)
        if group.join_timer is not None:
            group.join_timer.cancel()
            group.join_timer = None
