"""ListTransactions (key 66): the transactional ids a broker coordinates."""

from __future__ import annotations

from typing import Annotated

from gregor.protocol.schema import Int16, Int32, Int64, Request, Response, Struct, V


class ListTransactionsRequest(Request, api_key=66, valid="0-1", flexible="0+"):
    state_filters: list[str] = []
    producer_id_filters: list[Int64] = []
    duration_filter: Annotated[Int64, V("1+")] = -1


class TransactionState(Struct):
    transactional_id: str = ""
    producer_id: Int64 = 0
    transaction_state: str = ""


class ListTransactionsResponse(Response, api_key=66, valid="0-1", flexible="0+"):
    throttle_time_ms: Int32 = 0
    error_code: Int16 = 0
    unknown_state_filters: list[str] = []
    transaction_states: list[TransactionState] = []
