"""The records of `__consumer_offsets`: committed offsets and group metadata.

The group coordinator keeps its state in the compacted internal topic `__consumer_offsets`
as key/value records in Kafka's formats, so a log written by either can be read by the
other. Each key and each value starts with its version as an int16:

- key versions 0 and 1: an offset commit, keyed by (group, topic, partition); its value is
  an `OffsetCommitValue` (v1 carries an explicit expire timestamp, v3 the leader epoch;
  v4 is the first flexible version);
- key version 2: a group's metadata, keyed by the group; its value is a
  `GroupMetadataValue` (protocol, generation, leader, members with their subscription and
  assignment; v2 adds the state timestamp, v3 the static members' instance ids).

- key versions 3 to 8: a KIP-848 consumer group (`group.protocol=consumer`), as Kafka 3.7+
  writes it: 3 the group epoch, 4 the subscribed topics' metadata, 5 a member's subscription,
  6 the target assignment's epoch, 7 a member's target assignment, 8 a member's current
  assignment (its epochs, state, and what it owns or is revoking). Keys 5, 7 and 8 carry the
  member id too. Their values are all at v0, flexible.

A null value is a tombstone: the offset, the group or the member was deleted. Each kind has
its key version, so compaction never mixes them up.

Kafka writes keys at their highest version, offset values at v3 (v1 when the commit set a
retention of its own) and group values at v3; those are the defaults here.
"""

# ruff: noqa: RUF012  (message schemas: the generated __init__ copies list defaults)

from __future__ import annotations

import uuid
from typing import Annotated, Final, TypeVar

import attrs

from gregor.protocol.errors import DecodeError
from gregor.protocol.primitives import INT16
from gregor.protocol.schema import Int8, Int32, Int64, Message, Struct, V

OFFSET_COMMIT_KEY_VERSION: Final = 1
GROUP_METADATA_KEY_VERSION: Final = 2
OFFSET_COMMIT_VALUE_VERSION: Final = 3
OFFSET_COMMIT_VALUE_WITH_EXPIRY: Final = 1
GROUP_METADATA_VALUE_VERSION: Final = 3


class OffsetCommitKey(Message, valid="0-1", flexible="none"):
    group: str = ""
    topic: str = ""
    partition: Int32 = 0


class OffsetCommitValue(Message, valid="0-4", flexible="4+"):
    offset: Int64 = 0
    leader_epoch: Annotated[Int32, V("3+", ignorable=True)] = -1
    metadata: str = ""
    commit_timestamp: Int64 = 0
    expire_timestamp: Annotated[Int64, V("1", ignorable=True)] = -1


class GroupMetadataKey(Message, valid="2", flexible="none"):
    group: str = ""


class MemberMetadata(Struct):
    member_id: str = ""
    group_instance_id: Annotated[str | None, V("3+", ignorable=True)] = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout: Annotated[Int32, V("1+", ignorable=True)] = -1
    session_timeout: Int32 = 0
    subscription: bytes = b""
    assignment: bytes = b""


class GroupMetadataValue(Message, valid="0-4", flexible="4+"):
    protocol_type: str = ""
    generation: Int32 = 0
    protocol: str | None = None
    leader: str | None = None
    current_state_timestamp: Annotated[Int64, V("2+", ignorable=True)] = -1
    members: list[MemberMetadata] = []


# -- KIP-848 consumer groups: keys (their version is the record type) and values (v0) --------


class ConsumerGroupMetadataKey(Message, valid="3", flexible="none"):
    group: str = ""


class ConsumerGroupPartitionMetadataKey(Message, valid="4", flexible="none"):
    group: str = ""


class ConsumerGroupMemberMetadataKey(Message, valid="5", flexible="none"):
    group: str = ""
    member_id: str = ""


class ConsumerGroupTargetAssignmentMetadataKey(Message, valid="6", flexible="none"):
    group: str = ""


class ConsumerGroupTargetAssignmentMemberKey(Message, valid="7", flexible="none"):
    group: str = ""
    member_id: str = ""


class ConsumerGroupCurrentMemberAssignmentKey(Message, valid="8", flexible="none"):
    group: str = ""
    member_id: str = ""


class ConsumerGroupMetadataValue(Message, valid="0", flexible="0+"):
    epoch: Int32 = 0


class PartitionRacks(Struct):
    partition: Int32 = 0
    racks: list[str] = []


class TopicMetadata(Struct):
    topic_id: uuid.UUID = uuid.UUID(int=0)
    topic_name: str = ""
    num_partitions: Int32 = 0
    partition_metadata: list[PartitionRacks] = []  # unused since Kafka 4.0; written empty


class ConsumerGroupPartitionMetadataValue(Message, valid="0", flexible="0+"):
    topics: list[TopicMetadata] = []


class ClassicProtocol(Struct):
    name: str = ""
    metadata: bytes = b""


class ClassicMemberMetadata(Struct):
    session_timeout_ms: Int32 = 0
    supported_protocols: list[ClassicProtocol] = []


class ConsumerGroupMemberMetadataValue(Message, valid="0", flexible="0+"):
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: list[str] = []
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: Int32 = -1
    server_assignor: str | None = None
    # Set by Kafka for a classic-protocol member of a consumer group (not made here).
    classic_member_metadata: Annotated[ClassicMemberMetadata | None, V("0+", tag=0)] = None


class ConsumerGroupTargetAssignmentMetadataValue(Message, valid="0", flexible="0+"):
    assignment_epoch: Int32 = 0


class TopicPartitions(Struct):
    topic_id: uuid.UUID = uuid.UUID(int=0)
    partitions: list[Int32] = []


class ConsumerGroupTargetAssignmentMemberValue(Message, valid="0", flexible="0+"):
    topic_partitions: list[TopicPartitions] = []


# ConsumerGroupCurrentMemberAssignmentValue.state (Kafka's MemberState)
MEMBER_STABLE: Final = 0
MEMBER_UNREVOKED_PARTITIONS: Final = 1
MEMBER_UNRELEASED_PARTITIONS: Final = 2


class ConsumerGroupCurrentMemberAssignmentValue(Message, valid="0", flexible="0+"):
    member_epoch: Int32 = 0
    previous_member_epoch: Int32 = 0
    state: Int8 = MEMBER_STABLE
    assigned_partitions: list[TopicPartitions] = []
    partitions_pending_revocation: list[TopicPartitions] = []


ConsumerGroupKey = (
    ConsumerGroupMetadataKey
    | ConsumerGroupPartitionMetadataKey
    | ConsumerGroupMemberMetadataKey
    | ConsumerGroupTargetAssignmentMetadataKey
    | ConsumerGroupTargetAssignmentMemberKey
    | ConsumerGroupCurrentMemberAssignmentKey
)
ConsumerGroupValue = (
    ConsumerGroupMetadataValue
    | ConsumerGroupPartitionMetadataValue
    | ConsumerGroupMemberMetadataValue
    | ConsumerGroupTargetAssignmentMetadataValue
    | ConsumerGroupTargetAssignmentMemberValue
    | ConsumerGroupCurrentMemberAssignmentValue
)
# The value schema of each key, by the key's version.
CONSUMER_GROUP_VALUES: Final[dict[int, type[ConsumerGroupValue]]] = {
    3: ConsumerGroupMetadataValue,
    4: ConsumerGroupPartitionMetadataValue,
    5: ConsumerGroupMemberMetadataValue,
    6: ConsumerGroupTargetAssignmentMetadataValue,
    7: ConsumerGroupTargetAssignmentMemberValue,
    8: ConsumerGroupCurrentMemberAssignmentValue,
}
_CONSUMER_GROUP_KEYS: Final[dict[int, type[ConsumerGroupKey]]] = {
    3: ConsumerGroupMetadataKey,
    4: ConsumerGroupPartitionMetadataKey,
    5: ConsumerGroupMemberMetadataKey,
    6: ConsumerGroupTargetAssignmentMetadataKey,
    7: ConsumerGroupTargetAssignmentMemberKey,
    8: ConsumerGroupCurrentMemberAssignmentKey,
}
CONSUMER_GROUP_VALUE_VERSION: Final = 0


@attrs.frozen(slots=True)
class UnknownKey:
    """A key of a version neither kind uses (Kafka logs and skips such records)."""

    version: int


Key = OffsetCommitKey | GroupMetadataKey | ConsumerGroupKey | UnknownKey
M = TypeVar("M", bound=Message)


def _prefixed(message: Message, version: int) -> bytes:
    return INT16.pack(version) + message.encode(version)


def _version(data: bytes, what: str) -> int:
    if len(data) < 2:
        raise DecodeError(f"{what} of {len(data)} bytes has no version")
    version: int = INT16.unpack_from(data, 0)[0]
    return version


def offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    return _prefixed(OffsetCommitKey(group, topic, partition), OFFSET_COMMIT_KEY_VERSION)


def group_metadata_key(group: str) -> bytes:
    return _prefixed(GroupMetadataKey(group), GROUP_METADATA_KEY_VERSION)


def encode_consumer_group_key(key: ConsumerGroupKey) -> bytes:
    return _prefixed(key, key.valid_versions.lo)


def encode_consumer_group_value(value: ConsumerGroupValue) -> bytes:
    return _prefixed(value, CONSUMER_GROUP_VALUE_VERSION)


def encode_offset_commit_value(value: OffsetCommitValue, version: int | None = None) -> bytes:
    """The value at `version`; by default v1 when it has an expire timestamp, else v3."""
    if version is None:
        version = (
            OFFSET_COMMIT_VALUE_WITH_EXPIRY
            if value.expire_timestamp >= 0
            else OFFSET_COMMIT_VALUE_VERSION
        )
    return _prefixed(value, version)


def encode_group_metadata_value(
    value: GroupMetadataValue, version: int = GROUP_METADATA_VALUE_VERSION
) -> bytes:
    return _prefixed(value, version)


def decode_key(data: bytes | bytearray | memoryview) -> Key:
    """The key of its version's kind, or `UnknownKey` for a version no kind has."""
    data = bytes(data)
    version = _version(data, "a __consumer_offsets key")
    if version in OffsetCommitKey.valid_versions:
        return OffsetCommitKey.decode(data, version, 2)
    if version in GroupMetadataKey.valid_versions:
        return GroupMetadataKey.decode(data, version, 2)
    consumer_key = _CONSUMER_GROUP_KEYS.get(version)
    if consumer_key is not None:
        found: ConsumerGroupKey = consumer_key.decode(data, version, 2)
        return found
    return UnknownKey(version)


def _decode_value(cls: type[M], data: bytes | bytearray | memoryview) -> tuple[int, M]:
    data = bytes(data)
    version = _version(data, cls.__name__)
    if version not in cls.valid_versions:
        raise DecodeError(f"{cls.__name__} has versions {cls.valid_versions}, not {version}")
    return version, cls.decode(data, version, 2)


def decode_offset_commit_value(
    data: bytes | bytearray | memoryview,
) -> tuple[int, OffsetCommitValue]:
    """The version written and the value; DecodeError for an unknown version."""
    return _decode_value(OffsetCommitValue, data)


def decode_group_metadata_value(
    data: bytes | bytearray | memoryview,
) -> tuple[int, GroupMetadataValue]:
    """The version written and the value; DecodeError for an unknown version."""
    return _decode_value(GroupMetadataValue, data)


def decode_consumer_group_value(
    key_version: int, data: bytes | bytearray | memoryview
) -> ConsumerGroupValue:
    """The value of a consumer group record whose key has `key_version` (3 to 8);
    DecodeError for an unknown value version."""
    value: ConsumerGroupValue = _decode_value(CONSUMER_GROUP_VALUES[key_version], data)[1]
    return value
