"""Produce (key 0): a producer appends record batches to partition leaders."""

from __future__ import annotations

from typing import Annotated

from gregor.protocol.schema import Int16, Int32, Int64, Records, Request, Response, Struct, V


class PartitionProduceData(Struct):
    index: Int32 = 0
    records: Records | None = None


class TopicProduceData(Struct):
    name: str = ""
    partition_data: list[PartitionProduceData] = []


class ProduceRequest(Request, api_key=0, valid="0-11", flexible="9+"):
    transactional_id: Annotated[str | None, V("3+")] = None
    acks: Int16 = 0
    timeout_ms: Int32 = 0
    topic_data: list[TopicProduceData] = []


class BatchIndexAndErrorMessage(Struct):
    batch_index: Annotated[Int32, V("8+")] = 0
    batch_index_error_message: Annotated[str | None, V("8+")] = None


class LeaderIdAndEpoch(Struct):
    leader_id: Annotated[Int32, V("10+")] = -1
    leader_epoch: Annotated[Int32, V("10+")] = -1


class PartitionProduceResponse(Struct):
    index: Int32 = 0
    error_code: Int16 = 0
    base_offset: Int64 = 0
    log_append_time_ms: Annotated[Int64, V("2+", ignorable=True)] = -1
    log_start_offset: Annotated[Int64, V("5+", ignorable=True)] = -1
    record_errors: Annotated[list[BatchIndexAndErrorMessage], V("8+", ignorable=True)] = []
    error_message: Annotated[str | None, V("8+", ignorable=True)] = None
    current_leader: Annotated[LeaderIdAndEpoch, V("10+", tag=0)] = LeaderIdAndEpoch()


class TopicProduceResponse(Struct):
    name: str = ""
    partition_responses: list[PartitionProduceResponse] = []


class NodeEndpoint(Struct):
    node_id: Annotated[Int32, V("10+")] = 0
    host: Annotated[str, V("10+")] = ""
    port: Annotated[Int32, V("10+")] = 0
    rack: Annotated[str | None, V("10+")] = None


class ProduceResponse(Response, api_key=0, valid="0-11", flexible="9+"):
    responses: list[TopicProduceResponse] = []
    throttle_time_ms: Annotated[Int32, V("1+", ignorable=True)] = 0
    node_endpoints: Annotated[list[NodeEndpoint], V("10+", tag=0)] = []
