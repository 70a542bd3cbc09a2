"""The `__consumer_offsets` key and value formats.

Each is checked against bytes built by hand from Kafka's field list (version prefix, int16
string lengths, -1 for null), round-tripped at every version, and fed bad input: too short,
unknown versions, trailing bytes.
"""

from __future__ import annotations

import struct
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gregor.protocol.errors import DecodeError
from gregor.protocol.group_records import (
    MEMBER_UNREVOKED_PARTITIONS,
    ClassicMemberMetadata,
    ClassicProtocol,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    TopicMetadata,
    TopicPartitions,
    UnknownKey,
    decode_consumer_group_value,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_consumer_group_key,
    encode_consumer_group_value,
    encode_group_metadata_value,
    encode_offset_commit_value,
    group_metadata_key,
    offset_commit_key,
)


def s16(text: str | None) -> bytes:
    """A classic (non-flexible) string: int16 length, -1 for null."""
    if text is None:
        return struct.pack(">h", -1)
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def b32(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


def test_offset_commit_key_bytes() -> None:
    key = offset_commit_key("group-é", "topic", 7)
    assert key == struct.pack(">h", 1) + s16("group-é") + s16("topic") + struct.pack(">i", 7)
    assert decode_key(key) == OffsetCommitKey("group-é", "topic", 7)
    # Version 0 has the same fields.
    v0 = struct.pack(">h", 0) + key[2:]
    assert decode_key(v0) == OffsetCommitKey("group-é", "topic", 7)


def test_group_metadata_key_bytes() -> None:
    key = group_metadata_key("my-group")
    assert key == struct.pack(">h", 2) + s16("my-group")
    assert decode_key(key) == GroupMetadataKey("my-group")


def test_offset_commit_value_versions() -> None:
    value = OffsetCommitValue(
        offset=42, leader_epoch=5, metadata="meta", commit_timestamp=1_700_000_000_000
    )
    v3 = encode_offset_commit_value(value)
    assert v3 == (
        struct.pack(">hqi", 3, 42, 5) + s16("meta") + struct.pack(">q", 1_700_000_000_000)
    )
    with_expiry = OffsetCommitValue(
        offset=42, metadata="", commit_timestamp=10, expire_timestamp=99
    )
    v1 = encode_offset_commit_value(with_expiry)
    assert v1 == struct.pack(">hq", 1, 42) + s16("") + struct.pack(">qq", 10, 99)
    v0 = encode_offset_commit_value(value, version=0)
    assert v0 == struct.pack(">hq", 0, 42) + s16("meta") + struct.pack(">q", 1_700_000_000_000)
    assert decode_offset_commit_value(v3) == (3, value)
    assert decode_offset_commit_value(v1) == (1, with_expiry)
    # v0 has no leader epoch: it reads back as -1.
    assert decode_offset_commit_value(v0)[1].leader_epoch == -1


def test_offset_commit_value_v4_is_flexible() -> None:
    value = OffsetCommitValue(offset=1, leader_epoch=2, metadata="m", commit_timestamp=3)
    v4 = encode_offset_commit_value(value, version=4)
    # compact string: length + 1 as an unsigned varint; an empty tagged-field section at the end
    assert v4 == struct.pack(">hqi", 4, 1, 2) + b"\x02m" + struct.pack(">q", 3) + b"\x00"
    assert decode_offset_commit_value(v4) == (4, value)


def test_group_metadata_value_bytes() -> None:
    member = MemberMetadata(
        member_id="m-1",
        group_instance_id="instance-1",
        client_id="client",
        client_host="/127.0.0.1",
        rebalance_timeout=30000,
        session_timeout=10000,
        subscription=b"\x00\x01sub",
        assignment=b"\x00\x01asg",
    )
    value = GroupMetadataValue(
        protocol_type="consumer",
        generation=3,
        protocol="range",
        leader="m-1",
        current_state_timestamp=123,
        members=[member],
    )
    expected = (
        struct.pack(">h", 3)
        + s16("consumer")
        + struct.pack(">i", 3)
        + s16("range")
        + s16("m-1")
        + struct.pack(">q", 123)
        + struct.pack(">i", 1)
        + s16("m-1")
        + s16("instance-1")
        + s16("client")
        + s16("/127.0.0.1")
        + struct.pack(">ii", 30000, 10000)
        + b32(b"\x00\x01sub")
        + b32(b"\x00\x01asg")
    )
    assert encode_group_metadata_value(value) == expected
    assert decode_group_metadata_value(expected) == (3, value)


def test_empty_group_metadata_value_has_null_protocol_and_leader() -> None:
    value = GroupMetadataValue(protocol_type="consumer", generation=4)
    encoded = encode_group_metadata_value(value)
    assert encoded == (
        struct.pack(">h", 3)
        + s16("consumer")
        + struct.pack(">i", 4)
        + s16(None)
        + s16(None)
        + struct.pack(">qi", -1, 0)
    )
    assert decode_group_metadata_value(encoded) == (3, value)


def test_group_metadata_value_v0_has_no_rebalance_timeout_or_instance_id() -> None:
    member = MemberMetadata("m", None, "c", "/h", -1, 6000, b"s", b"a")
    encoded = encode_group_metadata_value(
        GroupMetadataValue(
            protocol_type="x", generation=1, protocol="p", leader="m", members=[member]
        ),
        version=0,
    )
    expected = (
        struct.pack(">h", 0)
        + s16("x")
        + struct.pack(">i", 1)
        + s16("p")
        + s16("m")
        + struct.pack(">i", 1)
        + s16("m")
        + s16("c")
        + s16("/h")
        + struct.pack(">i", 6000)
        + b32(b"s")
        + b32(b"a")
    )
    assert encoded == expected


names = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=30)
int32s = st.integers(-(2**31), 2**31 - 1)
int64s = st.integers(-(2**63), 2**63 - 1)


@given(names, names, int32s)
def test_offset_commit_key_round_trip(group: str, topic: str, partition: int) -> None:
    assert decode_key(offset_commit_key(group, topic, partition)) == OffsetCommitKey(
        group, topic, partition
    )


@pytest.mark.parametrize("version", range(5))
@settings(max_examples=40)
@given(data=st.data())
def test_offset_commit_value_round_trip(version: int, data: st.DataObject) -> None:
    value = OffsetCommitValue(
        offset=data.draw(int64s),
        leader_epoch=data.draw(int32s) if version >= 3 else -1,
        metadata=data.draw(names),
        commit_timestamp=data.draw(int64s),
        expire_timestamp=data.draw(int64s) if version == 1 else -1,
    )
    assert decode_offset_commit_value(encode_offset_commit_value(value, version)) == (
        version,
        value,
    )


@pytest.mark.parametrize("version", range(5))
@settings(max_examples=40)
@given(data=st.data())
def test_group_metadata_value_round_trip(version: int, data: st.DataObject) -> None:
    members = [
        MemberMetadata(
            member_id=data.draw(names),
            group_instance_id=data.draw(st.none() | names) if version >= 3 else None,
            client_id=data.draw(names),
            client_host=data.draw(names),
            rebalance_timeout=data.draw(int32s) if version >= 1 else -1,
            session_timeout=data.draw(int32s),
            subscription=data.draw(st.binary(max_size=40)),
            assignment=data.draw(st.binary(max_size=40)),
        )
        for _ in range(data.draw(st.integers(0, 3)))
    ]
    value = GroupMetadataValue(
        protocol_type=data.draw(names),
        generation=data.draw(int32s),
        protocol=data.draw(st.none() | names),
        leader=data.draw(st.none() | names),
        current_state_timestamp=data.draw(int64s) if version >= 2 else -1,
        members=members,
    )
    assert decode_group_metadata_value(encode_group_metadata_value(value, version)) == (
        version,
        value,
    )


def test_unknown_key_versions_are_reported_not_raised() -> None:
    assert decode_key(struct.pack(">h", 9) + s16("g")) == UnknownKey(9)
    assert decode_key(struct.pack(">h", -1)) == UnknownKey(-1)


@pytest.mark.parametrize(
    "data",
    [b"", b"\x00", struct.pack(">h", 1) + s16("g"), group_metadata_key("g")[:-1]],
    ids=["empty", "half-version", "missing-fields", "truncated-string"],
)
def test_malformed_keys_raise_decode_error(data: bytes) -> None:
    with pytest.raises(DecodeError):
        decode_key(data)


def test_trailing_bytes_after_a_key_are_an_error() -> None:
    with pytest.raises(DecodeError, match="trailing"):
        decode_key(group_metadata_key("g") + b"x")


@pytest.mark.parametrize("version", [-1, 5, 99])
def test_unknown_value_versions_raise_decode_error(version: int) -> None:
    body = encode_offset_commit_value(OffsetCommitValue(offset=1))[2:]
    with pytest.raises(DecodeError, match="versions"):
        decode_offset_commit_value(struct.pack(">h", version) + body)
    with pytest.raises(DecodeError, match="versions"):
        decode_group_metadata_value(struct.pack(">h", version) + body)


def test_truncated_values_raise_decode_error() -> None:
    encoded = encode_group_metadata_value(
        GroupMetadataValue(
            protocol_type="consumer",
            generation=1,
            members=[MemberMetadata("m", None, "c", "h", 1, 2, b"x" * 10, b"y")],
        )
    )
    for cut in (1, 5, len(encoded) // 2, len(encoded) - 1):
        with pytest.raises(DecodeError):
            decode_group_metadata_value(encoded[:cut])
    with pytest.raises(DecodeError):
        decode_offset_commit_value(encode_offset_commit_value(OffsetCommitValue())[:-3])


# -- KIP-848 consumer groups (key versions 3-8, flexible values at v0) --------------------


def test_consumer_group_keys_are_classic_strings_after_their_type() -> None:
    key = encode_consumer_group_key(ConsumerGroupMemberMetadataKey("g", "m-1"))
    assert key == struct.pack(">h", 5) + s16("g") + s16("m-1")
    assert decode_key(key) == ConsumerGroupMemberMetadataKey("g", "m-1")
    epoch_key = encode_consumer_group_key(ConsumerGroupMetadataKey("g"))
    assert epoch_key == struct.pack(">h", 3) + s16("g")
    assert decode_key(epoch_key) == ConsumerGroupMetadataKey("g")
    assert decode_key(struct.pack(">h", 8) + s16("g") + s16("m")) == (
        ConsumerGroupCurrentMemberAssignmentKey("g", "m")
    )


def test_consumer_group_value_bytes() -> None:
    """Flexible v0: compact strings and arrays (length + 1), a tagged-field count of 0."""
    topic = uuid.UUID(int=0x0102)
    value = ConsumerGroupCurrentMemberAssignmentValue(
        member_epoch=7,
        previous_member_epoch=6,
        state=MEMBER_UNREVOKED_PARTITIONS,
        assigned_partitions=[TopicPartitions(topic, [0, 2])],
        partitions_pending_revocation=[],
    )
    data = encode_consumer_group_value(value)
    assert data == (
        struct.pack(">hiib", 0, 7, 6, 1)
        + b"\x02" + topic.bytes + b"\x03" + struct.pack(">ii", 0, 2) + b"\x00"
        + b"\x01" + b"\x00"
    )  # fmt: skip
    assert decode_consumer_group_value(8, data) == value
    assert (
        encode_consumer_group_value(ConsumerGroupMetadataValue(5))
        == struct.pack(">hi", 0, 5) + b"\x00"
    )


def test_target_assignment_records_bytes() -> None:
    """Keys 6 (the target's epoch) and 7 (a member's target), as Kafka's
    ConsumerGroupTargetAssignmentMetadata/MemberKey and Value: the key a type and classic
    strings, the value flexible v0 (an int32 epoch; compact arrays of topic id and
    partitions, a tag buffer after each struct and at the end)."""
    metadata_key = encode_consumer_group_key(ConsumerGroupTargetAssignmentMetadataKey("g"))
    assert metadata_key == struct.pack(">h", 6) + s16("g")
    assert decode_key(metadata_key) == ConsumerGroupTargetAssignmentMetadataKey("g")
    member_key = encode_consumer_group_key(ConsumerGroupTargetAssignmentMemberKey("g", "m"))
    assert member_key == struct.pack(">h", 7) + s16("g") + s16("m")
    assert decode_key(member_key) == ConsumerGroupTargetAssignmentMemberKey("g", "m")
    epoch = ConsumerGroupTargetAssignmentMetadataValue(assignment_epoch=9)
    assert encode_consumer_group_value(epoch) == struct.pack(">hi", 0, 9) + b"\x00"
    assert decode_consumer_group_value(6, encode_consumer_group_value(epoch)) == epoch
    t, u = uuid.UUID(int=0x0A), uuid.UUID(int=0x0B)
    target = ConsumerGroupTargetAssignmentMemberValue(
        [TopicPartitions(t, [1, 3]), TopicPartitions(u, [])]
    )
    data = encode_consumer_group_value(target)
    assert data == (
        struct.pack(">h", 0) + b"\x03"
        + t.bytes + b"\x03" + struct.pack(">ii", 1, 3) + b"\x00"
        + u.bytes + b"\x01" + b"\x00"
        + b"\x00"
    )  # fmt: skip
    assert decode_consumer_group_value(7, data) == target


@pytest.mark.parametrize(
    ("key_version", "value"),
    [
        (
            5,
            ConsumerGroupMemberMetadataValue(
                instance_id="i-1", rack_id=None, client_id="c", client_host="/10.0.0.1",
                subscribed_topic_names=["a", "b"], subscribed_topic_regex=None,
                rebalance_timeout_ms=30000, server_assignor="uniform",
            ),
        ),
        (
            5,
            ConsumerGroupMemberMetadataValue(
                client_id="c", subscribed_topic_regex="t-.*",
                classic_member_metadata=ClassicMemberMetadata(
                    45000, [ClassicProtocol("range", b"\x00\x01")]
                ),
            ),
        ),
        (
            4,
            ConsumerGroupPartitionMetadataValue(
                [TopicMetadata(uuid.UUID(int=9), "t", 3), TopicMetadata(uuid.UUID(int=10), "u", 1)]
            ),
        ),
    ],
    ids=["member", "classic-member", "partition-metadata"],
)  # fmt: skip
def test_consumer_group_values_round_trip(key_version: int, value: object) -> None:
    data = encode_consumer_group_value(value)  # type: ignore[arg-type]
    assert decode_consumer_group_value(key_version, data) == value


def test_unknown_consumer_group_value_versions_raise_decode_error() -> None:
    data = struct.pack(">h", 1) + encode_consumer_group_value(ConsumerGroupMetadataValue(1))[2:]
    with pytest.raises(DecodeError):
        decode_consumer_group_value(3, data)
