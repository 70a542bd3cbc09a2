"""ConsumerGroupHeartbeat and ConsumerGroupDescribe: the rules of KIP-848 consumer groups.

One request does everything: a member joins with epoch 0, heartbeats with its epoch, acks
what it was told to revoke by no longer listing it, and leaves with epoch -1 (-2: a static
member that will be back). Each heartbeat may move the group epoch (membership, subscription,
or the subscribed topics changed), recompute the target assignment, and move the member one
step towards its target (`consumer_group.next_member_state`). Kafka's errors:

- UNKNOWN_MEMBER_ID for a member (or group) the coordinator does not know: the client joins
  again with epoch 0, keeping its committed offsets;
- FENCED_MEMBER_EPOCH for an epoch the member is not at (a newer one, or an older one that is
  not the retry of a lost response);
- GROUP_ID_NOT_FOUND for a group that is a classic group with members;
- INVALID_REQUEST, UNSUPPORTED_ASSIGNOR, INVALID_REGULAR_EXPRESSION,
  UNRELEASED_INSTANCE_ID, GROUP_MAX_SIZE_REACHED for what the request itself gets wrong.

A member that sends no heartbeat for `group.consumer.session.timeout.ms` is removed; one that
does not revoke within its rebalance timeout too.

What a heartbeat changed is written to `__consumer_offsets` (`consumer_records`) before it is
answered, and answered once replicated, so a new coordinator loads the group as its members
know it: they carry on at their epochs with their partitions. A write that fails answers
Kafka's error for it (COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR).
"""

from __future__ import annotations

import logging
import re
import uuid
from collections import Counter
from collections.abc import Mapping
from typing import Any

import attrs

from gregor.broker.coordinator.group.config import GroupConfig
from gregor.broker.coordinator.group.consumer_group import (
    Assignment,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
    next_member_state,
)
from gregor.broker.coordinator.group.group import GroupMetadata
from gregor.broker.coordinator.group.manager import GroupMetadataManager
from gregor.broker.coordinator.group.server_assignors import ASSIGNORS, Topics
from gregor.broker.coordinator.group.state import GroupState
from gregor.broker.coordinator.topic_log import APPEND_ERRORS
from gregor.client.timeouts import Timeout, TimerQueue
from gregor.protocol.apis import ApiKey
from gregor.protocol.apis.consumer_group_heartbeat import new_member_id
from gregor.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2


@attrs.frozen(slots=True)
class Heartbeat:
    """A ConsumerGroupHeartbeat, in the coordinator's terms (None: unchanged)."""

    group_id: str
    member_id: str
    member_epoch: int
    client_id: str
    client_host: str
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Assignment | None = None


@attrs.frozen(slots=True)
class HeartbeatResult:
    error: int = ErrorCode.NONE
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None


def _fail(error: int, message: str | None = None) -> HeartbeatResult:
    return HeartbeatResult(error, message)


class ConsumerHeartbeats:
    def __init__(
        self, config: GroupConfig, manager: GroupMetadataManager, timers: TimerQueue
    ) -> None:
        self.config = config
        self.manager = manager
        self.timers = timers
        self._sessions: dict[tuple[str, str], Timeout] = {}
        self._revocations: dict[tuple[str, str], Timeout] = {}

    # -- the request ---------------------------------------------------------------------

    async def heartbeat(self, hb: Heartbeat, topics: Topics) -> HeartbeatResult:
        """`topics`: every topic of the cluster, name -> (id, partitions). The state changes
        at once; the answer waits for what changed to be replicated."""
        result = self._heartbeat(hb, topics)
        group = self.manager.get_group(hb.group_id)
        # Some refusals change the group too (a rejoin that finds the group full).
        write = None if group is None else self.manager.store_consumer_group(group)
        if write is None or result.error != ErrorCode.NONE:
            return result
        error = await write.replicated(self.config.offset_commit_timeout_ms / 1000)
        if error != ErrorCode.NONE:
            return _fail(APPEND_ERRORS.get(error, error))
        return result

    def _heartbeat(self, hb: Heartbeat, topics: Topics) -> HeartbeatResult:
        error = self.manager.group_status(hb.group_id, ApiKey.CONSUMER_GROUP_HEARTBEAT)
        if error is not None:
            return _fail(error)
        invalid = self._invalid(hb)
        if invalid is not None:
            return invalid
        group = self.manager.get_group(hb.group_id)
        if group is None or group.is_(GroupState.DEAD):
            if hb.member_epoch != JOIN_EPOCH:
                return _fail(ErrorCode.UNKNOWN_MEMBER_ID, f"Group {hb.group_id} not found.")
            group = self.manager.add_group(
                GroupMetadata(hb.group_id, GroupState.EMPTY, self.manager.now_ms())
            )
        if group.consumer is None:
            if not group.is_(GroupState.EMPTY):
                return _fail(
                    ErrorCode.GROUP_ID_NOT_FOUND, f"Group {hb.group_id} is not a consumer group."
                )
            if hb.member_epoch != JOIN_EPOCH:
                return _fail(ErrorCode.UNKNOWN_MEMBER_ID, f"Group {hb.group_id} has no members.")
            self.manager.drop_classic_group(group)  # an empty classic group converts
            group.consumer = ConsumerGroup()
        cg = group.consumer
        if hb.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._leave(hb, cg)
        if hb.member_epoch == JOIN_EPOCH:
            joined = self._join(hb, cg)
            if isinstance(joined, HeartbeatResult):
                return joined
            member, changed = joined, True
        else:
            found = cg.members.get(hb.member_id)
            if found is None:
                return _fail(
                    ErrorCode.UNKNOWN_MEMBER_ID,
                    f"Member {hb.member_id} is not a member of group {hb.group_id}.",
                )
            fenced = self._fenced(hb, found)
            if fenced is not None:
                return fenced
            member, changed = found, False
        member, updated = _with_subscription(member, hb)
        cg.put(member)
        if changed or updated:
            cg.group_epoch += 1
        metadata = _subscribed(cg, topics)
        if metadata != cg.subscribed_metadata:
            cg.subscribed_metadata = metadata
            if not (changed or updated):
                cg.group_epoch += 1
        if cg.group_epoch > cg.target_epoch:
            self._assign(hb.group_id, cg)
        before = member
        member = next_member_state(
            member, cg.target.get(member.member_id, {}), cg.target_epoch, cg.owner_of, hb.owned
        )
        cg.put(member)
        self._schedule(hb.group_id, member)
        # Kafka sends the assignment on a full request (a join, or all of rebalance timeout,
        # subscription and owned partitions, as a member sends after an error) or when it
        # changed; a new epoch alone comes without it.
        full = hb.member_epoch == JOIN_EPOCH or (
            hb.rebalance_timeout_ms != -1
            and (hb.subscribed_topic_names is not None or hb.subscribed_topic_regex is not None)
            and hb.owned is not None
        )
        send = full or member.assigned != before.assigned
        return HeartbeatResult(
            member_id=member.member_id,
            member_epoch=member.member_epoch,
            heartbeat_interval_ms=self.config.consumer_heartbeat_interval_ms,
            assignment=member.assigned if send else None,
        )

    def _invalid(self, hb: Heartbeat) -> HeartbeatResult | None:
        def bad(message: str) -> HeartbeatResult:
            return _fail(ErrorCode.INVALID_REQUEST, message)

        if hb.instance_id == "":
            return bad("InstanceId can't be empty.")
        if hb.rack_id == "":
            return bad("RackId can't be empty.")
        if hb.member_epoch == JOIN_EPOCH:
            if hb.rebalance_timeout_ms == -1:
                return bad("RebalanceTimeoutMs must be provided in first request.")
            if hb.owned is None or hb.owned:
                return bad("TopicPartitions must be empty when (re-)joining.")
            if not hb.subscribed_topic_names and not hb.subscribed_topic_regex:
                return bad(
                    "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
                )
        elif hb.member_epoch == STATIC_LEAVE_EPOCH:
            if hb.instance_id is None:
                return bad("InstanceId can't be null.")
        elif hb.member_epoch < STATIC_LEAVE_EPOCH:
            return bad(f"MemberEpoch is invalid: {hb.member_epoch}.")
        if hb.member_epoch != JOIN_EPOCH and not hb.member_id:
            return bad("MemberId can't be empty.")
        if (
            hb.server_assignor is not None
            and hb.server_assignor not in self.config.consumer_assignors
        ):
            return _fail(
                ErrorCode.UNSUPPORTED_ASSIGNOR,
                f"ServerAssignor {hb.server_assignor} is not supported. Supported assignors: "
                f"{', '.join(self.config.consumer_assignors)}.",
            )
        if hb.subscribed_topic_regex:
            try:
                re.compile(hb.subscribed_topic_regex)
            except re.error as exc:
                return _fail(
                    ErrorCode.INVALID_REGULAR_EXPRESSION,
                    f"SubscribedTopicRegex `{hb.subscribed_topic_regex}` is not a valid regular "
                    f"expression: {exc}.",
                )
        return None

    def _join(self, hb: Heartbeat, cg: ConsumerGroup) -> ConsumerMember | HeartbeatResult:
        member_id = hb.member_id or new_member_id()
        if member_id in cg.members:
            self._forget(hb.group_id, cg, member_id)  # a rejoin starts over
        if hb.instance_id is not None:
            holder = cg.member_with_instance(hb.instance_id)
            if holder is not None:
                if holder.member_epoch != STATIC_LEAVE_EPOCH:
                    return _fail(
                        ErrorCode.UNRELEASED_INSTANCE_ID,
                        f"Static member {holder.member_id} with instance id "
                        f"{hb.instance_id} is still in the group.",
                    )
                self._forget(hb.group_id, cg, holder.member_id)
        if len(cg.members) >= self.config.consumer_max_size:
            return _fail(
                ErrorCode.GROUP_MAX_SIZE_REACHED,
                f"The consumer group has reached its maximum capacity of "
                f"{self.config.consumer_max_size} members.",
            )
        log.info("group %s: member %s joins (client %s)", hb.group_id, member_id, hb.client_id)
        return ConsumerMember(member_id, hb.client_id, hb.client_host, hb.rebalance_timeout_ms)

    def _fenced(self, hb: Heartbeat, member: ConsumerMember) -> HeartbeatResult | None:
        """An epoch ahead of the member's, or behind it and not a retry, is fenced."""
        if hb.member_epoch == member.member_epoch:
            return None
        retry = (
            hb.member_epoch < member.member_epoch
            and hb.member_epoch == member.previous_member_epoch
            and (hb.owned is None or _pairs(hb.owned) <= _pairs(member.assigned))
        )
        if retry:
            return None
        side = "greater" if hb.member_epoch > member.member_epoch else "smaller"
        return _fail(
            ErrorCode.FENCED_MEMBER_EPOCH,
            f"The consumer group member has a {side} "
            f"member epoch ({hb.member_epoch}) than the one known by the group coordinator "
            f"({member.member_epoch}). The member must abandon all its partitions and rejoin.",
        )

    def _leave(self, hb: Heartbeat, cg: ConsumerGroup) -> HeartbeatResult:
        member = cg.members.get(hb.member_id)
        if member is None:
            return _fail(
                ErrorCode.UNKNOWN_MEMBER_ID,
                f"Member {hb.member_id} is not a member of group {hb.group_id}.",
            )
        if hb.member_epoch == STATIC_LEAVE_EPOCH:
            # It keeps its partitions until its session ends or it comes back.
            cg.put(attrs.evolve(member, member_epoch=STATIC_LEAVE_EPOCH))
        else:
            log.info("group %s: member %s leaves", hb.group_id, hb.member_id)
            self._forget(hb.group_id, cg, hb.member_id)
        return HeartbeatResult(member_id=hb.member_id, member_epoch=hb.member_epoch)

    # -- assignment ----------------------------------------------------------------------

    def _assignor_for(self, cg: ConsumerGroup) -> str:
        """The assignor most members ask for; the first configured one if none asks. A
        group loaded after `group.consumer.assignors` changed may ask for one no longer
        configured: that request no longer counts."""
        configured = self.config.consumer_assignors
        preferred = Counter(
            m.server_assignor for m in cg.members.values() if m.server_assignor in configured
        )
        return (
            max(preferred, key=lambda n: (preferred[n], -configured.index(n)))
            if preferred
            else configured[0]
        )

    def _assign(self, group_id: str, cg: ConsumerGroup) -> None:
        name = self._assignor_for(cg)
        subscriptions = {
            m.member_id: frozenset(_topics_of(m, cg.subscribed_metadata))
            for m in cg.members.values()
        }
        target = ASSIGNORS[name].assign(subscriptions, cg.subscribed_metadata, cg.target)
        cg.set_target(cg.group_epoch, name, target)
        log.info(
            "group %s: target assignment of epoch %d by %s for %d members",
            group_id,
            cg.group_epoch,
            name,
            len(target),
        )

    # -- timers --------------------------------------------------------------------------

    def _schedule(self, group_id: str, member: ConsumerMember) -> None:
        key = (group_id, member.member_id)
        old = self._sessions.pop(key, None)
        if old is not None:
            old.cancel()
        self._sessions[key] = self.timers.call_later(
            self.config.consumer_session_timeout_ms / 1000,
            self._expire,
            group_id,
            member.member_id,
            "session timeout",
        )
        revoking = member.state is MemberState.UNREVOKED_PARTITIONS
        if revoking and key not in self._revocations:
            self._revocations[key] = self.timers.call_later(
                member.rebalance_timeout_ms / 1000,
                self._expire,
                group_id,
                member.member_id,
                "rebalance timeout (its partitions were not revoked in time)",
            )
        elif not revoking and key in self._revocations:
            self._revocations.pop(key).cancel()

    def _expire(self, group_id: str, member_id: str, why: str) -> None:
        group = self.manager.get_group(group_id)
        if group is None or group.consumer is None or member_id not in group.consumer.members:
            return
        log.info("group %s: member %s removed: %s", group_id, member_id, why)
        self._forget(group_id, group.consumer, member_id)
        self.manager.store_consumer_group(group, wait=False)

    def _forget(self, group_id: str, cg: ConsumerGroup, member_id: str) -> None:
        cg.remove(member_id)
        for timers in (self._sessions, self._revocations):
            timer = timers.pop((group_id, member_id), None)
            if timer is not None:
                timer.cancel()

    # -- loading -------------------------------------------------------------------------

    def on_group_loaded(self, group: GroupMetadata) -> None:
        """A loaded group's members get their session (and revocation) timers afresh."""
        cg = group.consumer
        if cg is None:
            return
        cg.assignor_name = self._assignor_for(cg)
        for member in cg.members.values():
            self._schedule(group.group_id, member)

    def on_group_unloaded(self, group: GroupMetadata) -> None:
        for member_id in list(group.consumer.members) if group.consumer is not None else ():
            for timers in (self._sessions, self._revocations):
                timer = timers.pop((group.group_id, member_id), None)
                if timer is not None:
                    timer.cancel()

    # -- describe ------------------------------------------------------------------------

    def describe(self, group_id: str) -> tuple[int, str | None, ConsumerGroup | None]:
        error = self.manager.group_status(group_id, ApiKey.CONSUMER_GROUP_DESCRIBE)
        if error is not None:
            return error, None, None
        group = self.manager.get_group(group_id)
        if group is None or group.is_(GroupState.DEAD):
            return ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.", None
        if group.consumer is None:
            return ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.", None
        return ErrorCode.NONE, None, group.consumer


def _pairs(assignment: Assignment) -> set[tuple[uuid.UUID, int]]:
    return {(t, p) for t, ps in assignment.items() for p in ps}


def _with_subscription(member: ConsumerMember, hb: Heartbeat) -> tuple[ConsumerMember, bool]:
    """The member with what the heartbeat changed; and whether the assignment depends on it."""
    changes: dict[str, Any] = {}
    if hb.rack_id is not None and hb.rack_id != member.rack_id:
        changes["rack_id"] = hb.rack_id
    if hb.instance_id is not None and hb.instance_id != member.instance_id:
        changes["instance_id"] = hb.instance_id
    if hb.subscribed_topic_names is not None:
        names = tuple(sorted(set(hb.subscribed_topic_names)))
        if names != member.subscribed_topic_names:
            changes["subscribed_topic_names"] = names
    if hb.subscribed_topic_regex is not None:
        regex = hb.subscribed_topic_regex or None
        if regex != member.subscribed_topic_regex:
            changes["subscribed_topic_regex"] = regex
    if hb.server_assignor is not None and hb.server_assignor != member.server_assignor:
        changes["server_assignor"] = hb.server_assignor
    updated = bool(changes)
    if hb.rebalance_timeout_ms != -1:
        changes["rebalance_timeout_ms"] = hb.rebalance_timeout_ms
    return (attrs.evolve(member, **changes) if changes else member), updated


def _topics_of(member: ConsumerMember, topics: Mapping[str, object]) -> set[str]:
    chosen = {name for name in member.subscribed_topic_names if name in topics}
    if member.subscribed_topic_regex:
        pattern = re.compile(member.subscribed_topic_regex)
        chosen.update(name for name in topics if pattern.fullmatch(name))
    return chosen


def _subscribed(cg: ConsumerGroup, topics: Topics) -> dict[str, tuple[uuid.UUID, int]]:
    """The subscribed topics that exist (internal ones only by name), with ids and sizes."""
    visible = {name: meta for name, meta in topics.items() if not name.startswith("__")}
    out: dict[str, tuple[uuid.UUID, int]] = {}
    for member in cg.members.values():
        for name in _topics_of(member, visible):
            out[name] = topics[name]
        for name in member.subscribed_topic_names:
            if name in topics:
                out[name] = topics[name]
    return out
