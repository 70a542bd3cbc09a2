"""ConsumerGroupDescribe (key 69): the state of KIP-848 consumer groups, with each member's
current and target assignment."""

from __future__ import annotations

from uuid import UUID

from gregor.protocol.schema import Int16, Int32, Request, Response, Struct

NO_AUTHORIZED_OPERATIONS = -(2**31)


class ConsumerGroupDescribeRequest(Request, api_key=69, valid="0", flexible="0+"):
    group_ids: list[str] = []
    include_authorized_operations: bool = False


class TopicPartitions(Struct):
    topic_id: UUID = UUID(int=0)
    topic_name: str = ""
    partitions: list[Int32] = []


class Assignment(Struct):
    topic_partitions: list[TopicPartitions] = []


class Member(Struct):
    member_id: str = ""
    instance_id: str | None = None
    rack_id: str | None = None
    member_epoch: Int32 = 0
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: list[str] = []
    subscribed_topic_regex: str | None = None
    assignment: Assignment = Assignment()
    target_assignment: Assignment = Assignment()


class DescribedGroup(Struct):
    error_code: Int16 = 0
    error_message: str | None = None
    group_id: str = ""
    group_state: str = ""
    group_epoch: Int32 = 0
    assignment_epoch: Int32 = 0
    assignor_name: str = ""
    members: list[Member] = []
    authorized_operations: Int32 = NO_AUTHORIZED_OPERATIONS


class ConsumerGroupDescribeResponse(Response, api_key=69, valid="0", flexible="0+"):
    throttle_time_ms: Int32 = 0
    groups: list[DescribedGroup] = []
