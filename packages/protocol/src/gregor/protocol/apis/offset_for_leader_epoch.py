"""OffsetForLeaderEpoch (key 23): the end offset of a leader epoch, for log truncation."""

from __future__ import annotations

from typing import Annotated

from gregor.protocol.schema import Int16, Int32, Int64, Request, Response, Struct, V


class OffsetForLeaderPartition(Struct):
    partition: Int32 = 0
    current_leader_epoch: Annotated[Int32, V("2+", ignorable=True)] = -1
    leader_epoch: Int32 = 0


class OffsetForLeaderTopic(Struct):
    topic: str = ""
    partitions: list[OffsetForLeaderPartition] = []


class OffsetForLeaderEpochRequest(Request, api_key=23, valid="0-4", flexible="4+"):
    replica_id: Annotated[Int32, V("3+", ignorable=True)] = -2
    topics: list[OffsetForLeaderTopic] = []


class EpochEndOffset(Struct):
    error_code: Int16 = 0
    partition: Int32 = 0
    leader_epoch: Annotated[Int32, V("1+", ignorable=True)] = -1
    end_offset: Int64 = -1


class OffsetForLeaderTopicResult(Struct):
    topic: str = ""
    partitions: list[EpochEndOffset] = []


class OffsetForLeaderEpochResponse(Response, api_key=23, valid="0-4", flexible="4+"):
    throttle_time_ms: Annotated[Int32, V("2+", ignorable=True)] = 0
    topics: list[OffsetForLeaderTopicResult] = []
