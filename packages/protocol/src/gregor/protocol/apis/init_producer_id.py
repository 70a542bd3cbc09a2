"""InitProducerId (key 22): an idempotent or transactional producer gets its id and epoch."""

from __future__ import annotations

from typing import Annotated

from gregor.protocol.schema import Int16, Int32, Int64, Request, Response, V


class InitProducerIdRequest(Request, api_key=22, valid="0-5", flexible="2+"):
    transactional_id: str | None = ""
    transaction_timeout_ms: Int32 = 0
    producer_id: Annotated[Int64, V("3+")] = -1
    producer_epoch: Annotated[Int16, V("3+")] = -1


class InitProducerIdResponse(Response, api_key=22, valid="0-5", flexible="2+"):
    throttle_time_ms: Int32 = 0
    error_code: Int16 = 0
    producer_id: Int64 = -1
    producer_epoch: Int16 = 0
