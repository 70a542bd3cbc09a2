"""AddPartitionsToTxn (key 24): partitions join an ongoing transaction."""

from __future__ import annotations

from typing import Annotated

from gregor.protocol.schema import Int16, Int32, Int64, Request, Response, Struct, V


class AddPartitionsToTxnTopic(Struct):
    name: str = ""
    partitions: list[Int32] = []


class AddPartitionsToTxnTransaction(Struct):
    transactional_id: Annotated[str, V("4+")] = ""
    producer_id: Annotated[Int64, V("4+")] = 0
    producer_epoch: Annotated[Int16, V("4+")] = 0
    verify_only: Annotated[bool, V("4+")] = False
    topics: Annotated[list[AddPartitionsToTxnTopic], V("4+")] = []


class AddPartitionsToTxnRequest(Request, api_key=24, valid="0-5", flexible="3+"):
    transactions: Annotated[list[AddPartitionsToTxnTransaction], V("4+")] = []
    v3_and_below_transactional_id: Annotated[str, V("0-3")] = ""
    v3_and_below_producer_id: Annotated[Int64, V("0-3")] = 0
    v3_and_below_producer_epoch: Annotated[Int16, V("0-3")] = 0
    v3_and_below_topics: Annotated[list[AddPartitionsToTxnTopic], V("0-3")] = []


class AddPartitionsToTxnPartitionResult(Struct):
    partition_index: Int32 = 0
    partition_error_code: Int16 = 0


class AddPartitionsToTxnTopicResult(Struct):
    name: str = ""
    results_by_partition: list[AddPartitionsToTxnPartitionResult] = []


class AddPartitionsToTxnResult(Struct):
    transactional_id: Annotated[str, V("4+")] = ""
    topic_results: Annotated[list[AddPartitionsToTxnTopicResult], V("4+")] = []


class AddPartitionsToTxnResponse(Response, api_key=24, valid="0-5", flexible="3+"):
    throttle_time_ms: Int32 = 0
    error_code: Annotated[Int16, V("4+", ignorable=True)] = 0
    results_by_transaction: Annotated[list[AddPartitionsToTxnResult], V("4+")] = []
    results_by_topic_v3_and_below: Annotated[list[AddPartitionsToTxnTopicResult], V("0-3")] = []
