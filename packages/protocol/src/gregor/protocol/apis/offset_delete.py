"""OffsetDelete (key 47): delete a group's committed offsets for some partitions."""

from __future__ import annotations

from gregor.protocol.schema import Int16, Int32, Request, Response, Struct


class OffsetDeleteRequestPartition(Struct):
    partition_index: Int32 = 0


class OffsetDeleteRequestTopic(Struct):
    name: str = ""
    partitions: list[OffsetDeleteRequestPartition] = []


class OffsetDeleteRequest(Request, api_key=47, valid="0", flexible="none"):
    group_id: str = ""
    topics: list[OffsetDeleteRequestTopic] = []


class OffsetDeleteResponsePartition(Struct):
    partition_index: Int32 = 0
    error_code: Int16 = 0


class OffsetDeleteResponseTopic(Struct):
    name: str = ""
    partitions: list[OffsetDeleteResponsePartition] = []


class OffsetDeleteResponse(Response, api_key=47, valid="0", flexible="none"):
    error_code: Int16 = 0
    throttle_time_ms: Int32 = 0
    topics: list[OffsetDeleteResponseTopic] = []
