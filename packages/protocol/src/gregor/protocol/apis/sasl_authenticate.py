"""SaslAuthenticate (key 36): SASL authentication bytes, framed as a Kafka request."""

from __future__ import annotations

from typing import Annotated

from gregor.protocol.schema import Int16, Int64, Request, Response, V


class SaslAuthenticateRequest(Request, api_key=36, valid="0-2", flexible="2+"):
    auth_bytes: bytes = b""


class SaslAuthenticateResponse(Response, api_key=36, valid="0-2", flexible="2+"):
    error_code: Int16 = 0
    error_message: str | None = ""
    auth_bytes: bytes = b""
    session_lifetime_ms: Annotated[Int64, V("1+", ignorable=True)] = 0
