"""A KIP-848 consumer group as `__consumer_offsets` records (key versions 3 to 8), and back.

Writing: after each change of a group (a heartbeat, a member's timeout), the records of what
differs from what the log holds (`ConsumerGroup.logged`), in the order Kafka writes them, so
Kafka's replay (which checks that order) reads our log too:

1. tombstones of the members that left: current assignment, target assignment, subscription;
2. the members' subscriptions, the subscribed topics' metadata, the group epoch;
3. the members' target assignments, then the target assignment epoch;
4. the members' current assignments (epochs, state, owned and revoking partitions).

A group's deletion writes tombstones of all of it. Nothing is written per heartbeat that
changes nothing, which is most of them.

Reading: the last value of each key wins and a tombstone removes it (what compaction leaves
too), and a group is rebuilt from what is left, members with their epochs and partitions.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping

import attrs

from gregor.broker.coordinator.group.consumer_group import (
    Assignment,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
    as_assignment,
)
from gregor.protocol import group_records as wire

log = logging.getLogger(__name__)

Change = tuple[wire.ConsumerGroupKey, wire.ConsumerGroupValue | None]

_STATES = {
    MemberState.STABLE: wire.MEMBER_STABLE,
    MemberState.UNREVOKED_PARTITIONS: wire.MEMBER_UNREVOKED_PARTITIONS,
    MemberState.UNRELEASED_PARTITIONS: wire.MEMBER_UNRELEASED_PARTITIONS,
}
_STATE_OF = {code: state for state, code in _STATES.items()}


def _subscription(m: ConsumerMember) -> tuple[object, ...]:
    return (
        m.instance_id,
        m.rack_id,
        m.client_id,
        m.client_host,
        m.subscribed_topic_names,
        m.subscribed_topic_regex,
        m.rebalance_timeout_ms,
        m.server_assignor,
    )


def _current(m: ConsumerMember) -> tuple[object, ...]:
    return (m.member_epoch, m.previous_member_epoch, m.state, m.assigned, m.pending_revocation)


def _partitions(assignment: Assignment) -> list[wire.TopicPartitions]:
    return [wire.TopicPartitions(t, sorted(ps)) for t, ps in sorted(assignment.items())]


def _member_tombstones(group_id: str, member_id: str) -> Iterator[Change]:
    yield wire.ConsumerGroupCurrentMemberAssignmentKey(group_id, member_id), None
    yield wire.ConsumerGroupTargetAssignmentMemberKey(group_id, member_id), None
    yield wire.ConsumerGroupMemberMetadataKey(group_id, member_id), None


def _subscription_record(group_id: str, m: ConsumerMember) -> Change:
    return (
        wire.ConsumerGroupMemberMetadataKey(group_id, m.member_id),
        wire.ConsumerGroupMemberMetadataValue(
            instance_id=m.instance_id,
            rack_id=m.rack_id,
            client_id=m.client_id,
            client_host=m.client_host,
            subscribed_topic_names=list(m.subscribed_topic_names),
            subscribed_topic_regex=m.subscribed_topic_regex,
            rebalance_timeout_ms=m.rebalance_timeout_ms,
            server_assignor=m.server_assignor,
        ),
    )


def _current_record(group_id: str, m: ConsumerMember) -> Change:
    return (
        wire.ConsumerGroupCurrentMemberAssignmentKey(group_id, m.member_id),
        wire.ConsumerGroupCurrentMemberAssignmentValue(
            member_epoch=m.member_epoch,
            previous_member_epoch=m.previous_member_epoch,
            state=_STATES[m.state],
            assigned_partitions=_partitions(m.assigned),
            partitions_pending_revocation=_partitions(m.pending_revocation),
        ),
    )


def changes(group_id: str, cg: ConsumerGroup) -> list[Change]:
    """The records that bring the log from `cg.logged` to `cg` (none if nothing changed)."""
    old = cg.logged
    out: list[Change] = []
    for member_id in old.members.keys() - cg.members.keys():
        out.extend(_member_tombstones(group_id, member_id))
    # Members are replaced, never changed in place: an unchanged one is the same object.
    subscriptions: list[Change] = []
    currents: list[Change] = []
    for m in cg.members.values():
        was = old.members.get(m.member_id)
        if was is m:
            continue
        if was is None or _subscription(was) != _subscription(m):
            subscriptions.append(_subscription_record(group_id, m))
        if was is None or _current(was) != _current(m):
            currents.append(_current_record(group_id, m))
    out.extend(subscriptions)
    if cg.subscribed_metadata != old.subscribed_metadata:
        out.append(
            (
                wire.ConsumerGroupPartitionMetadataKey(group_id),
                wire.ConsumerGroupPartitionMetadataValue(
                    [
                        wire.TopicMetadata(topic_id, name, partitions)
                        for name, (topic_id, partitions) in sorted(cg.subscribed_metadata.items())
                    ]
                ),
            )
        )
    if cg.group_epoch != old.group_epoch:
        out.append(
            (
                wire.ConsumerGroupMetadataKey(group_id),
                wire.ConsumerGroupMetadataValue(cg.group_epoch),
            )
        )
    # (The targets of those that left have their tombstones already.)
    out.extend(
        (wire.ConsumerGroupTargetAssignmentMemberKey(group_id, member_id), None)
        for member_id in old.target.keys() - cg.target.keys()
        if member_id in cg.members
    )
    for member_id, target in cg.target.items():
        was_target = old.target.get(member_id)
        if was_target is not target and was_target != target:
            out.append(
                (
                    wire.ConsumerGroupTargetAssignmentMemberKey(group_id, member_id),
                    wire.ConsumerGroupTargetAssignmentMemberValue(_partitions(target)),
                )
            )
    if cg.target_epoch != old.target_epoch:
        out.append(
            (
                wire.ConsumerGroupTargetAssignmentMetadataKey(group_id),
                wire.ConsumerGroupTargetAssignmentMetadataValue(cg.target_epoch),
            )
        )
    out.extend(currents)
    return out


def deletion(group_id: str, cg: ConsumerGroup) -> list[Change]:
    """Tombstones for everything the log holds of the group."""
    out: list[Change] = []
    for member_id in cg.logged.members.keys() | cg.members.keys():
        out.extend(_member_tombstones(group_id, member_id))
    out.append((wire.ConsumerGroupTargetAssignmentMetadataKey(group_id), None))
    out.append((wire.ConsumerGroupPartitionMetadataKey(group_id), None))
    out.append((wire.ConsumerGroupMetadataKey(group_id), None))
    return out


def encoded(found: Iterable[Change]) -> Iterator[tuple[bytes, bytes | None]]:
    """Each change as (key, value) bytes, a None value being a tombstone."""
    for key, value in found:
        yield (
            wire.encode_consumer_group_key(key),
            None if value is None else wire.encode_consumer_group_value(value),
        )


# -- reading ---------------------------------------------------------------------------------


@attrs.define
class LoadedConsumerGroups:
    """The consumer group records of a partition being loaded: the last value of each key."""

    # group -> (key version, member id or "") -> value
    values: dict[str, dict[tuple[int, str], wire.ConsumerGroupValue]] = attrs.field(factory=dict)

    def replay(self, key: wire.ConsumerGroupKey, value: bytes | None) -> None:
        version = key.valid_versions.lo
        where = (version, getattr(key, "member_id", ""))
        if value is None:
            found = self.values.get(key.group)
            if found is not None:
                found.pop(where, None)
                if not found:
                    del self.values[key.group]
        else:
            decoded = wire.decode_consumer_group_value(version, value)
            self.values.setdefault(key.group, {})[where] = decoded

    def build(self) -> dict[str, ConsumerGroup]:
        out = {}
        for group_id, records in self.values.items():
            if (3, "") not in records:
                log.warning(
                    "group %s: consumer group records without its epoch record; skipped", group_id
                )
                continue
            out[group_id] = consumer_group_from(records)
        return out


def _assignment(partitions: Iterable[wire.TopicPartitions]) -> Assignment:
    return as_assignment((t.topic_id, t.partitions) for t in partitions)


def consumer_group_from(
    records: Mapping[tuple[int, str], wire.ConsumerGroupValue],
) -> ConsumerGroup:
    """The group as its records describe it, with `logged` saying they are all written."""
    cg = ConsumerGroup()
    subscriptions: dict[str, wire.ConsumerGroupMemberMetadataValue] = {}
    current: dict[str, wire.ConsumerGroupCurrentMemberAssignmentValue] = {}
    for (_, member_id), value in records.items():
        if isinstance(value, wire.ConsumerGroupMetadataValue):
            cg.group_epoch = value.epoch
        elif isinstance(value, wire.ConsumerGroupPartitionMetadataValue):
            cg.subscribed_metadata = {
                t.topic_name: (t.topic_id, t.num_partitions) for t in value.topics
            }
        elif isinstance(value, wire.ConsumerGroupTargetAssignmentMetadataValue):
            cg.target_epoch = value.assignment_epoch
        elif isinstance(value, wire.ConsumerGroupTargetAssignmentMemberValue):
            cg.target[member_id] = _assignment(value.topic_partitions)
        elif isinstance(value, wire.ConsumerGroupMemberMetadataValue):
            subscriptions[member_id] = value
        else:
            current[member_id] = value
    for member_id, sub in subscriptions.items():
        now = current.get(member_id, wire.ConsumerGroupCurrentMemberAssignmentValue())
        cg.put(
            ConsumerMember(
                member_id=member_id,
                client_id=sub.client_id,
                client_host=sub.client_host,
                rebalance_timeout_ms=sub.rebalance_timeout_ms,
                instance_id=sub.instance_id,
                rack_id=sub.rack_id,
                subscribed_topic_names=tuple(sub.subscribed_topic_names),
                subscribed_topic_regex=sub.subscribed_topic_regex,
                server_assignor=sub.server_assignor,
                member_epoch=now.member_epoch,
                previous_member_epoch=now.previous_member_epoch,
                state=_STATE_OF.get(now.state, MemberState.STABLE),
                assigned=_assignment(now.assigned_partitions),
                pending_revocation=_assignment(now.partitions_pending_revocation),
            )
        )
    cg.target = {m: t for m, t in cg.target.items() if m in cg.members}
    cg.mark_logged()
    return cg
