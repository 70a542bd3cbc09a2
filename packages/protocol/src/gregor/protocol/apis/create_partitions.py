"""CreatePartitions (key 37): add partitions to existing topics."""

from __future__ import annotations

from gregor.protocol.schema import Int16, Int32, Request, Response, Struct


class CreatePartitionsAssignment(Struct):
    broker_ids: list[Int32] = []


class CreatePartitionsTopic(Struct):
    name: str = ""
    count: Int32 = 0
    assignments: list[CreatePartitionsAssignment] | None = []


class CreatePartitionsRequest(Request, api_key=37, valid="0-3", flexible="2+"):
    topics: list[CreatePartitionsTopic] = []
    timeout_ms: Int32 = 0
    validate_only: bool = False


class CreatePartitionsTopicResult(Struct):
    name: str = ""
    error_code: Int16 = 0
    error_message: str | None = None


class CreatePartitionsResponse(Response, api_key=37, valid="0-3", flexible="2+"):
    throttle_time_ms: Int32 = 0
    results: list[CreatePartitionsTopicResult] = []
