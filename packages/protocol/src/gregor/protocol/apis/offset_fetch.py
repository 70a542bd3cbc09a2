"""OffsetFetch (key 9): a consumer group reads back its committed offsets."""

from __future__ import annotations

from typing import Annotated

from gregor.protocol.schema import Int16, Int32, Int64, Request, Response, Struct, V


class OffsetFetchRequestTopic(Struct):
    name: Annotated[str, V("0-7")] = ""
    partition_indexes: Annotated[list[Int32], V("0-7")] = []


class OffsetFetchRequestTopics(Struct):
    name: Annotated[str, V("8+")] = ""
    partition_indexes: Annotated[list[Int32], V("8+")] = []


class OffsetFetchRequestGroup(Struct):
    group_id: Annotated[str, V("8+")] = ""
    member_id: Annotated[str | None, V("9+", ignorable=True)] = None
    member_epoch: Annotated[Int32, V("9+", ignorable=True)] = -1
    topics: Annotated[list[OffsetFetchRequestTopics] | None, V("8+")] = []


class OffsetFetchRequest(Request, api_key=9, valid="0-9", flexible="6+"):
    group_id: Annotated[str, V("0-7")] = ""
    topics: Annotated[list[OffsetFetchRequestTopic] | None, V("0-7", nullable="2-7")] = []
    groups: Annotated[list[OffsetFetchRequestGroup], V("8+")] = []
    require_stable: Annotated[bool, V("7+")] = False


class OffsetFetchResponsePartition(Struct):
    partition_index: Annotated[Int32, V("0-7")] = 0
    committed_offset: Annotated[Int64, V("0-7")] = 0
    committed_leader_epoch: Annotated[Int32, V("5-7", ignorable=True)] = -1
    metadata: Annotated[str | None, V("0-7")] = ""
    error_code: Annotated[Int16, V("0-7")] = 0


class OffsetFetchResponseTopic(Struct):
    name: Annotated[str, V("0-7")] = ""
    partitions: Annotated[list[OffsetFetchResponsePartition], V("0-7")] = []


class OffsetFetchResponsePartitions(Struct):
    partition_index: Annotated[Int32, V("8+")] = 0
    committed_offset: Annotated[Int64, V("8+")] = 0
    committed_leader_epoch: Annotated[Int32, V("8+", ignorable=True)] = -1
    metadata: Annotated[str | None, V("8+")] = ""
    error_code: Annotated[Int16, V("8+")] = 0


class OffsetFetchResponseTopics(Struct):
    name: Annotated[str, V("8+")] = ""
    partitions: Annotated[list[OffsetFetchResponsePartitions], V("8+")] = []


class OffsetFetchResponseGroup(Struct):
    group_id: Annotated[str, V("8+")] = ""
    topics: Annotated[list[OffsetFetchResponseTopics], V("8+")] = []
    error_code: Annotated[Int16, V("8+")] = 0


class OffsetFetchResponse(Response, api_key=9, valid="0-9", flexible="6+"):
    throttle_time_ms: Annotated[Int32, V("3+", ignorable=True)] = 0
    topics: Annotated[list[OffsetFetchResponseTopic], V("0-7")] = []
    error_code: Annotated[Int16, V("2-7", ignorable=True)] = 0
    groups: Annotated[list[OffsetFetchResponseGroup], V("8+")] = []
