"""The consumer protocol: what consumers put in JoinGroup metadata and SyncGroup assignments.

Group members of protocol type "consumer" exchange two opaque byte strings through the group
coordinator: each member's subscription (JoinGroup's protocol metadata) and the leader's
assignment for each member (SyncGroup). Their formats are Kafka's
`ConsumerProtocolSubscription` and `ConsumerProtocolAssignment`, versions 0-3, each prefixed
with its version as an int16:

- v1 adds the partitions a member owns (cooperative rebalancing),
- v2 the generation those were owned in,
- v3 the member's rack (rack-aware assignment).

As Kafka reads them: a version above the highest known one is read as the highest known one,
bytes after the known fields are ignored (later versions only append fields), and an empty
assignment (a member the leader gave nothing) is an empty assignment.

The assignors' own user data lives here too: the sticky assignor's previous assignment
(`StickyAssignorUserData`, v0 without and v1 with the generation), and the
cooperative-sticky assignor's generation, which members running subscription v0/v1 send.
"""

# ruff: noqa: RUF012  (message schemas: the generated __init__ copies list defaults)

from __future__ import annotations

from typing import Annotated, TypeVar

from gregor.protocol.errors import DecodeError
from gregor.protocol.primitives import INT16
from gregor.protocol.schema import Int32, Message, Struct, V

PROTOCOL_TYPE = "consumer"
HIGHEST_VERSION = 3


class TopicPartitions(Struct):
    topic: str = ""
    partitions: list[Int32] = []


class ConsumerProtocolSubscription(Message, valid="0-3", flexible="none"):
    topics: list[str] = []
    user_data: bytes | None = None
    owned_partitions: Annotated[list[TopicPartitions], V("1+", ignorable=True)] = []
    generation_id: Annotated[Int32, V("2+", ignorable=True)] = -1
    rack_id: Annotated[str | None, V("3+", ignorable=True)] = None


class ConsumerProtocolAssignment(Message, valid="0-3", flexible="none"):
    assigned_partitions: list[TopicPartitions] = []
    user_data: bytes | None = None


class StickyAssignorUserData(Message, valid="0-1", flexible="none"):
    previous_assignment: list[TopicPartitions] = []
    # Java writes v0 by hand, without the generation: dropped, not refused.
    generation: Annotated[Int32, V("1+", ignorable=True)] = -1


class CooperativeStickyAssignorUserData(Message, valid="0", flexible="none"):
    generation: Int32 = -1


M = TypeVar("M", ConsumerProtocolSubscription, ConsumerProtocolAssignment)


def _encode(
    message: ConsumerProtocolSubscription | ConsumerProtocolAssignment, version: int
) -> bytes:
    return INT16.pack(version) + message.encode(version)


def _decode(cls: type[M], data: bytes | bytearray | memoryview) -> tuple[int, M]:
    data = bytes(data)
    if len(data) < 2:
        raise DecodeError(f"{cls.__name__} of {len(data)} bytes has no version")
    version = INT16.unpack_from(data, 0)[0]
    if version < 0:
        raise DecodeError(f"{cls.__name__} has negative version {version}")
    message, _ = cls.decode_prefix(data, min(version, HIGHEST_VERSION), 2)
    return version, message


def encode_subscription(
    subscription: ConsumerProtocolSubscription, version: int = HIGHEST_VERSION
) -> bytes:
    """JoinGroup protocol metadata: the int16 version, then the subscription at it."""
    return _encode(subscription, version)


def decode_subscription(
    data: bytes | bytearray | memoryview,
) -> tuple[int, ConsumerProtocolSubscription]:
    """The version a member wrote and its subscription (read at most at v3)."""
    return _decode(ConsumerProtocolSubscription, data)


def encode_assignment(
    assignment: ConsumerProtocolAssignment, version: int = HIGHEST_VERSION
) -> bytes:
    """A SyncGroup member assignment: the int16 version, then the assignment at it."""
    return _encode(assignment, version)


def decode_assignment(
    data: bytes | bytearray | memoryview,
) -> tuple[int, ConsumerProtocolAssignment]:
    """The version and the assignment; no bytes at all are an empty assignment."""
    if len(data) == 0:
        return 0, ConsumerProtocolAssignment()
    return _decode(ConsumerProtocolAssignment, data)


def decode_sticky_user_data(data: bytes | None) -> StickyAssignorUserData | None:
    """The sticky assignor's user data, v1 or else v0; None when absent or unreadable."""
    if not data:
        return None
    for version in (1, 0):
        try:
            return StickyAssignorUserData.decode_prefix(data, version)[0]
        except DecodeError:
            continue
    return None
