"""ListOffsets (key 2): look up offsets by timestamp (earliest, latest, max timestamp, ...)."""

from __future__ import annotations

from typing import Annotated

from gregor.protocol.schema import Int8, Int16, Int32, Int64, Request, Response, Struct, V


class ListOffsetsPartition(Struct):
    partition_index: Int32 = 0
    current_leader_epoch: Annotated[Int32, V("4+", ignorable=True)] = -1
    timestamp: Int64 = 0
    max_num_offsets: Annotated[Int32, V("0")] = 1


class ListOffsetsTopic(Struct):
    name: str = ""
    partitions: list[ListOffsetsPartition] = []


class ListOffsetsRequest(Request, api_key=2, valid="0-10", flexible="6+"):
    replica_id: Int32 = 0
    isolation_level: Annotated[Int8, V("2+")] = 0
    topics: list[ListOffsetsTopic] = []
    timeout_ms: Annotated[Int32, V("10+", ignorable=True)] = 0


class ListOffsetsPartitionResponse(Struct):
    partition_index: Int32 = 0
    error_code: Int16 = 0
    old_style_offsets: Annotated[list[Int64], V("0")] = []
    timestamp: Annotated[Int64, V("1+")] = -1
    offset: Annotated[Int64, V("1+")] = -1
    leader_epoch: Annotated[Int32, V("4+")] = -1


class ListOffsetsTopicResponse(Struct):
    name: str = ""
    partitions: list[ListOffsetsPartitionResponse] = []


class ListOffsetsResponse(Response, api_key=2, valid="0-10", flexible="6+"):
    throttle_time_ms: Annotated[Int32, V("2+", ignorable=True)] = 0
    topics: list[ListOffsetsTopicResponse] = []
