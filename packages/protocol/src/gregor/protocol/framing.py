"""Request and response frames: size prefix, headers, and Kafka's rules for choosing them.

- A request header is v2 when the request's version is flexible, else v1 (v0 only for
  ControlledShutdown v0). Its client_id keeps the int16 length even in v2.
- A response header is v1 when the response's version is flexible, else v0; ApiVersions
  responses always use v0, so a client can read one whatever version it asked for.
- A broker answers an ApiVersions request of a version it does not support with error 35
  (UNSUPPORTED_VERSION) in a v0 body; `decode_response` reads such an answer.

`FrameReader` splits a byte stream into frames without doing any I/O itself.
"""

from __future__ import annotations

from typing import Annotated

import attrs

from gregor.protocol.apis import REQUESTS, RESPONSES, ApiKey
from gregor.protocol.apis.api_versions import ApiVersionsResponse
from gregor.protocol.errors import (
    DecodeError,
    EncodeError,
    ErrorCode,
    FrameTooLargeError,
    InvalidRequestError,
    UnsupportedVersionError,
)
from gregor.protocol.primitives import INT16, INT32, FileRegion, Writer
from gregor.protocol.schema import Int16, Int32, Message, Request, Response, V


class RequestHeader(Message, valid="0-2", flexible="2+"):
    request_api_key: Int16 = 0
    request_api_version: Int16 = 0
    correlation_id: Int32 = 0
    client_id: Annotated[str | None, V("1+", flexible="none", ignorable=True)] = ""


class ResponseHeader(Message, valid="0-1", flexible="1+"):
    correlation_id: Int32 = 0


_PEEK = INT16  # api_key and api_version are the first two int16s of every request header


def request_header_version(api_key: int, api_version: int) -> int:
    request = REQUESTS.get(api_key)
    if request is not None and request.is_flexible(api_version):
        return 2
    if api_key == ApiKey.CONTROLLED_SHUTDOWN and api_version == 0:
        return 0
    return 1


def response_header_version(api_key: int, api_version: int) -> int:
    if api_key == ApiKey.API_VERSIONS:
        return 0
    response = RESPONSES.get(api_key)
    return 1 if response is not None and response.is_flexible(api_version) else 0


@attrs.frozen
class RequestPeek:
    """What can be read of any request frame, even one whose body cannot be decoded."""

    api_key: int
    api_version: int
    correlation_id: int


def peek_request(frame: bytes) -> RequestPeek:
    """API key, version and correlation id: the first 8 bytes of every request header."""
    if len(frame) < 8:
        raise DecodeError(f"request frame of {len(frame)} bytes is too short for a header")
    api_key = _PEEK.unpack_from(frame, 0)[0]
    api_version = _PEEK.unpack_from(frame, 2)[0]
    return RequestPeek(api_key, api_version, INT32.unpack_from(frame, 4)[0])


def encode_request(
    request: Request, version: int, correlation_id: int, client_id: str | None = None
) -> bytes:
    """A whole request frame, size prefix included."""
    out = Writer()
    out += b"\0\0\0\0"
    header = RequestHeader(request.api_key, version, correlation_id, client_id)
    header.encode_into(out, request_header_version(request.api_key, version))
    request.encode_into(out, version)
    return _whole_frame(out, request)


def decode_request_header(frame: bytes) -> tuple[RequestHeader, int]:
    """The header of a request frame (size prefix removed) and where its body starts."""
    peek = peek_request(frame)
    version = request_header_version(peek.api_key, peek.api_version)
    return RequestHeader.decode_prefix(frame, version)


def decode_request(frame: bytes, *, strict: bool = False) -> tuple[RequestHeader, Request]:
    """Header and body of a request frame (size prefix removed).

    Bytes after the fields of the request's version are ignored, as Kafka ignores them,
    unless `strict`. Raises InvalidRequestError for an unknown API key,
    UnsupportedVersionError for a version the schema does not have, and DecodeError for
    bytes that do not parse.
    """
    frame = bytes(frame)
    header, pos = decode_request_header(frame)
    request = REQUESTS.get(header.request_api_key)
    if request is None:
        raise InvalidRequestError(f"unknown API key {header.request_api_key}")
    return header, request.decode(frame, header.request_api_version, pos, strict=strict)


def encode_response_chunks(
    response: Response, version: int, correlation_id: int
) -> list[bytes | FileRegion]:
    """A whole response frame, size prefix included, as bytes and file regions in order."""
    out = Writer()
    out += b"\0\0\0\0"
    header_version = response_header_version(response.api_key, version)
    ResponseHeader(correlation_id).encode_into(out, header_version)
    size_at = len(out)
    response.encode_into(out, version)
    chunks = out.chunks()
    size = sum(map(len, chunks)) - 4
    first = chunks[0]
    assert isinstance(first, bytes) and len(first) >= size_at
    chunks[0] = INT32.pack(size) + first[4:]
    return chunks


def encode_response(response: Response, version: int, correlation_id: int) -> bytes:
    """A whole response frame, size prefix included (no file regions)."""
    out = Writer()
    out += b"\0\0\0\0"
    ResponseHeader(correlation_id).encode_into(
        out, response_header_version(response.api_key, version)
    )
    response.encode_into(out, version)
    return _whole_frame(out, response)


def _whole_frame(out: Writer, message: Message) -> bytes:
    """The frame in `out` as bytes, its size prefix filled in."""
    if out.has_regions():
        # The bytes before the region have left `out` already: a frame made of what is
        # left would be short and mislabeled. Regions travel only as chunks.
        raise EncodeError(
            f"{type(message).__name__} holds a file region: use encode_response_chunks()"
        )
    INT32.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def decode_response(
    frame: bytes, api_key: int, api_version: int, *, strict: bool = False
) -> tuple[int, Response]:
    """Correlation id and body of a response frame (size prefix removed).

    As with requests, bytes after the fields of the version are ignored unless `strict`
    (our tests decode strictly, so a response we encode wrongly fails loudly).
    """
    frame = bytes(frame)
    response = RESPONSES.get(api_key)
    if response is None:
        raise InvalidRequestError(f"unknown API key {api_key}")
    header, pos = ResponseHeader.decode_prefix(frame, response_header_version(api_key, api_version))
    try:
        return header.correlation_id, response.decode(frame, api_version, pos, strict=strict)
    except DecodeError:
        if api_key != ApiKey.API_VERSIONS or api_version == 0:
            raise
        # A broker that does not support this ApiVersions version answers with a v0 body.
        fallback = ApiVersionsResponse.decode(frame, 0, pos, strict=strict)
        if fallback.error_code != ErrorCode.UNSUPPORTED_VERSION:
            raise
        return header.correlation_id, fallback


class FrameReader:
    """Splits a stream of bytes into size-prefixed frames.

    `feed()` what arrives; `next_frame()` returns the next whole frame (without its size
    prefix) or None. A size above `max_frame_size`, or a negative size, raises
    FrameTooLargeError / DecodeError before any of that frame's bytes are buffered.
    """

    __slots__ = ("_buf", "_need", "_pos", "max_frame_size")

    def __init__(self, max_frame_size: int) -> None:
        self.max_frame_size = max_frame_size
        self._buf = bytearray()
        self._pos = 0
        self._need = -1  # size of the frame being read, -1 while reading a size prefix

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        self._buf += data

    def buffered(self) -> int:
        return len(self._buf) - self._pos

    def next_frame(self) -> bytes | None:
        buf, pos = self._buf, self._pos
        if self._need < 0:
            if len(buf) - pos < 4:
                return None
            size = INT32.unpack_from(buf, pos)[0]
            if size < 0:
                raise DecodeError(f"negative frame size {size}")
            if size > self.max_frame_size:
                raise FrameTooLargeError(
                    f"frame of {size} bytes exceeds the limit of {self.max_frame_size}"
                )
            self._need = size
            pos = self._pos = pos + 4
        if len(buf) - pos < self._need:
            return None
        end = pos + self._need
        frame = bytes(buf[pos:end])
        self._need = -1
        if end == len(buf):
            buf.clear()
            self._pos = 0
        elif end > 65536 and end * 2 > len(buf):
            del buf[:end]  # compact once the consumed prefix dominates the buffer
            self._pos = 0
        else:
            self._pos = end
        return frame


__all__ = [
    "FrameReader",
    "RequestHeader",
    "RequestPeek",
    "ResponseHeader",
    "UnsupportedVersionError",
    "decode_request",
    "decode_request_header",
    "decode_response",
    "encode_request",
    "encode_response",
    "encode_response_chunks",
    "peek_request",
    "request_header_version",
    "response_header_version",
]
