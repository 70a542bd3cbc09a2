"""AddOffsetsToTxn (key 25): a consumer group's offsets join an ongoing transaction."""

from __future__ import annotations

from gregor.protocol.schema import Int16, Int32, Int64, Request, Response


class AddOffsetsToTxnRequest(Request, api_key=25, valid="0-4", flexible="3+"):
    transactional_id: str = ""
    producer_id: Int64 = 0
    producer_epoch: Int16 = 0
    group_id: str = ""


class AddOffsetsToTxnResponse(Response, api_key=25, valid="0-4", flexible="3+"):
    throttle_time_ms: Int32 = 0
    error_code: Int16 = 0
