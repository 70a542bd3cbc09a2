"""ListPartitionReassignments (key 46): the partition reassignments in progress."""

from __future__ import annotations

from gregor.protocol.schema import Int16, Int32, Request, Response, Struct


class ListPartitionReassignmentsTopics(Struct):
    name: str = ""
    partition_indexes: list[Int32] = []


class ListPartitionReassignmentsRequest(Request, api_key=46, valid="0", flexible="0+"):
    timeout_ms: Int32 = 60000
    topics: list[ListPartitionReassignmentsTopics] | None = None


class OngoingPartitionReassignment(Struct):
    partition_index: Int32 = 0
    replicas: list[Int32] = []
    adding_replicas: list[Int32] = []
    removing_replicas: list[Int32] = []


class OngoingTopicReassignment(Struct):
    name: str = ""
    partitions: list[OngoingPartitionReassignment] = []


class ListPartitionReassignmentsResponse(Response, api_key=46, valid="0", flexible="0+"):
    throttle_time_ms: Int32 = 0
    error_code: Int16 = 0
    error_message: str | None = ""
    topics: list[OngoingTopicReassignment] = []
