"""ConsumerGroupHeartbeat (key 68): a member of a KIP-848 consumer group joins, heartbeats,
acknowledges its assignment and leaves, all through this one request."""

from __future__ import annotations

import base64
import uuid
from typing import Annotated
from uuid import UUID

from gregor.protocol.schema import Int16, Int32, Request, Response, Struct, V

JOIN_EPOCH = 0  # MemberEpoch of a member joining
LEAVE_EPOCH = -1  # ... leaving
STATIC_LEAVE_EPOCH = -2  # ... a static member leaving for a while (it will rejoin)


def new_member_id() -> str:
    """A member id as Kafka makes one (Uuid.randomUuid().toString()): 16 random bytes in
    URL-safe base64, unpadded. Consumers make their own since KIP-1082; a coordinator makes
    one for a member that joins without."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


class TopicPartitions(Struct):
    topic_id: UUID = UUID(int=0)
    partitions: list[Int32] = []


class ConsumerGroupHeartbeatRequest(Request, api_key=68, valid="0-1", flexible="0+"):
    group_id: str = ""
    member_id: str = ""
    member_epoch: Int32 = 0
    # The fields below are null when unchanged since the member's last heartbeat.
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: Int32 = -1
    subscribed_topic_names: list[str] | None = None
    subscribed_topic_regex: Annotated[str | None, V("1+")] = None
    server_assignor: str | None = None
    topic_partitions: list[TopicPartitions] | None = None


class Assignment(Struct):
    topic_partitions: list[TopicPartitions] = []


class ConsumerGroupHeartbeatResponse(Response, api_key=68, valid="0-1", flexible="0+"):
    throttle_time_ms: Int32 = 0
    error_code: Int16 = 0
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: Int32 = 0
    heartbeat_interval_ms: Int32 = 0
    assignment: Assignment | None = None
