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

A null value is a tombstone: the offset or the group was deleted. The same key version
distinguishes the two kinds, so compaction never mixes them up.

Kafka writes keys at their highest version, offset values at v3 (v1 when the commit set a
retention of its own) and group values at v3; those are the defaults here.
"""

# ruff: noqa: RUF012  (message schemas: the generated __init__ copies list defaults)

from __future__ import annotations

from typing import Annotated, Final, TypeVar

import attrs

from gregor.protocol.errors import DecodeError
from gregor.protocol.primitives import INT16
from gregor.protocol.schema import Int32, Int64, Message, Struct, V

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


@attrs.frozen(slots=True)
class UnknownKey:
    """A key of a version neither kind uses (Kafka logs and skips such records)."""

    version: int


Key = OffsetCommitKey | GroupMetadataKey | UnknownKey
M = TypeVar("M", OffsetCommitValue, GroupMetadataValue)


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
    """An offset commit key, a group metadata key, or `UnknownKey` for any other version."""
    data = bytes(data)
    version = _version(data, "a __consumer_offsets key")
    if version in OffsetCommitKey.valid_versions:
        return OffsetCommitKey.decode(data, version, 2)
    if version in GroupMetadataKey.valid_versions:
        return GroupMetadataKey.decode(data, version, 2)
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
