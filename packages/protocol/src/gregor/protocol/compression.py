"""The compression codecs of Kafka record data: none, gzip, snappy, lz4 and zstd.

What each writer puts on the wire, and what this module therefore reads:

- gzip: a gzip stream (the Java client, librdkafka and kafka-python all write one member;
  concatenated members are read too).
- snappy: the Java client (snappy-java's stream) and kafka-python write the *xerial*
  framing: an 8-byte magic, two int32 versions, then blocks of int32 length + raw snappy.
  librdkafka writes one raw snappy block. Both are read; the xerial framing is written.
- lz4: the LZ4 frame format. The Java client writes independent 64 KiB blocks and no content
  size; other writers may link blocks or store sizes and checksums, all of which are read.
  Kafka's clients before 0.10 computed the frame header checksum over the magic number too
  (a bug kept for magic 0 messages): such frames are accepted, and written for magic 0.
- zstd: zstd frames (one or several).

Decompression is bounded: output beyond `max_size` raises instead of exhausting memory, so
a forged size field or a decompression bomb costs an exception, not the process.

gzip is in the standard library. The other codecs' libraries are optional extras
(`gregor-protocol[snappy]`, `[lz4]`, `[zstd]`, `[all]`, the same on gregor-client): each
is imported on first use, and a codec whose library is missing raises
`UnsupportedCompressionTypeError` naming the extra to install.
"""

from __future__ import annotations

import functools
import importlib
import struct
import zlib
from enum import IntEnum
from typing import Any

from gregor.protocol.errors import CorruptRecordError, UnsupportedCompressionTypeError


class Compression(IntEnum):
    """The codec ids of the low three attribute bits of batches and legacy messages."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


# Larger than any batch a broker accepts after decompression; a bound, not a tuning knob.
MAX_DECOMPRESSED_SIZE = 256 * 1024 * 1024

_GZIP_LEVEL = 6  # Java's Deflater.DEFAULT_COMPRESSION, also librdkafka's default
_ZSTD_LEVEL = 3  # zstd-jni's and librdkafka's default

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024  # snappy-java's default block size
_INT32 = struct.Struct(">i")

LZ4_MAGIC = b"\x04\x22\x4d\x18"
_LZ4_BLOCK_64KB = 0x40  # BD byte: maximum block size 64 KiB
_LZ4_FLG_JAVA = 0x60  # FLG byte: version 01, independent blocks, no sizes or checksums
_LZ4_BLOCK_SIZES = {4: 64 * 1024, 5: 256 * 1024, 6: 1024 * 1024, 7: 4 * 1024 * 1024}
_LZ4_UNCOMPRESSED = 0x80000000
_LZ4_WINDOW = 64 * 1024  # linked blocks may refer this far back
_U32LE = struct.Struct("<I")
_ZSTD_STEP = 4096

# The library of each optional codec: (module, distribution, extra).
_LIBRARIES = {
    "snappy": ("snappy", "python-snappy", "snappy"),
    "lz4": ("lz4.block", "lz4", "lz4"),
    "zstd": ("zstandard", "zstandard", "zstd"),
}


@functools.cache
def _library(codec: str) -> Any:
    module, distribution, extra = _LIBRARIES[codec]
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise UnsupportedCompressionTypeError(
            f"{codec} compression needs the {distribution} package, which is not installed: "
            f"pip install 'gregor-client[{extra}]' (or gregor-protocol[{extra}])"
        ) from exc


def require(codec: Compression | int) -> None:
    """Raise `UnsupportedCompressionTypeError` (naming the extra to install) when the
    library of `codec` is missing; a producer checks its compression.type up front."""
    name = Compression(codec).name.lower()
    if name in _LIBRARIES:
        _library(name)


def compress(
    codec: Compression | int, data: bytes | bytearray | memoryview, magic: int = 2
) -> bytes:
    """Compress `data` as the Java client does for a batch (or a legacy message of `magic`)."""
    if codec == Compression.NONE:
        return bytes(data)
    if codec == Compression.GZIP:
        out = zlib.compressobj(_GZIP_LEVEL, zlib.DEFLATED, 31)
        return out.compress(data) + out.flush()
    if codec == Compression.SNAPPY:
        return _xerial_compress(data)
    if codec == Compression.LZ4:
        return _lz4_compress(data, broken_header_checksum=magic == 0)
    if codec == Compression.ZSTD:
        if magic < 2:
            raise UnsupportedCompressionTypeError("zstd needs message format v2 (magic 2)")
        compressed: bytes = _library("zstd").ZstdCompressor(level=_ZSTD_LEVEL).compress(data)
        return compressed
    raise UnsupportedCompressionTypeError(f"unknown compression codec {codec}")


def decompress(
    codec: Compression | int,
    data: bytes | bytearray | memoryview,
    max_size: int = MAX_DECOMPRESSED_SIZE,
) -> bytes:
    """The uncompressed bytes; `CorruptRecordError` for data the codec cannot read."""
    try:
        if codec == Compression.GZIP:
            return _gzip_decompress(data, max_size)
        if codec == Compression.SNAPPY:
            return _snappy_decompress(data, max_size)
        if codec == Compression.LZ4:
            return _lz4_decompress(data, max_size)
        if codec == Compression.ZSTD:
            return _zstd_decompress(data, max_size)
        if codec == Compression.NONE:
            return bytes(data)
    except (CorruptRecordError, UnsupportedCompressionTypeError):
        raise
    except Exception as exc:  # each library has its own error types (and some raise bare ones)
        name = Compression(codec).name.lower()
        raise CorruptRecordError(f"{name} data does not decompress: {exc}") from exc
    raise CorruptRecordError(f"unknown compression codec {codec}")


def _too_large(max_size: int) -> CorruptRecordError:
    return CorruptRecordError(f"decompressed data exceeds {max_size} bytes")


def _gzip_decompress(data: bytes | bytearray | memoryview, max_size: int) -> bytes:
    out = bytearray()
    rest = bytes(data)
    while True:
        inflater = zlib.decompressobj(47)  # gzip or zlib header, detected
        out += inflater.decompress(rest, max_size + 1 - len(out))
        if len(out) > max_size:
            raise _too_large(max_size)
        if not inflater.eof:
            if inflater.unconsumed_tail:
                raise _too_large(max_size)
            raise CorruptRecordError("gzip data is truncated")
        rest = inflater.unused_data
        if not rest:
            return bytes(out)


def _snappy_block(block: bytes | memoryview, room: int, max_size: int) -> bytes:
    # The block starts with its uncompressed length; check it before anything allocates it.
    length = shift = 0
    for i in range(5):
        if i >= len(block):
            raise CorruptRecordError("snappy block is truncated")
        byte = block[i]
        length |= (byte & 0x7F) << shift
        if byte < 0x80:
            break
        shift += 7
    else:
        raise CorruptRecordError("snappy block length is not a valid varint")
    if length > room:
        raise _too_large(max_size)
    result: bytes = _library("snappy").uncompress(bytes(block))
    return result


def _snappy_decompress(data: bytes | bytearray | memoryview, max_size: int) -> bytes:
    view = memoryview(data)
    if bytes(view[:8]) != XERIAL_MAGIC:
        return _snappy_block(view, max_size, max_size)
    if len(view) < 16:
        raise CorruptRecordError("xerial snappy header is truncated")
    out = bytearray()
    pos = 16
    while pos < len(view):
        if pos + 4 > len(view):
            raise CorruptRecordError("xerial snappy block length is truncated")
        (size,) = _INT32.unpack_from(view, pos)
        pos += 4
        if size < 0 or pos + size > len(view):
            raise CorruptRecordError(f"xerial snappy block of {size} bytes exceeds the data")
        out += _snappy_block(view[pos : pos + size], max_size - len(out), max_size)
        pos += size
    return bytes(out)


def _xerial_compress(data: bytes | bytearray | memoryview) -> bytes:
    snappy = _library("snappy")
    view = memoryview(data)
    parts = [_XERIAL_HEADER]
    for start in range(0, len(view), _XERIAL_BLOCK):
        block: bytes = snappy.compress(bytes(view[start : start + _XERIAL_BLOCK]))
        parts += (_INT32.pack(len(block)), block)
    return b"".join(parts)


_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (32 - bits))) & _M32


def xxh32(data: bytes, seed: int = 0) -> int:
    """XXH32, which the LZ4 frame header checksum is built from (inputs of a few bytes)."""
    n = len(data)
    pos = 0
    if n >= 16:
        lanes = [(seed + _P1 + _P2) & _M32, (seed + _P2) & _M32, seed, (seed - _P1) & _M32]
        while pos + 16 <= n:
            for i in range(4):
                (word,) = _U32LE.unpack_from(data, pos)
                lanes[i] = _rotl((lanes[i] + word * _P2) & _M32, 13) * _P1 & _M32
                pos += 4
        acc = _rotl(lanes[0], 1) + _rotl(lanes[1], 7) + _rotl(lanes[2], 12) + _rotl(lanes[3], 18)
    else:
        acc = seed + _P5
    acc = (acc + n) & _M32
    while pos + 4 <= n:
        (word,) = _U32LE.unpack_from(data, pos)
        acc = _rotl((acc + word * _P3) & _M32, 17) * _P4 & _M32
        pos += 4
    while pos < n:
        acc = _rotl((acc + data[pos] * _P5) & _M32, 11) * _P1 & _M32
        pos += 1
    acc = ((acc ^ (acc >> 15)) * _P2) & _M32
    acc = ((acc ^ (acc >> 13)) * _P3) & _M32
    return acc ^ (acc >> 16)


def _lz4_header_checksum(header: bytes) -> int:
    """The HC byte: the second byte of XXH32 over the descriptor (after the magic)."""
    return (xxh32(header[4:]) >> 8) & 0xFF


def _lz4_compress(data: bytes | bytearray | memoryview, broken_header_checksum: bool) -> bytes:
    header = LZ4_MAGIC + bytes((_LZ4_FLG_JAVA, _LZ4_BLOCK_64KB))
    checksum = (
        (xxh32(header) >> 8) & 0xFF if broken_header_checksum else _lz4_header_checksum(header)
    )
    parts = [header, bytes((checksum,))]
    lz4_block = _library("lz4")
    view = memoryview(data)
    for start in range(0, len(view), _LZ4_WINDOW):
        chunk = bytes(view[start : start + _LZ4_WINDOW])
        block = lz4_block.compress(chunk, store_size=False)
        if len(block) >= len(chunk):  # incompressible: stored as is, flagged by the high bit
            parts += (_U32LE.pack(len(chunk) | _LZ4_UNCOMPRESSED), chunk)
        else:
            parts += (_U32LE.pack(len(block)), block)
    parts.append(b"\x00\x00\x00\x00")
    return b"".join(parts)


def _lz4_decompress(data: bytes | bytearray | memoryview, max_size: int) -> bytes:
    view = memoryview(data)
    if len(view) < 7 or bytes(view[:4]) != LZ4_MAGIC:
        raise CorruptRecordError("lz4 data does not start with the frame magic")
    flg, bd = view[4], view[5]
    if flg >> 6 != 1:
        raise CorruptRecordError(f"lz4 frame version {flg >> 6} is not supported")
    block_max = _LZ4_BLOCK_SIZES.get((bd >> 4) & 7)
    if block_max is None:
        raise CorruptRecordError(f"lz4 frame has an invalid block size id in BD {bd:#x}")
    linked = not flg & 0x20
    block_checksums = bool(flg & 0x10)
    pos = 14 if flg & 0x08 else 6  # an 8-byte content size may follow BD
    if flg & 0x01:
        pos += 4  # dictionary id
    if pos >= len(view):
        raise CorruptRecordError("lz4 frame header is truncated")
    header = bytes(view[:pos])
    # Old Kafka clients hashed the magic too; accept that checksum as well as the right one.
    if view[pos] not in (_lz4_header_checksum(header), (xxh32(header) >> 8) & 0xFF):
        raise CorruptRecordError("lz4 frame header checksum does not match")
    pos += 1
    lz4_block = _library("lz4")
    out = bytearray()
    while True:
        if pos + 4 > len(view):
            raise CorruptRecordError("lz4 frame is truncated before its end mark")
        (size,) = _U32LE.unpack_from(view, pos)
        pos += 4
        if size == 0:
            break
        stored = bool(size & _LZ4_UNCOMPRESSED)
        size &= ~_LZ4_UNCOMPRESSED
        if size > block_max or pos + size > len(view):
            raise CorruptRecordError(f"lz4 block of {size} bytes exceeds the frame")
        block = view[pos : pos + size]
        pos += size + (4 if block_checksums else 0)
        if stored:
            out += block
        elif linked and out:
            window = bytes(out[-_LZ4_WINDOW:])
            out += lz4_block.decompress(block, uncompressed_size=block_max, dict=window)
        else:
            out += lz4_block.decompress(block, uncompressed_size=block_max)
        if len(out) > max_size:
            raise _too_large(max_size)
    # A content checksum (4 bytes) may follow the end mark; the CRC of the batch covers it.
    return bytes(out)


def _zstd_decompress(data: bytes | bytearray | memoryview, max_size: int) -> bytes:
    # Input goes in small steps so that output is checked against the bound as it grows
    # (a step of compressed input can expand a thousandfold, never without limit).
    zstandard = _library("zstd")
    view = memoryview(data)
    out = bytearray()
    pos = 0
    while pos < len(view):  # one frame per round: several frames may follow each other
        frame = zstandard.ZstdDecompressor().decompressobj()
        while not frame.eof:
            if pos >= len(view):
                raise CorruptRecordError("zstd frame is truncated")
            step = view[pos : pos + _ZSTD_STEP]
            pos += len(step)
            out += frame.decompress(step)
            if len(out) > max_size:
                raise _too_large(max_size)
        pos -= len(frame.unused_data)
    return bytes(out)
