"""The group coordinator's state as `__consumer_offsets` records, and back.

Writing: one batch per write (a group's metadata, a commit's offsets, tombstones), with
create-time timestamps, uncompressed, as Kafka's coordinator writes them.

KIP-848 consumer groups have records of their own (`consumer_records`), written beside these.

Reading (when this broker becomes the coordinator of a partition): the batches from the log
start to its end are replayed in order, the last record of a key winning and a tombstone
removing it, which is what compaction leaves too. Offsets of groups without a metadata
record are groups that only commit offsets (or whose members all left before anything was
written); they come back as Empty groups, as do consumer groups (their members in their
`consumer` part). Transactional offset commits count once their
transaction's commit marker follows; those of transactions still open stay pending.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

import attrs

from gregor.broker.coordinator.group import consumer_records
from gregor.broker.coordinator.group.consumer_group import ConsumerGroup
from gregor.broker.coordinator.group.group import GroupMetadata, TopicPartition
from gregor.broker.coordinator.group.member import MemberMetadata
from gregor.broker.coordinator.group.offsets import CommittedOffset, OffsetAndMetadata
from gregor.broker.coordinator.group.state import GroupState
from gregor.protocol import group_records as wire
from gregor.protocol.errors import DecodeError, ProtocolError
from gregor.protocol.records import BatchBuilder, ControlType, RecordBatch

log = logging.getLogger(__name__)

NO_LEADER_EPOCH = -1


# -- writing ---------------------------------------------------------------------------------


def offset_commit_value(offset: OffsetAndMetadata) -> bytes:
    return wire.encode_offset_commit_value(
        wire.OffsetCommitValue(
            offset=offset.offset,
            leader_epoch=NO_LEADER_EPOCH if offset.leader_epoch is None else offset.leader_epoch,
            metadata=offset.metadata,
            commit_timestamp=offset.commit_timestamp_ms,
            expire_timestamp=-1
            if offset.expire_timestamp_ms is None
            else offset.expire_timestamp_ms,
        )
    )


def offset_commit_batch(
    group_id: str,
    offsets: Mapping[TopicPartition, OffsetAndMetadata],
    now_ms: int,
    producer: tuple[int, int] | None = None,
) -> bytes:
    """The offsets' records; with `producer` (id, epoch), in its transaction."""
    if producer is None:
        builder = BatchBuilder()
    else:
        builder = BatchBuilder(
            producer_id=producer[0], producer_epoch=producer[1], is_transactional=True
        )
    for (topic, partition), offset in offsets.items():
        builder.append(
            offset_commit_value(offset),
            key=wire.offset_commit_key(group_id, topic, partition),
            timestamp=now_ms,
        )
    return builder.build()


def group_metadata_value(group: GroupMetadata, assignment: Mapping[str, bytes]) -> bytes:
    """The group as it is now, with `assignment` as each member's assignment."""
    members = []
    for member in group.members.values():
        if group.protocol_name is None:
            raise RuntimeError(f"group {group.group_id} has members but no protocol")
        members.append(
            wire.MemberMetadata(
                member_id=member.member_id,
                group_instance_id=member.group_instance_id,
                client_id=member.client_id,
                client_host=member.client_host,
                rebalance_timeout=member.rebalance_timeout_ms,
                session_timeout=member.session_timeout_ms,
                subscription=member.metadata(group.protocol_name),
                assignment=assignment[member.member_id],
            )
        )
    return wire.encode_group_metadata_value(
        wire.GroupMetadataValue(
            protocol_type=group.protocol_type or "",
            generation=group.generation_id,
            protocol=group.protocol_name,
            leader=group.leader_id,
            current_state_timestamp=-1
            if group.current_state_timestamp is None
            else group.current_state_timestamp,
            members=members,
        )
    )


def group_metadata_batch(
    group: GroupMetadata, assignment: Mapping[str, bytes], now_ms: int
) -> bytes:
    builder = BatchBuilder()
    builder.append(
        group_metadata_value(group, assignment),
        key=wire.group_metadata_key(group.group_id),
        timestamp=now_ms,
    )
    return builder.build()


def tombstone_batch(
    group_id: str,
    partitions: Iterable[TopicPartition],
    with_group: bool,
    now_ms: int,
    consumer: ConsumerGroup | None = None,
) -> bytes | None:
    """Tombstones for a group's offsets (and for the group itself, and its consumer-protocol
    records); None if there are none."""
    builder = BatchBuilder()
    for topic, partition in partitions:
        builder.append(
            None, key=wire.offset_commit_key(group_id, topic, partition), timestamp=now_ms
        )
    if with_group:
        builder.append(None, key=wire.group_metadata_key(group_id), timestamp=now_ms)
    if consumer is not None:
        for key, _ in consumer_records.encoded(consumer_records.deletion(group_id, consumer)):
            builder.append(None, key=key, timestamp=now_ms)
    return builder.build() if len(builder) else None


def consumer_group_batch(changes: Iterable[consumer_records.Change], now_ms: int) -> bytes | None:
    """A consumer group's changes as one batch; None if there are none."""
    builder = BatchBuilder()
    for key, value in consumer_records.encoded(changes):
        builder.append(value, key=key, timestamp=now_ms)
    return builder.build() if len(builder) else None


# -- reading ---------------------------------------------------------------------------------


def offset_from_value(data: bytes) -> OffsetAndMetadata:
    _, value = wire.decode_offset_commit_value(data)
    return OffsetAndMetadata(
        offset=value.offset,
        leader_epoch=None if value.leader_epoch == NO_LEADER_EPOCH else value.leader_epoch,
        metadata=value.metadata,
        commit_timestamp_ms=value.commit_timestamp,
        expire_timestamp_ms=None if value.expire_timestamp == -1 else value.expire_timestamp,
    )


def group_from_value(group_id: str, data: bytes, now_ms: int) -> GroupMetadata:
    """A group as its metadata record left it: Stable with its members, or Empty."""
    version, value = wire.decode_group_metadata_value(data)
    group = GroupMetadata(
        group_id, GroupState.STABLE if value.members else GroupState.EMPTY, now_ms
    )
    group.generation_id = value.generation
    group.protocol_type = value.protocol_type or None
    group.protocol_name = value.protocol
    group.leader_id = value.leader
    group.current_state_timestamp = (
        None if value.current_state_timestamp == -1 else value.current_state_timestamp
    )
    for record in value.members:
        member = MemberMetadata(
            member_id=record.member_id,
            group_instance_id=record.group_instance_id,
            client_id=record.client_id,
            client_host=record.client_host,
            rebalance_timeout_ms=record.session_timeout
            if version == 0
            else record.rebalance_timeout,
            session_timeout_ms=record.session_timeout,
            protocol_type=value.protocol_type,
            supported_protocols=[(value.protocol or "", record.subscription)],
            assignment=record.assignment,
        )
        group.add(member)
    # add() names the first member leader; the record says who is.
    group.leader_id = value.leader
    group.subscribed_topics = group.compute_subscribed_topics()
    return group


@attrs.define
class LoadedState:
    """What replaying a partition found, the later records having replaced the earlier."""

    offsets: dict[tuple[str, TopicPartition], CommittedOffset] = attrs.field(factory=dict)
    groups: dict[str, bytes] = attrs.field(factory=dict)  # group -> its last metadata value
    removed_groups: set[str] = attrs.field(factory=set)
    # Offsets of open transactions, by producer id, until their marker comes.
    pending_txn: dict[int, dict[tuple[str, TopicPartition], CommittedOffset]] = attrs.field(
        factory=dict
    )
    consumer: consumer_records.LoadedConsumerGroups = attrs.field(
        factory=consumer_records.LoadedConsumerGroups
    )
    skipped: int = 0

    def replay(self, batch: RecordBatch, partition_name: str) -> None:
        header = batch.header
        try:
            if header.is_control:
                self._end_transaction(header.producer_id, batch.control_record().type)
                return
            records = batch.records()
        except ProtocolError as exc:
            self.skipped += header.records_count
            log.warning(
                "%s: skipping the batch at offset %d: %s", partition_name, header.base_offset, exc
            )
            return
        for record in records:
            try:
                self._replay_record(
                    record.key,
                    record.value,
                    header.base_offset,
                    header.producer_id if header.is_transactional else None,
                )
            except ProtocolError as exc:
                self.skipped += 1
                log.warning(
                    "%s: skipping the record at offset %d: %s", partition_name, record.offset, exc
                )

    def _end_transaction(self, producer_id: int, marker: ControlType) -> None:
        pending = self.pending_txn.pop(producer_id, {})
        if marker is ControlType.COMMIT:
            for key, committed in pending.items():
                current = self.offsets.get(key)
                if current is None or current.older_than(committed):
                    self.offsets[key] = committed

    def _replay_record(
        self,
        key_data: bytes | None,
        value: bytes | None,
        batch_offset: int,
        producer_id: int | None,
    ) -> None:
        if key_data is None:
            raise DecodeError("a record without a key")
        key = wire.decode_key(key_data)
        if isinstance(key, wire.OffsetCommitKey):
            where = (key.group, (key.topic, key.partition))
            target = (
                self.offsets
                if producer_id is None
                else self.pending_txn.setdefault(producer_id, {})
            )
            if value is None:
                target.pop(where, None)
            else:
                target[where] = CommittedOffset(batch_offset, offset_from_value(value))
        elif isinstance(key, wire.GroupMetadataKey):
            if value is None:
                self.groups.pop(key.group, None)
                self.removed_groups.add(key.group)
            else:
                wire.decode_group_metadata_value(value)  # a bad value is skipped here, not later
                self.groups[key.group] = value
                self.removed_groups.discard(key.group)
        elif isinstance(key, wire.UnknownKey):
            raise DecodeError(f"a key of unknown version {key.version}")
        else:
            self.consumer.replay(key, value)

    def build_groups(self, now_ms: int) -> list[GroupMetadata]:
        """The groups found, with their offsets: those with metadata as it says, the others
        (offsets only) Empty."""
        by_group: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        for (group_id, partition), committed in self.offsets.items():
            by_group.setdefault(group_id, {})[partition] = committed
        out = []
        for group_id, value in self.groups.items():
            group = group_from_value(group_id, value, now_ms)
            group.initialize_offsets(by_group.pop(group_id, {}))
            out.append(group)
        for group_id, offsets in by_group.items():
            group = GroupMetadata(group_id, GroupState.EMPTY, now_ms)
            group.initialize_offsets(offsets)
            out.append(group)
        groups = {g.group_id: g for g in out}
        for group_id, consumer in self.consumer.build().items():
            if group_id not in groups:
                groups[group_id] = GroupMetadata(group_id, GroupState.EMPTY, now_ms)
                out.append(groups[group_id])
            if groups[group_id].members:
                log.warning(
                    "group %s: classic members and consumer records; kept the classic", group_id
                )
                continue
            groups[group_id].consumer = consumer
        # Offsets of transactions still open: pending in their groups until the marker.
        for producer_id, pending in self.pending_txn.items():
            for (group_id, tp), committed in pending.items():
                if group_id not in groups:
                    groups[group_id] = GroupMetadata(group_id, GroupState.EMPTY, now_ms)
                    out.append(groups[group_id])
                groups[group_id].prepare_txn_offset_commit(producer_id, {tp: committed.value})
                groups[group_id].on_txn_offset_commit_append(producer_id, tp, committed)
        return out
