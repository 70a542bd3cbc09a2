"""DeleteRecords (key 21): move partitions' log start offsets forward."""

from __future__ import annotations

from gregor.protocol.schema import Int16, Int32, Int64, Request, Response, Struct


class DeleteRecordsPartition(Struct):
    partition_index: Int32 = 0
    offset: Int64 = 0


class DeleteRecordsTopic(Struct):
    name: str = ""
    partitions: list[DeleteRecordsPartition] = []


class DeleteRecordsRequest(Request, api_key=21, valid="0-2", flexible="2+"):
    topics: list[DeleteRecordsTopic] = []
    timeout_ms: Int32 = 0


class DeleteRecordsPartitionResult(Struct):
    partition_index: Int32 = 0
    low_watermark: Int64 = 0
    error_code: Int16 = 0


class DeleteRecordsTopicResult(Struct):
    name: str = ""
    partitions: list[DeleteRecordsPartitionResult] = []


class DeleteRecordsResponse(Response, api_key=21, valid="0-2", flexible="2+"):
    throttle_time_ms: Int32 = 0
    topics: list[DeleteRecordsTopicResult] = []
