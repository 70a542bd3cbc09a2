"""TxnOffsetCommit (key 28): commit consumer offsets as part of a transaction."""

from __future__ import annotations

from typing import Annotated

from gregor.protocol.schema import Int16, Int32, Int64, Request, Response, Struct, V


class TxnOffsetCommitRequestPartition(Struct):
    partition_index: Int32 = 0
    committed_offset: Int64 = 0
    committed_leader_epoch: Annotated[Int32, V("2+", ignorable=True)] = -1
    committed_metadata: str | None = ""


class TxnOffsetCommitRequestTopic(Struct):
    name: str = ""
    partitions: list[TxnOffsetCommitRequestPartition] = []


class TxnOffsetCommitRequest(Request, api_key=28, valid="0-4", flexible="3+"):
    transactional_id: str = ""
    group_id: str = ""
    producer_id: Int64 = 0
    producer_epoch: Int16 = 0
    generation_id: Annotated[Int32, V("3+")] = -1
    member_id: Annotated[str, V("3+")] = ""
    group_instance_id: Annotated[str | None, V("3+")] = None
    topics: list[TxnOffsetCommitRequestTopic] = []


class TxnOffsetCommitResponsePartition(Struct):
    partition_index: Int32 = 0
    error_code: Int16 = 0


class TxnOffsetCommitResponseTopic(Struct):
    name: str = ""
    partitions: list[TxnOffsetCommitResponsePartition] = []


class TxnOffsetCommitResponse(Response, api_key=28, valid="0-4", flexible="3+"):
    throttle_time_ms: Int32 = 0
    topics: list[TxnOffsetCommitResponseTopic] = []
