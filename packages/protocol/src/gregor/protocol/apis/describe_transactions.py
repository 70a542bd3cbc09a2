"""DescribeTransactions (key 65): the state of transactional ids."""

from __future__ import annotations

from gregor.protocol.schema import Int16, Int32, Int64, Request, Response, Struct


class DescribeTransactionsRequest(Request, api_key=65, valid="0", flexible="0+"):
    transactional_ids: list[str] = []


class TopicData(Struct):
    topic: str = ""
    partitions: list[Int32] = []


class TransactionState(Struct):
    error_code: Int16 = 0
    transactional_id: str = ""
    transaction_state: str = ""
    transaction_timeout_ms: Int32 = 0
    transaction_start_time_ms: Int64 = 0
    producer_id: Int64 = 0
    producer_epoch: Int16 = 0
    topics: list[TopicData] = []


class DescribeTransactionsResponse(Response, api_key=65, valid="0", flexible="0+"):
    throttle_time_ms: Int32 = 0
    transaction_states: list[TransactionState] = []
