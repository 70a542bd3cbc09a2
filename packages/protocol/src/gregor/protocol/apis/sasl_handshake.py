"""SaslHandshake (key 17): the client proposes a SASL mechanism."""

from __future__ import annotations

from gregor.protocol.schema import Int16, Request, Response


class SaslHandshakeRequest(Request, api_key=17, valid="0-1", flexible="none"):
    mechanism: str = ""


class SaslHandshakeResponse(Response, api_key=17, valid="0-1", flexible="none"):
    error_code: Int16 = 0
    mechanisms: list[str] = []
