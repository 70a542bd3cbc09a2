"""The pieces of Kafka's protocol `Schema` types that MM2's record keys and values use:
INT16, INT32 and INT64 big-endian, STRING as an INT16 length and UTF-8 bytes."""

from __future__ import annotations

import struct


class FormatError(ValueError):
    """A key or value that is not in MM2's format."""


_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


def string(text: str) -> bytes:
    data = text.encode()
    if len(data) > 0x7FFF:
        raise ValueError(f"string of {len(data)} bytes is too long for a Kafka STRING")
    return _I16.pack(len(data)) + data


class Reader:
    """Reads the fields of one key or value in order; anything short or negative is corrupt."""

    def __init__(self, data: bytes, what: str) -> None:
        self.data = memoryview(data)
        self.pos = 0
        self.what = what

    def _take(self, size: int) -> memoryview:
        if size < 0 or self.pos + size > len(self.data):
            raise FormatError(f"{self.what} is too short ({len(self.data)} bytes)")
        chunk = self.data[self.pos : self.pos + size]
        self.pos += size
        return chunk

    def int16(self) -> int:
        return int(_I16.unpack(self._take(2))[0])

    def int32(self) -> int:
        return int(_I32.unpack(self._take(4))[0])

    def int64(self) -> int:
        return int(_I64.unpack(self._take(8))[0])

    def string(self) -> str:
        size = self.int16()
        try:
            return bytes(self._take(size)).decode()
        except UnicodeDecodeError as exc:
            raise FormatError(f"{self.what}: a string is not UTF-8 ({exc})") from None


def int16(value: int) -> bytes:
    return _I16.pack(value)


def int32(value: int) -> bytes:
    return _I32.pack(value)


def int64(value: int) -> bytes:
    return _I64.pack(value)
