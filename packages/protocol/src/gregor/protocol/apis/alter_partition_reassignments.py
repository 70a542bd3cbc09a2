"""AlterPartitionReassignments (key 45): start or cancel moving partition replicas."""

from __future__ import annotations

from gregor.protocol.schema import Int16, Int32, Request, Response, Struct


class ReassignablePartition(Struct):
    partition_index: Int32 = 0
    replicas: list[Int32] | None = None


class ReassignableTopic(Struct):
    name: str = ""
    partitions: list[ReassignablePartition] = []


class AlterPartitionReassignmentsRequest(Request, api_key=45, valid="0", flexible="0+"):
    timeout_ms: Int32 = 60000
    topics: list[ReassignableTopic] = []


class ReassignablePartitionResponse(Struct):
    partition_index: Int32 = 0
    error_code: Int16 = 0
    error_message: str | None = ""


class ReassignableTopicResponse(Struct):
    name: str = ""
    partitions: list[ReassignablePartitionResponse] = []


class AlterPartitionReassignmentsResponse(Response, api_key=45, valid="0", flexible="0+"):
    throttle_time_ms: Int32 = 0
    error_code: Int16 = 0
    error_message: str | None = ""
    responses: list[ReassignableTopicResponse] = []
