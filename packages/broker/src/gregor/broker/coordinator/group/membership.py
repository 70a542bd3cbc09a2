"""GroupCoordinator: the classic group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup)
as Kafka's coordinator runs it; offsets (`commits`) and the admin APIs (`admin`) hang off it.

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
a `Reply` being set. Timeouts are timers on trio's clock (see `rebalance`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence

import attrs
import trio

from gregor.broker.coordinator.group.admin import GroupAdmin
from gregor.broker.coordinator.group.checks import member_error
from gregor.broker.coordinator.group.commits import OffsetCommits
from gregor.broker.coordinator.group.config import GroupConfig
from gregor.broker.coordinator.group.consumer_heartbeats import ConsumerHeartbeats
from gregor.broker.coordinator.group.group import GroupMetadata
from gregor.broker.coordinator.group.manager import GroupMetadataManager
from gregor.broker.coordinator.group.member import JoinRequest
from gregor.broker.coordinator.group.rebalance import Rebalancer
from gregor.broker.coordinator.group.results import (
    UNKNOWN_MEMBER_ID,
    JoinResult,
    LeaveResult,
    LeftMember,
    Reply,
    SyncResult,
)
from gregor.broker.coordinator.group.state import GroupState
from gregor.broker.coordinator.topic_log import PartitionRole, TopicLog
from gregor.broker.topic_names import CONSUMER_OFFSETS
from gregor.client.timeouts import TimerQueue
from gregor.protocol.apis import ApiKey
from gregor.protocol.errors import ErrorCode

log = logging.getLogger(__name__)


class GroupCoordinator:
    def __init__(
        self,
        broker_id: int,
        config: GroupConfig,
        topic: TopicLog,
        wall_clock: Callable[[], int] | None = None,
        existing_partitions: Callable[[], Awaitable[int | None]] | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.config = config
        self.manager = (
            GroupMetadataManager(config, topic)
            if wall_clock is None
            else GroupMetadataManager(config, topic, wall_clock)
        )
        # Asked at start how many partitions an existing `__consumer_offsets` has.
        self._existing_partitions = existing_partitions
        self.timers = TimerQueue(f"group-coordinator-{broker_id}")
        # The manager owns the state; the others are the rules applied to it.
        self.rebalancer = Rebalancer(config, self.manager, self.timers)
        self.offsets = OffsetCommits(self.manager, self.rebalancer.schedule_heartbeat)
        self.admin = GroupAdmin(self.manager)
        self.consumer = ConsumerHeartbeats(config, self.manager, self.timers)

    def __repr__(self) -> str:
        return f"<GroupCoordinator {self.broker_id}>"

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        if self._existing_partitions is not None:
            found = await self._existing_partitions()
            if found:
                self.manager.partitions = found
        async with trio.open_nursery() as nursery:
            await nursery.start(self.timers.run)
            await nursery.start(self.manager.run)
            self.manager.active = True
            log.info(
                "group coordinator %d started (%s has %d partitions)",
                self.broker_id,
                CONSUMER_OFFSETS,
                self.manager.partitions,
            )
            task_status.started()
            try:
                await trio.sleep_forever()
            finally:
                self.manager.active = False
                self.manager.shutting_down = True

    def partition_for(self, group_id: str) -> int:
        return self.manager.partition_for(group_id)

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

    def handle_join_group(self, join: JoinRequest, reply: Reply[JoinResult]) -> None:
        error = self.manager.group_status(join.group_id, ApiKey.JOIN_GROUP)
        if error is not None:
            reply.set(JoinResult.failed(join.member_id, error))
            return
        if not (
            self.config.min_session_timeout_ms
            <= join.session_timeout_ms
            <= self.config.max_session_timeout_ms
        ):
            reply.set(JoinResult.failed(join.member_id, ErrorCode.INVALID_SESSION_TIMEOUT))
            return
        is_unknown_member = join.member_id == UNKNOWN_MEMBER_ID
        group = self.manager.get_or_maybe_create_group(join.group_id, is_unknown_member)
        if group is None:
            reply.set(JoinResult.failed(join.member_id, ErrorCode.UNKNOWN_MEMBER_ID))
            return
        if group.has_consumer_members:
            # A consumer-protocol group: classic members may not join it.
            reply.set(JoinResult.failed(join.member_id, ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
            return
        self.manager.drop_consumer_group(group)  # an empty consumer-protocol group converts
        if not self._accept_joining_member(group, join.member_id):
            group.remove(join.member_id)
            reply.set(JoinResult.failed(UNKNOWN_MEMBER_ID, ErrorCode.GROUP_MAX_SIZE_REACHED))
        elif group.is_(GroupState.DEAD):
            # Just removed (moved to another coordinator, or deleted): find it again.
            reply.set(JoinResult.failed(join.member_id, ErrorCode.COORDINATOR_NOT_AVAILABLE))
        elif not group.supports_protocols(join.protocol_type, join.protocol_names):
            reply.set(JoinResult.failed(join.member_id, ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
        elif is_unknown_member:
            self._new_member_join(group, join, reply)
        else:
            self._current_member_join(group, join, reply)
        if group.is_(GroupState.PREPARING_REBALANCE):
            self.rebalancer.try_complete_join(group)

    def _new_member_join(
        self, group: GroupMetadata, join: JoinRequest, reply: Reply[JoinResult]
    ) -> None:
        new_member_id = group.generate_member_id(join.client_id, join.group_instance_id)
        instance = join.group_instance_id
        if instance is not None:
            old_member_id = group.current_static_member_id(instance)
            if old_member_id is not None:
                log.info(
                    "group %s: static member %s rejoins as %s (was %s) in state %s",
                    group.group_id,
                    instance,
                    new_member_id,
                    old_member_id,
                    group.state,
                )
                self._rejoin_static_member(group, old_member_id, new_member_id, join, reply)
                return
        elif join.require_known_member_id:
            log.info(
                "group %s: a new member gets id %s and must join again with it",
                group.group_id,
                new_member_id,
            )
            group.add_pending_member(new_member_id)
            self.rebalancer.expire_pending_member_later(
                group, new_member_id, join.session_timeout_ms
            )
            reply.set(JoinResult.failed(new_member_id, ErrorCode.MEMBER_ID_REQUIRED))
            return
        self.rebalancer.add_member_and_rebalance(group, new_member_id, join, reply)

    def _current_member_join(
        self, group: GroupMetadata, join: JoinRequest, reply: Reply[JoinResult]
    ) -> None:
        member_id = join.member_id
        if member_id in group.pending_members:
            # The second join of a member that was given its id: now it is added.
            if join.group_instance_id is not None:
                raise RuntimeError(
                    f"a pending member {member_id} of group {group.group_id} cannot be static"
                )
            self.rebalancer.add_member_and_rebalance(group, member_id, join, reply)
            return
        error = member_error(group, member_id, join.group_instance_id, "join-group")
        if error is not None:
            reply.set(JoinResult.failed(member_id, error))
            return
        member = group.get(member_id)
        state = group.state
        if state is GroupState.PREPARING_REBALANCE:
            self.rebalancer.update_member_and_rebalance(
                group, member, join, f"member {member_id} joining during {state}", reply
            )
        elif state is GroupState.COMPLETING_REBALANCE:
            if member.matches(join.protocols):
                # The same join again (its response was lost): the current generation.
                reply.set(self.rebalancer.join_result(group, member_id, with_members=True))
            else:
                self.rebalancer.update_member_and_rebalance(
                    group,
                    member,
                    join,
                    f"member {member_id} updating its metadata during {state}",
                    reply,
                )
        elif state is GroupState.STABLE:
            if group.is_leader(member_id) or not member.matches(join.protocols):
                # A leader's join asks for a rebalance (its view of the topics changed).
                self.rebalancer.update_member_and_rebalance(
                    group, member, join, f"member {member_id} rejoining during {state}", reply
                )
            else:
                reply.set(self.rebalancer.join_result(group, member_id, with_members=False))
        else:
            log.warning(
                "group %s: member %s rejoins in unexpected state %s",
                group.group_id,
                member_id,
                state,
            )
            reply.set(JoinResult.failed(member_id, ErrorCode.UNKNOWN_MEMBER_ID))

    def _rejoin_static_member(
        self,
        group: GroupMetadata,
        old_member_id: str,
        new_member_id: str,
        join: JoinRequest,
        reply: Reply[JoinResult],
    ) -> None:
        """A static member is back under a new member id: if the group is stable and keeps
        its protocol, it takes its old place without a rebalance."""
        instance = join.group_instance_id
        assert instance is not None
        current_leader = group.leader_id
        member = group.replace_static_member(instance, old_member_id, new_member_id)
        self.rebalancer.schedule_heartbeat(group, member, member.session_timeout_ms)
        old_rebalance_timeout = member.rebalance_timeout_ms
        old_session_timeout = member.session_timeout_ms
        old_protocols = list(member.supported_protocols)
        group.update_member(
            member, join.protocols, join.rebalance_timeout_ms, join.session_timeout_ms, reply
        )
        state = group.state
        if state is GroupState.STABLE:
            if group.protocol_name != group.select_protocol():
                self.rebalancer.maybe_prepare_rebalance(
                    group,
                    f"static member {new_member_id} with instance id {instance} rejoined with "
                    f"other protocols; client reason: {join.why}",
                )
                return
            # Same protocol: no rebalance; persist the new member id and answer with the
            # current generation.
            assignment = {m.member_id: m.assignment for m in group.members.values()}

            def stored(error: int) -> None:
                current = self.rebalancer.join_result
                if error != ErrorCode.NONE:
                    log.warning(
                        "group %s: persisting static member %s failed: %s",
                        group.group_id,
                        instance,
                        ErrorCode(error).name,
                    )
                    group.update_member(
                        member, old_protocols, old_rebalance_timeout, old_session_timeout, None
                    )
                    old = group.replace_static_member(instance, new_member_id, old_member_id)
                    self.rebalancer.schedule_heartbeat(group, old, old.session_timeout_ms)
                    reply.set(
                        attrs.evolve(
                            current(group, UNKNOWN_MEMBER_ID, with_members=False),
                            error=error,
                            leader_id=current_leader or "",
                        )
                    )
                elif join.support_skipping_assignment:
                    # JoinGroup v9+: the leader learns it leads but must not reassign.
                    result = current(group, new_member_id, with_members=True)
                    group.maybe_invoke_join(
                        member,
                        attrs.evolve(result, skip_assignment=group.is_leader(new_member_id)),
                    )
                else:
                    # Older versions get the old leader id, so a rejoining leader does not
                    # compute an assignment that a stable group would not hand out.
                    result = current(group, new_member_id, with_members=False)
                    group.maybe_invoke_join(
                        member, attrs.evolve(result, leader_id=current_leader or "")
                    )

            self.manager.store_group(group, assignment, stored)
        elif state is GroupState.COMPLETING_REBALANCE:
            # The leader may be assigning to the old member id: start over.
            self.rebalancer.prepare_rebalance(
                group,
                f"updating metadata of static member {new_member_id} with instance id "
                f"{instance}; client reason: {join.why}",
            )
        elif state in (GroupState.EMPTY, GroupState.DEAD):
            raise RuntimeError(
                f"group {group.group_id} in {state} cannot have static member {instance}"
            )

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
        error = self.manager.group_status(group_id, ApiKey.SYNC_GROUP)
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
            self.rebalancer.remove_pending_sync_member(group, member_id)
            if group.is_leader(member_id):
                self.rebalancer.complete_sync(group, member_id, generation_id, assignment)
        elif state is GroupState.STABLE:
            self.rebalancer.remove_pending_sync_member(group, member_id)
            member = group.get(member_id)
            reply.set(
                SyncResult(
                    ErrorCode.NONE, group.protocol_type, group.protocol_name, member.assignment
                )
            )
            self.rebalancer.schedule_heartbeat(group, member, member.session_timeout_ms)
        else:
            raise RuntimeError(f"SyncGroup reached dead group {group.group_id}")

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
        error = member_error(group, member_id, group_instance_id, "sync-group")
        if error is not None:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if protocol_type is not None and protocol_type != group.protocol_type:
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        if protocol_name is not None and protocol_name != group.protocol_name:
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        return None

    def handle_heartbeat(
        self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int
    ) -> int:
        error = self.manager.group_status(group_id, ApiKey.HEARTBEAT)
        if error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            return ErrorCode.NONE  # loading: the member is not known yet either way
        if error is not None:
            return error
        group = self.manager.get_group(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.is_(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = member_error(group, member_id, group_instance_id, "heartbeat")
        if error is not None:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        state = group.state
        if state is GroupState.EMPTY:
            return ErrorCode.UNKNOWN_MEMBER_ID
        member = group.get(member_id)
        self.rebalancer.schedule_heartbeat(group, member, member.session_timeout_ms)
        if state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def handle_leave_group(
        self, group_id: str, leaving: Sequence[tuple[str, str | None, str | None]]
    ) -> LeaveResult:
        """`leaving`: (member id, group instance id, reason) of each member."""
        error = self.manager.group_status(group_id, ApiKey.LEAVE_GROUP)
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
            self.rebalancer.remove_pending_member_and_update_group(group, member_id)
            log.info("group %s: pending member %s left", group.group_id, member_id)
            return ErrorCode.NONE
        error = member_error(group, member_id, group_instance_id, "leave-group")
        if error is not None:
            return error
        self._remove_leaving_member(group, member_id, reason)
        return ErrorCode.NONE

    def _remove_leaving_member(
        self, group: GroupMetadata, member_id: str, reason: str | None
    ) -> None:
        member = group.get(member_id)
        why = reason or "not provided"
        self.rebalancer.remove_member_and_update_group(
            group, member, f"removing member {member_id} on LeaveGroup; client reason: {why}"
        )
        log.info("group %s: member %s left; client reason: %s", group.group_id, member_id, why)

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
        self.rebalancer.on_group_loaded(group)
        self.consumer.on_group_loaded(group)

    def _on_group_unloaded(self, group: GroupMetadata) -> None:
        self.consumer.on_group_unloaded(group)
        self.rebalancer.on_group_unloaded(group)
