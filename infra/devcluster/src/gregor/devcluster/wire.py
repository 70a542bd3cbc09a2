"""One Kafka request on a fresh plain socket: readiness checks and scripts, no client."""

from __future__ import annotations

import socket

from gregor.protocol.apis.api_versions import ApiVersionsRequest, ApiVersionsResponse
from gregor.protocol.errors import ProtocolError
from gregor.protocol.framing import decode_response, encode_request
from gregor.protocol.schema import Request, Response


def send_request(
    host: str, port: int, request: Request, version: int, timeout: float = 5.0
) -> Response:
    """The decoded response to `request`.

    Raises OSError when the broker cannot be reached or hangs up, and the protocol's errors
    for a response that does not decode.
    """
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(encode_request(request, version, 1, "devcluster"))
        data = b""
        while len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "big"):
            chunk = s.recv(1 << 20)
            if not chunk:
                raise ConnectionError(f"{host}:{port} closed the connection before answering")
            data += chunk
    _, response = decode_response(data[4:], request.api_key, version)
    return response


def api_versions(host: str, port: int, timeout: float = 2.0) -> ApiVersionsResponse | None:
    """A broker's API versions, or None if it does not answer."""
    try:
        response = send_request(host, port, ApiVersionsRequest(), 0, timeout)
    except (OSError, ProtocolError):
        return None
    return response if isinstance(response, ApiVersionsResponse) else None
