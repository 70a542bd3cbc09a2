"""Wire primitives shared by the generated codecs and the record formats.

The generated codecs inline the common cases (fixed-width runs through one precompiled
`struct.Struct`, one-byte varints); these functions are the general paths they fall back to.
All readers take `(buf, pos)` and return `(value, new_pos)`.
"""

from __future__ import annotations

import struct
from typing import Protocol

from gregor.protocol.errors import DecodeError, EncodeError

INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
UINT16 = struct.Struct(">H")
UINT32 = struct.Struct(">I")
FLOAT64 = struct.Struct(">d")


def read_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    """An unsigned LEB128 varint of at most 5 bytes (32 bits), as Kafka's compact lengths."""
    result = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise DecodeError("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            if result > 0xFFFFFFFF:
                raise DecodeError("varint exceeds 32 bits")
            return result, pos
        shift += 7
        if shift > 28:
            raise DecodeError("varint longer than 5 bytes")


def read_uvarlong(buf: bytes, pos: int) -> tuple[int, int]:
    """An unsigned LEB128 varint of at most 10 bytes (64 bits)."""
    result = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise DecodeError("truncated varlong")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise DecodeError("varlong longer than 10 bytes")


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """A zigzag-encoded signed 32-bit varint (record fields)."""
    value, pos = read_uvarint(buf, pos)
    return (value >> 1) ^ -(value & 1), pos


def read_varlong(buf: bytes, pos: int) -> tuple[int, int]:
    """A zigzag-encoded signed 64-bit varint (record timestamps)."""
    value, pos = read_uvarlong(buf, pos)
    return (value >> 1) ^ -(value & 1), pos


def write_uvarint(out: bytearray, value: int) -> None:
    if value < 0x80:
        if value < 0:
            raise EncodeError(f"unsigned varint cannot hold {value}")
        out.append(value)
        return
    if value > 0xFFFFFFFFFFFFFFFF:
        raise EncodeError(f"varint cannot hold {value}")
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def write_varint(out: bytearray, value: int) -> None:
    """Zigzag signed 32-bit varint."""
    if not -0x80000000 <= value <= 0x7FFFFFFF:
        raise EncodeError(f"varint out of range: {value}")
    write_uvarint(out, ((value << 1) ^ (value >> 31)) & 0xFFFFFFFF)


def write_varlong(out: bytearray, value: int) -> None:
    """Zigzag signed 64-bit varint."""
    if not -0x8000000000000000 <= value <= 0x7FFFFFFFFFFFFFFF:
        raise EncodeError(f"varlong out of range: {value}")
    write_uvarint(out, ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


def uvarint_size(value: int) -> int:
    size = 1
    while value >= 0x80:
        value >>= 7
        size += 1
    return size


def varint_size(value: int) -> int:
    return uvarint_size(((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


class FileRegion(Protocol):
    """Bytes that stay in a file until they are sent (the broker's zero-copy fetch path).

    A records field may hold one of these instead of bytes; `Writer` then splits the encoded
    message into chunks around it, and the sender passes `fileno()`, `position` and
    `len(region)` to `os.sendfile`. (Bytes have no `fileno`, so the two never mix up.)
    """

    @property
    def position(self) -> int: ...

    def __len__(self) -> int: ...

    def fileno(self) -> int: ...


class Writer(bytearray):
    """The output buffer of the generated encoders.

    It is a bytearray, so encoders append with `+=`. A `FileRegion` in a records field ends the
    current chunk; `chunks()` then returns bytes and regions in order.
    """

    __slots__ = ("_chunks",)

    def __init__(self) -> None:
        super().__init__()
        self._chunks: list[bytes | FileRegion] = []

    def region(self, region: FileRegion) -> None:
        if self:
            self._chunks.append(bytes(self))
            del self[:]
        self._chunks.append(region)

    def chunks(self) -> list[bytes | FileRegion]:
        out = [*self._chunks, bytes(self)] if self else list(self._chunks)
        return out

    def has_regions(self) -> bool:
        return bool(self._chunks)
