"""OffsetCommit (key 8): a consumer group stores its committed offsets."""

from __future__ import annotations

from typing import Annotated

from gregor.protocol.schema import Int16, Int32, Int64, Request, Response, Struct, V


class OffsetCommitRequestPartition(Struct):
    partition_index: Int32 = 0
    committed_offset: Int64 = 0
    committed_leader_epoch: Annotated[Int32, V("6+", ignorable=True)] = -1
    commit_timestamp: Annotated[Int64, V("1")] = -1
    committed_metadata: str | None = ""


class OffsetCommitRequestTopic(Struct):
    name: str = ""
    partitions: list[OffsetCommitRequestPartition] = []


class OffsetCommitRequest(Request, api_key=8, valid="0-9", flexible="8+"):
    group_id: str = ""
    generation_id_or_member_epoch: Annotated[Int32, V("1+", ignorable=True)] = -1
    member_id: Annotated[str, V("1+", ignorable=True)] = ""
    group_instance_id: Annotated[str | None, V("7+")] = None
    retention_time_ms: Annotated[Int64, V("2-4", ignorable=True)] = -1
    topics: list[OffsetCommitRequestTopic] = []


class OffsetCommitResponsePartition(Struct):
    partition_index: Int32 = 0
    error_code: Int16 = 0


class OffsetCommitResponseTopic(Struct):
    name: str = ""
    partitions: list[OffsetCommitResponsePartition] = []


class OffsetCommitResponse(Response, api_key=8, valid="0-9", flexible="8+"):
    throttle_time_ms: Annotated[Int32, V("3+", ignorable=True)] = 0
    topics: list[OffsetCommitResponseTopic] = []
