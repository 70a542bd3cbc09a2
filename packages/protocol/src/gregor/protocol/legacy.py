"""Legacy message sets (magic 0 and 1): read, write, and convert to and from v2 batches.

A message set is a run of entries, each `offset int64, size int32, message`, where

    message v0: crc uint32, magic int8, attributes int8, key bytes, value bytes
    message v1: crc uint32, magic int8, attributes int8, timestamp int64, key bytes, value bytes

and the CRC is CRC-32 (not CRC-32C) of magic..end. A compressed message ("wrapper") holds a
compressed message set ("inner messages") as its value; its offset is that of the last inner
message. Inner offsets are absolute in v0, and relative (0, 1, ...) in v1, where the absolute
offset is `wrapper offset - last relative offset + relative offset`.

Readers see each outer message as one batch (`LegacyBatch`, a `RecordBatch` whose header is
synthesized with magic 0 or 1), as Kafka's own clients do. The broker converts with
`message_set_to_batch` (Produce v0-v2) and `batches_to_message_set` (Fetch v0-v3).
"""

from __future__ import annotations

import struct
import time
import zlib
from collections.abc import Iterator
from typing import Final

from gregor.protocol.compression import Compression, compress, decompress
from gregor.protocol.errors import (
    CorruptRecordError,
    EncodeError,
    InvalidRecordError,
    UnsupportedCompressionTypeError,
)
from gregor.protocol.records import (
    LOG_OVERHEAD,
    NO_TIMESTAMP,
    BatchBuilder,
    BatchHeader,
    Buffer,
    Record,
    RecordBatch,
    TimestampType,
    iter_batches,
)

_ENTRY = struct.Struct(">qi")  # offset, message size
_PREFIX = struct.Struct(">Ibb")  # crc, magic, attributes
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
# crc, magic, attributes, key length, value length (+ a timestamp in v1)
MESSAGE_OVERHEAD: Final = {0: 14, 1: 22}
_CODEC_MASK = 0x07
_LOG_APPEND_TIME_BIT = 0x08


def entry_size(buf: Buffer, pos: int) -> int:
    """The size of the message set entry at `pos`, its offset and size fields included."""
    if len(buf) - pos < LOG_OVERHEAD:
        raise CorruptRecordError(f"message set entry at {pos} is truncated")
    size: int = _ENTRY.unpack_from(buf, pos)[1]
    if size < MESSAGE_OVERHEAD[0]:
        raise CorruptRecordError(f"message at {pos} has size {size}, below the minimum 14")
    return LOG_OVERHEAD + size


class _Message:
    """One parsed message (internal: what a wrapper or a plain message carries)."""

    __slots__ = ("attributes", "crc", "key", "magic", "offset", "timestamp", "value")

    def __init__(self, view: memoryview, pos: int) -> None:
        size = entry_size(view, pos)
        end = pos + size
        if end > len(view):
            raise CorruptRecordError(f"message at {pos} is truncated: {size} bytes declared")
        self.offset, _ = _ENTRY.unpack_from(view, pos)
        self.crc, self.magic, self.attributes = _PREFIX.unpack_from(view, pos + LOG_OVERHEAD)
        if self.magic not in MESSAGE_OVERHEAD:
            raise CorruptRecordError(f"message at {pos} has magic {self.magic}, expected 0 or 1")
        if size - LOG_OVERHEAD < MESSAGE_OVERHEAD[self.magic]:
            raise CorruptRecordError(f"message at {pos} is too short for magic {self.magic}")
        actual = zlib.crc32(view[pos + LOG_OVERHEAD + 4 : end])
        if actual != self.crc:
            raise CorruptRecordError(
                f"message at {pos} is corrupt: stored CRC {self.crc:#010x}, computed {actual:#010x}"
            )
        p = pos + LOG_OVERHEAD + 6
        self.timestamp = NO_TIMESTAMP
        if self.magic == 1:
            (self.timestamp,) = _INT64.unpack_from(view, p)
            p += 8
        self.key, p = _read_bytes(view, p, end)
        self.value, p = _read_bytes(view, p, end)
        if p != end:
            raise CorruptRecordError(f"message at {pos} has {end - p} bytes after its value")

    @property
    def codec(self) -> int:
        return int(self.attributes) & _CODEC_MASK


def _read_bytes(view: memoryview, pos: int, end: int) -> tuple[bytes | None, int]:
    if end - pos < 4:
        raise CorruptRecordError("message is truncated in a length field")
    (size,) = _INT32.unpack_from(view, pos)
    pos += 4
    if size == -1:
        return None, pos
    if size < 0 or pos + size > end:
        raise CorruptRecordError(f"message field of {size} bytes does not fit the message")
    return bytes(view[pos : pos + size]), pos + size


def _inner_messages(wrapper: _Message) -> list[_Message]:
    if wrapper.value is None:
        raise InvalidRecordError("a compressed message has a null value")
    data = memoryview(decompress(wrapper.codec, wrapper.value))
    messages = []
    pos = 0
    while pos < len(data):
        message = _Message(data, pos)
        if message.codec:
            raise InvalidRecordError("a compressed message holds a compressed message")
        if message.magic != wrapper.magic:
            raise InvalidRecordError(
                f"a magic {wrapper.magic} wrapper holds a magic {message.magic} message"
            )
        messages.append(message)
        pos += entry_size(data, pos)
    if not messages:
        raise InvalidRecordError("a compressed message holds no messages")
    return messages


class LegacyBatch(RecordBatch):
    """One outer message of a message set, read as a batch: a wrapper's inner messages, or
    the message itself. Its header is synthesized (magic 0 or 1, no producer fields)."""

    __slots__ = ()

    @classmethod
    def from_bytes(cls, buf: Buffer, pos: int = 0) -> LegacyBatch:
        view = memoryview(buf)
        return cls._from_message(_Message(view, pos), view[pos : pos + entry_size(view, pos)])

    @classmethod
    def _from_message(cls, outer: _Message, data: memoryview) -> LegacyBatch:
        append_time = outer.magic == 1 and bool(outer.attributes & _LOG_APPEND_TIME_BIT)
        if not outer.codec:
            records = [Record(outer.offset, outer.timestamp, outer.key, outer.value)]
        else:
            inner = _inner_messages(outer)
            # v1 inner offsets are relative, unless the wrapper has no offset yet (a
            # producer's: the result is negative), which Kafka's readers leave as it is.
            shift = outer.offset - inner[-1].offset if outer.magic == 1 else 0
            shift = max(shift, 0)
            records = [
                Record(
                    m.offset + shift,
                    outer.timestamp if append_time else m.timestamp,
                    m.key,
                    m.value,
                )
                for m in inner
            ]
        timestamps = [r.timestamp for r in records]
        header = BatchHeader(
            base_offset=records[0].offset,
            batch_length=len(data) - LOG_OVERHEAD,
            partition_leader_epoch=-1,
            magic=outer.magic,
            crc=outer.crc,
            attributes=outer.attributes & (_CODEC_MASK | _LOG_APPEND_TIME_BIT),
            last_offset_delta=max(outer.offset, records[-1].offset) - records[0].offset,
            base_timestamp=timestamps[0],
            max_timestamp=outer.timestamp if outer.magic == 1 else max(timestamps),
            producer_id=-1,
            producer_epoch=-1,
            base_sequence=-1,
            records_count=len(records),
        )
        batch = cls(header, data)
        batch._records = records
        return batch

    def verify_crc(self) -> None:
        _Message(memoryview(self.data), 0)

    def _decode(self) -> list[Record]:
        return self.from_bytes(self.data).records()


def entry_batches(entry: memoryview) -> Iterator[LegacyBatch]:
    """The batch of one message set entry (the whole entry is in `entry`)."""
    yield LegacyBatch.from_bytes(entry)


def _bytes_field(value: bytes | None) -> bytes:
    return b"\xff\xff\xff\xff" if value is None else _INT32.pack(len(value)) + value


def encode_message(
    offset: int,
    magic: int,
    value: bytes | None,
    key: bytes | None = None,
    timestamp: int = NO_TIMESTAMP,
    attributes: int = 0,
) -> bytes:
    """One message set entry."""
    if magic not in MESSAGE_OVERHEAD:
        raise EncodeError(f"legacy messages have magic 0 or 1, not {magic}")
    try:
        stamp = _INT64.pack(timestamp) if magic == 1 else b""
        body = b"".join((bytes((magic, attributes)), stamp, _bytes_field(key), _bytes_field(value)))
        return _ENTRY.pack(offset, 4 + len(body)) + zlib.crc32(body).to_bytes(4, "big") + body
    except (struct.error, TypeError, ValueError) as exc:
        raise EncodeError(f"cannot encode a message: {exc}") from exc


class MessageSetBuilder:
    """Writes a magic 0 or 1 message set; compressed, it is one wrapper message."""

    __slots__ = ("_messages", "base_offset", "compression", "magic", "timestamp_type")

    def __init__(
        self,
        magic: int,
        compression: Compression = Compression.NONE,
        *,
        base_offset: int = 0,
        timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    ) -> None:
        if magic not in MESSAGE_OVERHEAD:
            raise EncodeError(f"legacy messages have magic 0 or 1, not {magic}")
        if compression == Compression.ZSTD:
            raise UnsupportedCompressionTypeError("zstd needs message format v2 (magic 2)")
        self.magic = magic
        self.compression = Compression(compression)
        self.base_offset = base_offset
        self.timestamp_type = timestamp_type
        self._messages: list[tuple[int, bytes | None, bytes | None, int]] = []

    def append(
        self,
        value: bytes | None,
        key: bytes | None = None,
        timestamp: int | None = None,
        offset: int | None = None,
    ) -> None:
        """Add a message; `offset` (absolute) defaults to the one after the previous."""
        if offset is None:
            offset = self._messages[-1][0] + 1 if self._messages else self.base_offset
        elif self._messages and offset <= self._messages[-1][0]:
            raise EncodeError(f"offset {offset} does not follow {self._messages[-1][0]}")
        if timestamp is None:
            timestamp = time.time_ns() // 1_000_000 if self.magic else NO_TIMESTAMP
        self._messages.append((offset, key, value, timestamp))

    def build(self) -> bytes:
        if not self._messages:
            raise EncodeError("a message set needs at least one message")
        append_time = self.magic == 1 and self.timestamp_type == TimestampType.LOG_APPEND_TIME
        flag = _LOG_APPEND_TIME_BIT if append_time else 0
        if self.compression == Compression.NONE:
            return b"".join(
                encode_message(offset, self.magic, value, key, timestamp, flag)
                for offset, key, value, timestamp in self._messages
            )
        first = self._messages[0][0]
        last = self._messages[-1][0]
        inner = b"".join(
            encode_message(offset - first if self.magic else offset, self.magic, value, key, ts)
            for offset, key, value, ts in self._messages
        )
        return encode_message(
            last,
            self.magic,
            compress(self.compression, inner, self.magic),
            None,
            max(m[3] for m in self._messages),
            self.compression | flag,
        )


def message_set_to_batch(blob: Buffer, compression: Compression | None = None) -> bytes:
    """One v2 batch holding every message of a legacy message set (a Produce v0-v2 request).

    Offsets become deltas from the first message's; the codec is `compression`, else the
    first wrapper's. v0 messages have no timestamp and keep none (-1).
    """
    batches = list(iter_batches(blob, strict=True))
    if not batches:
        raise InvalidRecordError("the message set holds no messages")
    if any(batch.header.magic > 1 for batch in batches):
        raise InvalidRecordError("a message set mixes legacy messages and v2 batches")
    if compression is None:
        codecs = [b.header.compression for b in batches if b.header.compression]
        compression = codecs[0] if codecs else Compression.NONE
    base = batches[0].header.base_offset
    builder = BatchBuilder(compression, base_offset=base)
    for batch in batches:
        for record in batch:
            builder.append(
                record.value,
                record.key,
                timestamp=record.timestamp,
                offset_delta=record.offset - base,
            )
    return builder.build()


def batches_to_message_set(
    blob: Buffer, magic: int, compression: Compression | None = None
) -> bytes:
    """A record data blob down-converted to magic 0 or 1 (a Fetch v0-v3 response).

    Offsets are kept; headers are dropped (old formats have none), so are v0 timestamps
    and control batches. A compressed batch becomes one wrapper message of its codec (or
    `compression`); zstd has no legacy form and raises `UnsupportedCompressionTypeError`.
    """
    out = []
    for batch in iter_batches(blob):
        header = batch.header
        if header.is_control:
            continue
        codec = header.compression if compression is None else Compression(compression)
        builder = MessageSetBuilder(magic, codec, timestamp_type=header.timestamp_type)
        records = batch.records()
        if not records:
            continue
        for record in records:
            builder.append(record.value, record.key, record.timestamp, record.offset)
        out.append(builder.build())
    return b"".join(out)
