"""EndTxn (key 26): commit or abort a transaction."""

from __future__ import annotations

from typing import Annotated

from gregor.protocol.schema import Int16, Int32, Int64, Request, Response, V


class EndTxnRequest(Request, api_key=26, valid="0-5", flexible="3+"):
    transactional_id: str = ""
    producer_id: Int64 = 0
    producer_epoch: Int16 = 0
    committed: bool = False


class EndTxnResponse(Response, api_key=26, valid="0-5", flexible="3+"):
    throttle_time_ms: Int32 = 0
    error_code: Int16 = 0
    producer_id: Annotated[Int64, V("5+", ignorable=True)] = -1
    producer_epoch: Annotated[Int16, V("5+", ignorable=True)] = -1
