"""SaslHandshake and SaslAuthenticate outside authentication: on a listener without SASL, or
after it completed where no re-authentication may begin (the session has no lifetime, or
the last one began less than a second ago). Kafka answers both ILLEGAL_SASL_STATE there.
The exchange itself is `gregor.broker.security.sasl`, run by the network layer before any
request reaches a handler, and again for a re-authentication (KIP-368)."""

from __future__ import annotations

from gregor.broker.apis import RequestContext, handles
from gregor.protocol.apis import ApiKey
from gregor.protocol.apis.sasl_authenticate import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
)
from gregor.protocol.apis.sasl_handshake import SaslHandshakeRequest, SaslHandshakeResponse
from gregor.protocol.errors import ErrorCode


@handles(ApiKey.SASL_HANDSHAKE, "0-1")
async def sasl_handshake(
    ctx: RequestContext, request: SaslHandshakeRequest, version: int
) -> SaslHandshakeResponse:
    return SaslHandshakeResponse(ErrorCode.ILLEGAL_SASL_STATE, [])


@handles(ApiKey.SASL_AUTHENTICATE, "0-2")
async def sasl_authenticate(
    ctx: RequestContext, request: SaslAuthenticateRequest, version: int
) -> SaslAuthenticateResponse:
    return SaslAuthenticateResponse(
        ErrorCode.ILLEGAL_SASL_STATE,
        "SaslAuthenticate request received after successful authentication",
    )
