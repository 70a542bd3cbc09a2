"""The consumer protocol's subscription and assignment formats, v0-v3.

Round trips at every version, the bytes other clients write and read (kafka-python's
generated classes, aiokafka's hand-written v0 structs), and Kafka's reading rules: newer
versions read as v3, trailing bytes ignored, an empty assignment is empty.
"""

from __future__ import annotations

import pytest
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment as AioAssignment,
)
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberMetadata as AioMetadata,
)
from hypothesis import given
from hypothesis import strategies as st
from kafka.protocol.consumer.metadata import (
    ConsumerProtocolAssignment as KpAssignment,
)
from kafka.protocol.consumer.metadata import (
    ConsumerProtocolSubscription as KpSubscription,
)

from gregor.protocol.consumer_protocol import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
    CooperativeStickyAssignorUserData,
    StickyAssignorUserData,
    TopicPartitions,
    decode_assignment,
    decode_sticky_user_data,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from gregor.protocol.errors import DecodeError

names = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=20)
partition_lists = st.lists(
    st.builds(TopicPartitions, names, st.lists(st.integers(0, 2**31 - 1), max_size=5)),
    max_size=4,
)
user_data = st.none() | st.binary(max_size=30)


@st.composite
def subscriptions(draw: st.DrawFn, version: int) -> ConsumerProtocolSubscription:
    return ConsumerProtocolSubscription(
        topics=draw(st.lists(names, max_size=5)),
        user_data=draw(user_data),
        owned_partitions=draw(partition_lists) if version >= 1 else [],
        generation_id=draw(st.integers(-1, 2**31 - 1)) if version >= 2 else -1,
        rack_id=draw(st.none() | names) if version >= 3 else None,
    )


@pytest.mark.parametrize("version", [0, 1, 2, 3])
@given(data=st.data())
def test_subscription_round_trip(version: int, data: st.DataObject) -> None:
    subscription = data.draw(subscriptions(version))
    encoded = encode_subscription(subscription, version)
    assert encoded[:2] == version.to_bytes(2, "big")
    assert decode_subscription(encoded) == (version, subscription)


@pytest.mark.parametrize("version", [0, 1, 2, 3])
@given(assigned=partition_lists, extra=user_data)
def test_assignment_round_trip(
    version: int, assigned: list[TopicPartitions], extra: bytes | None
) -> None:
    assignment = ConsumerProtocolAssignment(assigned_partitions=assigned, user_data=extra)
    assert decode_assignment(encode_assignment(assignment, version)) == (version, assignment)


def _kp_subscription(version: int) -> KpSubscription:
    return KpSubscription(
        version=version,
        topics=["orders", "payments"],
        user_data=b"\x00\x01",
        owned_partitions=[KpSubscription.TopicPartition(topic="orders", partitions=[0, 3])]
        if version >= 1
        else [],
        generation_id=7 if version >= 2 else -1,
        rack_id="rack-a" if version >= 3 else None,
    )


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_subscription_bytes_match_kafka_python(version: int) -> None:
    ours = ConsumerProtocolSubscription(
        topics=["orders", "payments"],
        user_data=b"\x00\x01",
        owned_partitions=[TopicPartitions("orders", [0, 3])] if version >= 1 else [],
        generation_id=7 if version >= 2 else -1,
        rack_id="rack-a" if version >= 3 else None,
    )
    theirs = _kp_subscription(version).encode()
    assert encode_subscription(ours, version) == theirs
    assert decode_subscription(theirs) == (version, ours)
    back = KpSubscription.decode(encode_subscription(ours, version))
    assert (back.topics, back.generation_id, back.rack_id) == (
        ["orders", "payments"],
        7 if version >= 2 else -1,
        "rack-a" if version >= 3 else None,
    )


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_assignment_bytes_match_kafka_python(version: int) -> None:
    theirs = KpAssignment(
        version=version,
        assigned_partitions=[
            KpAssignment.TopicPartition(topic="orders", partitions=[2, 5]),
            KpAssignment.TopicPartition(topic="audit", partitions=[]),
        ],
        user_data=None,
    ).encode()
    ours = ConsumerProtocolAssignment(
        assigned_partitions=[TopicPartitions("orders", [2, 5]), TopicPartitions("audit", [])]
    )
    assert encode_assignment(ours, version) == theirs
    assert decode_assignment(theirs) == (version, ours)


def test_v0_bytes_match_aiokafka() -> None:
    metadata = AioMetadata(0, ["a", "b"], b"").encode()
    assert decode_subscription(metadata) == (
        0,
        ConsumerProtocolSubscription(topics=["a", "b"], user_data=b""),
    )
    assert (
        encode_subscription(ConsumerProtocolSubscription(topics=["a", "b"], user_data=b""), 0)
        == metadata
    )
    assignment = AioAssignment(0, [("a", [0, 1])], b"").encode()
    assert decode_assignment(assignment) == (
        0,
        ConsumerProtocolAssignment([TopicPartitions("a", [0, 1])], b""),
    )
    parsed = AioAssignment.decode(
        encode_assignment(ConsumerProtocolAssignment([TopicPartitions("a", [0, 1])], b""), 0)
    )
    assert parsed.partitions() == [("a", 0), ("a", 1)]


def test_newer_versions_are_read_as_v3_and_trailing_bytes_ignored() -> None:
    v3 = ConsumerProtocolSubscription(
        topics=["t"], owned_partitions=[TopicPartitions("t", [1])], generation_id=4, rack_id="r"
    )
    future = b"\x00\x09" + v3.encode(3) + b"fields of v9"
    assert decode_subscription(future) == (9, v3)
    assignment = ConsumerProtocolAssignment([TopicPartitions("t", [0])])
    assert decode_assignment(b"\x00\x05" + assignment.encode(3) + b"\x01") == (5, assignment)


def test_empty_assignment_and_malformed_input() -> None:
    assert decode_assignment(b"") == (0, ConsumerProtocolAssignment())
    with pytest.raises(DecodeError, match="no version"):
        decode_subscription(b"\x00")
    with pytest.raises(DecodeError, match="negative version -1"):
        decode_subscription(b"\xff\xff\x00\x00\x00\x00")
    with pytest.raises(DecodeError):
        decode_subscription(b"\x00\x00\x00\x00\x00\x05\x00\x01a")  # five topics promised
    with pytest.raises(DecodeError):
        decode_assignment(b"\x00\x01\x7f\xff\xff\xff")  # a huge array count


def test_sticky_user_data_v1_then_v0() -> None:
    v1 = StickyAssignorUserData([TopicPartitions("t", [0, 2])], generation=3)
    assert decode_sticky_user_data(v1.encode(1)) == v1
    v0 = StickyAssignorUserData([TopicPartitions("t", [0, 2])])
    assert decode_sticky_user_data(v0.encode(0)) == v0
    assert decode_sticky_user_data(None) is None
    assert decode_sticky_user_data(b"\x00") is None
    assert CooperativeStickyAssignorUserData(9).encode(0) == b"\x00\x00\x00\x09"
