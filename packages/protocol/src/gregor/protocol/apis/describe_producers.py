"""DescribeProducers (key 61): the active producers of partitions."""

from __future__ import annotations

from gregor.protocol.schema import Int16, Int32, Int64, Request, Response, Struct


class TopicRequest(Struct):
    name: str = ""
    partition_indexes: list[Int32] = []


class DescribeProducersRequest(Request, api_key=61, valid="0", flexible="0+"):
    topics: list[TopicRequest] = []


class ProducerState(Struct):
    producer_id: Int64 = 0
    producer_epoch: Int32 = 0
    last_sequence: Int32 = -1
    last_timestamp: Int64 = -1
    coordinator_epoch: Int32 = 0
    current_txn_start_offset: Int64 = -1


class PartitionResponse(Struct):
    partition_index: Int32 = 0
    error_code: Int16 = 0
    error_message: str | None = None
    active_producers: list[ProducerState] = []


class TopicResponse(Struct):
    name: str = ""
    partitions: list[PartitionResponse] = []


class DescribeProducersResponse(Response, api_key=61, valid="0", flexible="0+"):
    throttle_time_ms: Int32 = 0
    topics: list[TopicResponse] = []
