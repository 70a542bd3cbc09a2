"""Record batches, message format v2 (magic 2): read, check, patch and build them.

A batch is a 61-byte header followed by its records, compressed or not:

    offset  size  field
         0     8  base offset             patched in place by the leader (no re-CRC)
         8     4  batch length            bytes after this field
        12     4  partition leader epoch  patched in place by the leader (no re-CRC)
        16     1  magic (2)
        17     4  CRC-32C of bytes 21..end
        21     2  attributes              codec, timestamp type, transactional, control, ...
        23     4  last offset delta
        27     8  base timestamp          (the delete horizon when bit 6 is set)
        35     8  max timestamp
        43     8  producer id
        51     2  producer epoch
        53     4  base sequence
        57     4  records count
        61        records

Brokers and storage work on the header alone (`read_batch_header`, `scan_batches`, the
`patch_*` functions); records are decoded only when a `RecordBatch` is iterated. Legacy
message sets (magic 0 and 1) are in `gregor.protocol.legacy`; `iter_batches` reads both.

Record decoding and `stamp_produced_batch` have C implementations (`_records_speedups`) used
when it was built; the pure-Python ones below are the reference and the fallback
(`GREGOR_NO_EXTENSIONS=1` forces them).
"""

from __future__ import annotations

import struct
import time
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from enum import IntEnum
from typing import Any, Final, NamedTuple

import attrs
import crc32c

from gregor.protocol.compression import Compression, compress, decompress
from gregor.protocol.errors import (
    CorruptRecordError,
    DecodeError,
    EncodeError,
    InvalidRecordError,
)
from gregor.protocol.native import native_function
from gregor.protocol.primitives import (
    INT32,
    INT64,
    read_uvarint,
    read_uvarlong,
    read_varint,
    write_varint,
    write_varlong,
)

__all__ = [
    "BATCH_HEADER_SIZE",
    "LOG_OVERHEAD",
    "STAMPED_PREFIX",
    "BatchBuilder",
    "BatchHeader",
    "Compression",
    "ControlRecord",
    "ControlType",
    "CorruptRecordError",
    "InvalidRecordError",
    "Record",
    "RecordBatch",
    "RecordColumns",
    "TimestampType",
    "build_control_batch",
    "decode_columns",
    "iter_batches",
    "patch_base_offset",
    "patch_leader_epoch",
    "patch_log_append_time",
    "read_batch_header",
    "scan_batches",
    "stamp_produced_batch",
    "verify_crc",
]


class TimestampType(IntEnum):
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class ControlType(IntEnum):
    """The type in a control record's key: the end of a transaction."""

    ABORT = 0
    COMMIT = 1


LOG_OVERHEAD: Final = 12  # base offset (int64) + batch length (int32)
BATCH_HEADER_SIZE: Final = 61
MAGIC: Final = 2
NO_TIMESTAMP: Final = -1
NO_PRODUCER_ID: Final = -1
NO_SEQUENCE: Final = -1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_LEADER_EPOCH_AT = 12
_MAGIC_AT = 16
_CRC_AT = 17
_ATTRIBUTES_AT = 21  # the CRC covers the batch from here to its end
_MAX_TIMESTAMP_AT = 35
_MIN_BATCH_LENGTH = BATCH_HEADER_SIZE - LOG_OVERHEAD
_INT16 = struct.Struct(">h")
_CONTROL_KEY = struct.Struct(">hh")  # version, type
_CONTROL_VALUE = struct.Struct(">hi")  # version, coordinator epoch

_CODEC_MASK = 0x07
_LOG_APPEND_TIME_BIT = 0x08
_TRANSACTIONAL_BIT = 0x10
_CONTROL_BIT = 0x20
_DELETE_HORIZON_BIT = 0x40

Buffer = bytes | bytearray | memoryview


@attrs.frozen(slots=True)
class BatchHeader:
    """A batch header with nothing beyond it decoded."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """The whole batch in bytes, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> Compression:
        return Compression(self.attributes & _CODEC_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType((self.attributes & _LOG_APPEND_TIME_BIT) >> 3)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _CONTROL_BIT)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & _DELETE_HORIZON_BIT)

    @property
    def delete_horizon_ms(self) -> int | None:
        return self.base_timestamp if self.attributes & _DELETE_HORIZON_BIT else None

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    @property
    def last_sequence(self) -> int:
        """The sequence of the last record; sequences wrap from 2**31 - 1 to 0, as in Kafka."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % 0x80000000


def read_batch_header(buf: Buffer, pos: int = 0) -> BatchHeader:
    """The header of the batch at `pos`; checks the magic, that its sizes can be right and
    that its codec exists."""
    if pos < 0 or len(buf) - pos < BATCH_HEADER_SIZE:
        raise CorruptRecordError(
            f"batch header at {pos} is truncated: {max(len(buf) - pos, 0)} of 61 bytes"
        )
    fields = _HEADER.unpack_from(buf, pos)
    if fields[3] != MAGIC:
        raise CorruptRecordError(f"batch at {pos} has magic {fields[3]}, expected 2")
    if fields[1] < _MIN_BATCH_LENGTH:
        raise CorruptRecordError(f"batch at {pos} has length {fields[1]}, below the header's 49")
    if fields[12] < 0:
        raise CorruptRecordError(f"batch at {pos} has a negative records count {fields[12]}")
    if fields[5] & _CODEC_MASK > Compression.ZSTD:
        raise CorruptRecordError(f"batch at {pos} has unknown compression {fields[5] & 7}")
    return BatchHeader(*fields)


def verify_crc(buf: Buffer, pos: int, header: BatchHeader) -> None:
    """Check the CRC-32C of the batch at `pos` (attributes to end)."""
    end = pos + header.size
    if end > len(buf):
        raise CorruptRecordError(f"batch at {pos} is truncated: {header.size} bytes declared")
    actual = crc32c.crc32c(memoryview(buf)[pos + _ATTRIBUTES_AT : end])
    if actual != header.crc:
        raise CorruptRecordError(
            f"batch at {pos} is corrupt: stored CRC {header.crc:#010x}, computed {actual:#010x}"
        )


def scan_batches(
    buf: Buffer, pos: int = 0, end: int | None = None
) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of each complete batch in `buf[pos:end]`; stops before a partial one.

    A complete header that is malformed raises `CorruptRecordError`. CRCs are not checked.
    """
    limit = len(buf) if end is None else min(end, len(buf))
    while limit - pos >= BATCH_HEADER_SIZE:
        header = read_batch_header(buf, pos)
        size = header.batch_length + LOG_OVERHEAD
        if pos + size > limit:
            return
        yield pos, header
        pos += size


def patch_base_offset(buf: bytearray | memoryview, pos: int, base_offset: int) -> None:
    """Set the base offset of the batch at `pos`; the CRC does not cover it."""
    try:
        INT64.pack_into(buf, pos, base_offset)
    except struct.error as exc:
        raise EncodeError(f"cannot write base offset {base_offset} at {pos}: {exc}") from exc


def patch_leader_epoch(buf: bytearray | memoryview, pos: int, epoch: int) -> None:
    """Set the partition leader epoch of the batch at `pos`; the CRC does not cover it."""
    try:
        INT32.pack_into(buf, pos + _LEADER_EPOCH_AT, epoch)
    except struct.error as exc:
        raise EncodeError(f"cannot write leader epoch {epoch} at {pos}: {exc}") from exc


def patch_log_append_time(buf: bytearray | memoryview, pos: int, timestamp: int) -> None:
    """Mark the batch at `pos` as LogAppendTime with this max timestamp, and re-CRC it.

    Its records then all read as `timestamp`, as Kafka's do.
    """
    header = read_batch_header(buf, pos)
    end = pos + header.size
    if end > len(buf):
        raise CorruptRecordError(f"batch at {pos} is truncated: {header.size} bytes declared")
    _INT16.pack_into(buf, pos + _ATTRIBUTES_AT, header.attributes | _LOG_APPEND_TIME_BIT)
    INT64.pack_into(buf, pos + _MAX_TIMESTAMP_AT, timestamp)
    crc = crc32c.crc32c(memoryview(buf)[pos + _ATTRIBUTES_AT : end])
    struct.pack_into(">I", buf, pos + _CRC_AT, crc)


# What `stamp_produced_batch` returns: the batch's first STAMPED_PREFIX bytes with its base
# offset and leader epoch set (nothing after them changes, and the CRC covers none of them),
# then the header's last offset delta, base timestamp, max timestamp, producer id, producer
# epoch and base sequence.
StampedBatch = tuple[bytes, int, int, int, int, int, int]
STAMPED_PREFIX: Final = 16
_STAMPED_PREFIX = struct.Struct(">qii")  # base offset, batch length, leader epoch

_INT32_RANGE = range(-(2**31), 2**31)


def _stamp_produced_batch_py(
    buf: Buffer, base_offset: int, leader_epoch: int, max_size: int
) -> StampedBatch | None:
    size = len(buf)
    if size < BATCH_HEADER_SIZE or size > max_size or leader_epoch not in _INT32_RANGE:
        return None
    (given_offset, length, _epoch, magic, crc, attributes, delta, first_ts, max_ts, pid,
     producer_epoch, sequence, count) = _HEADER.unpack_from(buf, 0)  # fmt: skip
    if (
        length + LOG_OVERHEAD != size
        or magic != MAGIC
        or given_offset != 0
        or count < 1
        or delta != count - 1
        or attributes & _CONTROL_BIT
        or attributes & _CODEC_MASK > Compression.ZSTD
        or (attributes & _TRANSACTIONAL_BIT and pid < 0)
        or crc32c.crc32c(memoryview(buf)[_ATTRIBUTES_AT:]) != crc
    ):
        return None
    prefix = _STAMPED_PREFIX.pack(base_offset, length, leader_epoch)
    return prefix, delta, first_ts, max_ts, pid, producer_epoch, sequence


stamp_produced_batch: Callable[[Buffer, int, int, int], StampedBatch | None] = (
    native_function("stamp_produced_batch") or _stamp_produced_batch_py
)
"""`stamp_produced_batch(buf, base_offset, leader_epoch, max_size)`: the append fast path.

When `buf` is exactly one well-formed batch as a client produces it (magic 2, sizes that
agree, a known codec, base offset 0, `last_offset_delta == records_count - 1 >= 0`, not a
control batch, a producer id if transactional, at most `max_size` bytes, and a matching
CRC), its first `STAMPED_PREFIX` bytes with `base_offset` and `leader_epoch` set, and its
header's fields (see `StampedBatch`): the stamped batch is the prefix then
`buf[STAMPED_PREFIX:]`, with no copy of the body. The caller must not change `buf` until it
has written it. None otherwise: the caller then takes its checking path, which says what is
wrong. One C call where the extension was built.
"""


@attrs.frozen(slots=True)
class Record:
    """One record. `offset` and `timestamp` are absolute (the batch's deltas applied)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


@attrs.frozen(slots=True)
class ControlRecord:
    """The record of a control batch: a transaction marker."""

    type: ControlType
    coordinator_epoch: int


# Records are built by the decoder without attrs' generated __init__ (one Python call plus a
# setattr per field); the slot descriptors set the same fields directly.
_new_object = object.__new__
_RECORD_SLOTS = tuple(getattr(Record, name).__set__ for name in attrs.fields_dict(Record))
_NO_HEADERS: tuple[tuple[str, bytes | None], ...] = ()


def _read_headers(
    data: bytes, pos: int, count: int
) -> tuple[tuple[tuple[str, bytes | None], ...], int]:
    headers: list[tuple[str, bytes | None]] = []
    for _ in range(count):
        size, pos = read_varint(data, pos)
        if size < 0:
            raise CorruptRecordError(f"record header key has negative length {size}")
        end = pos + size
        if end > len(data):
            raise CorruptRecordError("record header key exceeds the record")
        try:
            name = data[pos:end].decode()
        except UnicodeDecodeError as exc:
            raise CorruptRecordError(f"record header key is not UTF-8: {exc}") from exc
        size, pos = read_varint(data, end)
        if size < 0:
            headers.append((name, None))
        else:
            end = pos + size
            if end > len(data):
                raise CorruptRecordError("record header value exceeds the record")
            headers.append((name, data[pos:end]))
            pos = end
    return tuple(headers), pos


def _decode_records_py(
    data: bytes, count: int, base_offset: int, base_timestamp: int, append_time: int | None
) -> list[Record]:
    """Every record of a batch's (uncompressed) records section, in one pass.

    `append_time` is the batch's max timestamp when it is LogAppendTime, else None. Varints of
    one byte (and two for lengths) are decoded inline: they are nearly every varint there is.
    """
    out: list[Record] = []
    add = out.append
    new = _new_object
    set_offset, set_timestamp, set_key, set_value, set_headers = _RECORD_SLOTS
    no_headers = _NO_HEADERS
    end = len(data)
    pos = 0
    try:
        for _ in range(count):
            # Each varint: one byte, two bytes (lengths of 64..8191, deltas past 63), or the
            # general reader; zigzag-decoded after.
            b = data[pos]
            if b < 0x80:
                pos += 1
            elif data[pos + 1] < 0x80:
                b = (b & 0x7F) | (data[pos + 1] << 7)
                pos += 2
            else:
                b, pos = read_uvarint(data, pos)
            size = (b >> 1) ^ -(b & 1)
            record_end = pos + size
            if size < 6 or record_end > end:
                raise CorruptRecordError(f"record of {size} bytes does not fit its batch")
            pos += 1  # the attributes byte, which no version defines
            b = data[pos]
            if b < 0x80:
                pos += 1
            elif data[pos + 1] < 0x80:
                b = (b & 0x7F) | (data[pos + 1] << 7)
                pos += 2
            else:
                b, pos = read_uvarlong(data, pos)
                if b >> 64:
                    raise CorruptRecordError("record timestamp delta exceeds 64 bits")
            timestamp_delta = (b >> 1) ^ -(b & 1)
            b = data[pos]
            if b < 0x80:
                pos += 1
            elif data[pos + 1] < 0x80:
                b = (b & 0x7F) | (data[pos + 1] << 7)
                pos += 2
            else:
                b, pos = read_uvarint(data, pos)
            offset_delta = (b >> 1) ^ -(b & 1)
            b = data[pos]
            if b < 0x80:
                pos += 1
            else:
                b, pos = read_uvarint(data, pos)
            size = (b >> 1) ^ -(b & 1)
            if size < 0:
                key = None
            else:
                key = data[pos : pos + size]
                pos += size
            b = data[pos]
            if b < 0x80:
                pos += 1
            elif data[pos + 1] < 0x80:
                b = (b & 0x7F) | (data[pos + 1] << 7)
                pos += 2
            else:
                b, pos = read_uvarint(data, pos)
            size = (b >> 1) ^ -(b & 1)
            if size < 0:
                value = None
            else:
                value = data[pos : pos + size]
                pos += size
            b = data[pos]
            if b == 0:
                headers = no_headers
                pos += 1
            else:
                size, pos = read_varint(data, pos)
                if size < 0 or size > record_end - pos:
                    raise CorruptRecordError(f"record declares {size} headers")
                headers, pos = _read_headers(data, pos, size)
            if pos != record_end:
                raise CorruptRecordError(
                    f"record declares {record_end - pos} bytes more than its fields hold"
                    if pos < record_end
                    else "record fields exceed its declared size"
                )
            record = new(Record)
            set_offset(record, base_offset + offset_delta)
            set_timestamp(
                record, base_timestamp + timestamp_delta if append_time is None else append_time
            )
            set_key(record, key)
            set_value(record, value)
            set_headers(record, headers)
            add(record)
    except IndexError:
        raise CorruptRecordError("record is truncated") from None
    except DecodeError as exc:
        if isinstance(exc, CorruptRecordError):
            raise
        raise CorruptRecordError(f"record is malformed: {exc}") from exc
    if pos != end:
        raise CorruptRecordError(f"batch holds {end - pos} bytes after its {count} records")
    return out


_decode_records = _decode_records_py
_decode_records_c: Any = None
_make_decoder = native_function("make_decoder")
if _make_decoder is not None:
    _decode_records_c = _make_decoder(Record, CorruptRecordError)
    _decode_records = _decode_records_c


class RecordBatch:
    """One batch; its records are decoded (and decompressed) once, on first iteration."""

    __slots__ = ("_records", "data", "header")

    def __init__(self, header: BatchHeader, data: Buffer) -> None:
        self.header = header
        self.data = data  # the whole batch, header included
        self._records: list[Record] | None = None

    @classmethod
    def from_bytes(cls, buf: Buffer, pos: int = 0) -> RecordBatch:
        header = read_batch_header(buf, pos)
        end = pos + header.size
        if end > len(buf):
            raise CorruptRecordError(
                f"batch at {pos} is truncated: {header.size} bytes declared, "
                f"{len(buf) - pos} present"
            )
        return cls(header, memoryview(buf)[pos:end])

    def verify_crc(self) -> None:
        verify_crc(self.data, 0, self.header)

    def records(self) -> list[Record]:
        """Every record, decoded on the first call."""
        if self._records is None:
            self._records = self._decode()
        return self._records

    def __iter__(self) -> Iterator[Record]:
        return iter(self._records if self._records is not None else self.records())

    def __len__(self) -> int:
        return self.header.records_count

    def _decode(self) -> list[Record]:
        data, count, base_offset, base_timestamp, append_time = self._section()
        if count * 7 > len(data):
            # Seven bytes is the smallest record: a forged count must not size anything.
            raise CorruptRecordError(f"batch declares {count} records in {len(data)} bytes")
        return _decode_records(data, count, base_offset, base_timestamp, append_time)

    def _section(self) -> tuple[bytes, int, int, int, int | None]:
        """What the record decoders take: the records section (decompressed), the count,
        base offset, base timestamp and the append time (LogAppendTime) or None."""
        header = self.header
        section = memoryview(self.data)[BATCH_HEADER_SIZE:]
        codec = header.attributes & _CODEC_MASK
        data = bytes(section) if codec == Compression.NONE else decompress(codec, section)
        append_time = header.max_timestamp if header.attributes & _LOG_APPEND_TIME_BIT else None
        return data, header.records_count, header.base_offset, header.base_timestamp, append_time

    def control_record(self) -> ControlRecord:
        """The transaction marker of a control batch."""
        if not self.header.is_control:
            raise InvalidRecordError("not a control batch")
        records = self.records()
        if len(records) != 1:
            raise InvalidRecordError(f"a control batch holds {len(records)} records, not 1")
        key, value = records[0].key, records[0].value
        if key is None or len(key) < _CONTROL_KEY.size:
            raise InvalidRecordError("control record key is shorter than 4 bytes")
        version, kind = _CONTROL_KEY.unpack_from(key)
        if version < 0:
            raise InvalidRecordError(f"control record key has version {version}")
        if kind not in (ControlType.ABORT, ControlType.COMMIT):
            raise InvalidRecordError(f"control record type {kind} is not a transaction marker")
        if value is None or len(value) < _CONTROL_VALUE.size:
            raise InvalidRecordError("transaction marker value is shorter than 6 bytes")
        _, coordinator_epoch = _CONTROL_VALUE.unpack_from(value)
        return ControlRecord(ControlType(kind), coordinator_epoch)

    def __repr__(self) -> str:
        h = self.header
        return (
            f"<{type(self).__name__} offsets {h.base_offset}..{h.last_offset} "
            f"count={h.records_count} magic={h.magic} {h.compression.name}>"
        )


def iter_batches(blob: Buffer | None, *, strict: bool = False) -> Iterator[RecordBatch]:
    """The batches of a records field: v2 batches, and legacy messages as batches too.

    A partial batch at the end (a fetch cut at its byte limit) ends the iteration, or raises
    `CorruptRecordError` when `strict` (a produce request must hold whole batches).
    """
    if blob is None:
        return
    view = memoryview(blob)
    pos = 0
    end = len(view)
    while pos < end:
        if end - pos < _MAGIC_AT + 1:
            break
        magic = view[pos + _MAGIC_AT]
        if magic == MAGIC:
            if end - pos < BATCH_HEADER_SIZE:
                break
            header = read_batch_header(view, pos)
            if pos + header.size > end:
                break
            yield RecordBatch(header, view[pos : pos + header.size])
            pos += header.size
        elif magic in (0, 1):
            from gregor.protocol import legacy  # it builds on this module

            size = legacy.entry_size(view, pos)
            if pos + size > end:
                break
            yield from legacy.entry_batches(view[pos : pos + size])
            pos += size
        else:
            raise CorruptRecordError(f"record data at {pos} has unknown magic {magic}")
    if strict and pos < end:
        raise CorruptRecordError(f"record data ends with a partial batch of {end - pos} bytes")


class RecordColumns(NamedTuple):
    """The records of many batches as columns, in Apache Arrow's memory layout: fixed-width
    values in native byte order, and per byte-string column a validity bitmap (bit i set:
    row i is not null, least significant bit first), int32 offsets (rows + 1) and the data.
    What `decode_columns` returns; Arrow (or numpy) wraps the buffers without a copy."""

    rows: int
    offsets: Buffer  # int64
    timestamps: Buffer  # int64, milliseconds
    timestamp_types: Buffer  # int32, TimestampType
    key_validity: Buffer
    key_nulls: int
    key_offsets: Buffer
    key_data: Buffer
    value_validity: Buffer
    value_nulls: int
    value_offsets: Buffer
    value_data: Buffer


# (data, count, base offset, base timestamp, append time, timestamp type, start, end)
Section = tuple[Buffer, int, int, int, int | None, int, int, int]


def decode_columns(batches: Iterable[tuple[RecordBatch, int, int]]) -> RecordColumns:
    """The records of `batches` with offsets in [start, end) of each, as columns (headers
    are checked, not kept). The records of v2 batches go to columns in C, without a Python
    object per record, when the extension was built; legacy batches through `records()`."""
    batches = list(batches)
    if _decode_columns_c is None or any(type(b) is not RecordBatch for b, _, _ in batches):
        return _collect_columns((b.records(), b.header.timestamp_type, s, e) for b, s, e in batches)
    return RecordColumns(*_decode_columns_c([_section_of(*item) for item in batches]))


def _section_of(batch: RecordBatch, start: int, end: int) -> Section:
    data, count, base_offset, base_timestamp, append_time = batch._section()
    kind = batch.header.timestamp_type
    return (data, count, base_offset, base_timestamp, append_time, kind, start, end)


def _decode_columns_py(sections: Iterable[Section]) -> RecordColumns:
    """The reference of the C decode_columns, on the same sections."""
    return _collect_columns(
        (_decode_records_py(bytes(data), count, offset, timestamp, append), kind, start, end)
        for data, count, offset, timestamp, append, kind, start, end in sections
    )


class _BinaryColumn:
    def __init__(self) -> None:
        self.validity = bytearray()
        self.nulls = 0
        self.offsets = array("i", [0])
        self.data = bytearray()

    def append(self, row: int, value: bytes | None) -> None:
        if row % 8 == 0:
            self.validity.append(0)
        if value is None:
            self.nulls += 1
        else:
            self.data += value
            self.validity[-1] |= 1 << row % 8
        self.offsets.append(len(self.data))


def _collect_columns(parts: Iterable[tuple[Iterable[Record], int, int, int]]) -> RecordColumns:
    """Columns of (records, timestamp type, start, end) parts, one record at a time."""
    offsets, timestamps, kinds = array("q"), array("q"), array("i")
    keys, values = _BinaryColumn(), _BinaryColumn()
    for records, kind, start, end in parts:
        for record in records:
            if record.offset not in _INT64_RANGE or record.timestamp not in _INT64_RANGE:
                raise CorruptRecordError("record offset or timestamp is outside int64")
            if not start <= record.offset < end:
                continue
            row = len(offsets)
            offsets.append(record.offset)
            timestamps.append(record.timestamp)
            kinds.append(kind)
            keys.append(row, record.key)
            values.append(row, record.value)
    return RecordColumns(
        len(offsets), offsets.tobytes(), timestamps.tobytes(), kinds.tobytes(),
        keys.validity, keys.nulls, keys.offsets.tobytes(), keys.data,
        values.validity, values.nulls, values.offsets.tobytes(), values.data,
    )  # fmt: skip


_INT64_RANGE = range(-(1 << 63), 1 << 63)
_decode_columns_c: Any = None
if _make_decoder is not None:  # make_decoder gave decode_columns its error class
    _decode_columns_c = native_function("decode_columns")


# Zigzag varints of the small non-negative numbers builders write on every record (deltas,
# lengths up to 8 KiB), precomputed: one list index instead of a loop.
_VARINT_CACHE = 8192


def _zigzag_varint(value: int) -> bytes:
    out = bytearray()
    write_varlong(out, value)
    return bytes(out)


_VARINTS = [_zigzag_varint(v) for v in range(_VARINT_CACHE)]
_NULL = b"\x01"  # zigzag(-1): a null key or value


def _record_body(
    timestamp_delta: int,
    offset_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Iterable[tuple[str, bytes | None]],
) -> bytes:
    """A record after its length: attributes, deltas, key, value, headers (any values)."""
    try:
        parts = [b"\x00", _zigzag_varint(timestamp_delta), _zigzag_varint(offset_delta)]
        parts += (_NULL,) if key is None else (_zigzag_varint(len(key)), key)
        parts += (_NULL,) if value is None else (_zigzag_varint(len(value)), value)
        parts.append(_encode_headers(headers) if headers else b"\x00")
        return b"".join(parts)
    except (TypeError, AttributeError) as exc:
        raise EncodeError(f"record key and value must be bytes, header names str: {exc}") from exc


def _append_record_py(
    buf: bytearray,
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes | None]],
) -> None:
    """Append one record, its length first: the reference of the C `append_record` (which
    takes no headers), and the encoder of everything that one leaves to it."""
    varints = _VARINTS
    body = None
    if timestamp_delta >= 0 and value is not None and not headers:
        # The common record, in one join: small deltas, lengths below 8 KiB, no headers.
        # Anything else (or a wrong type) fails over to the general encoder.
        try:
            if key is None:
                body = b"".join(
                    (b"\x00", varints[timestamp_delta], varints[offset_delta], b"\x01",
                     varints[len(value)], value, b"\x00")
                )  # fmt: skip
            else:
                body = b"".join(
                    (b"\x00", varints[timestamp_delta], varints[offset_delta], varints[len(key)],
                     key, varints[len(value)], value, b"\x00")
                )  # fmt: skip
        except (IndexError, TypeError):
            body = None
    if body is None:
        body = _record_body(timestamp_delta, offset_delta, key, value, headers)
    n = len(body)
    buf += varints[n] if n < _VARINT_CACHE else _zigzag_varint(n)
    buf += body


# One record without headers into a builder's buffer, in C when the extension is built.
_append_record: Callable[..., int | None] | None = native_function("append_record")


def _encode_headers(headers: Iterable[tuple[str, bytes | None]]) -> bytes:
    out = bytearray()
    items = list(headers)
    write_varint(out, len(items))
    for name, value in items:
        encoded = name.encode()
        write_varint(out, len(encoded))
        out += encoded
        if value is None:
            out += _NULL
        else:
            write_varint(out, len(value))
            out += value
    return bytes(out)


class BatchBuilder:
    """Writes one v2 batch. Offsets are deltas from `base_offset`; the broker sets it on append.

    The first record's timestamp is the base timestamp unless one is given (or a delete
    horizon, which the log cleaner sets and which then is the base).
    """

    __slots__ = (
        "_attributes",
        "_base_timestamp",
        "_buf",
        "_compression",
        "_count",
        "_last_delta",
        "_max_timestamp",
        "base_offset",
        "base_sequence",
        "partition_leader_epoch",
        "producer_epoch",
        "producer_id",
    )

    def __init__(
        self,
        compression: Compression = Compression.NONE,
        *,
        base_offset: int = 0,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = -1,
        base_sequence: int = NO_SEQUENCE,
        is_transactional: bool = False,
        partition_leader_epoch: int = -1,
        timestamp_type: TimestampType = TimestampType.CREATE_TIME,
        base_timestamp: int | None = None,
        delete_horizon_ms: int | None = None,
        is_control: bool = False,
    ) -> None:
        self._compression = Compression(compression)
        self.base_offset = base_offset
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.partition_leader_epoch = partition_leader_epoch
        self._attributes = (
            self._compression
            | (_LOG_APPEND_TIME_BIT if timestamp_type == TimestampType.LOG_APPEND_TIME else 0)
            | (_TRANSACTIONAL_BIT if is_transactional else 0)
            | (_CONTROL_BIT if is_control else 0)
            | (_DELETE_HORIZON_BIT if delete_horizon_ms is not None else 0)
        )
        self._base_timestamp = (
            delete_horizon_ms if delete_horizon_ms is not None else base_timestamp
        )
        self._max_timestamp = NO_TIMESTAMP
        self._buf = bytearray()
        self._count = 0
        self._last_delta = -1

    def __len__(self) -> int:
        return self._count

    @property
    def is_transactional(self) -> bool:
        return bool(self._attributes & _TRANSACTIONAL_BIT)

    @is_transactional.setter
    def is_transactional(self, value: bool) -> None:
        """Set by a producer once it knows the batch belongs to a transaction."""
        self._attributes = (self._attributes & ~_TRANSACTIONAL_BIT) | (
            _TRANSACTIONAL_BIT if value else 0
        )

    def append(
        self,
        value: bytes | None,
        key: bytes | None = None,
        headers: Sequence[tuple[str, bytes | None]] = (),
        timestamp: int | None = None,
        offset_delta: int | None = None,
    ) -> None:
        """Add a record. `offset_delta` defaults to one past the previous record's."""
        if (
            not headers
            and offset_delta is None
            and timestamp is not None
            and _builder_append is not None
            and _builder_append(self, value, key, timestamp)
        ):
            return  # its C twin did what follows
        if timestamp is None:
            timestamp = time.time_ns() // 1_000_000
        base = self._base_timestamp
        if base is None:
            base = self._base_timestamp = timestamp
        if offset_delta is None:
            offset_delta = self._last_delta + 1
        elif offset_delta <= self._last_delta:
            raise EncodeError(
                f"offset delta {offset_delta} does not follow the previous {self._last_delta}"
            )
        delta = timestamp - base
        if (
            headers
            or _append_record is None
            or _append_record(self._buf, offset_delta, delta, key, value) is None
        ):
            _append_record_py(self._buf, offset_delta, delta, key, value, headers)
        self._last_delta = offset_delta
        self._count += 1
        if timestamp > self._max_timestamp:
            self._max_timestamp = timestamp

    def estimated_size(self) -> int:
        """The batch's size if built now, uncompressed (an upper bound for compressed ones)."""
        return BATCH_HEADER_SIZE + len(self._buf)

    def build(self, last_offset_delta: int | None = None) -> bytes:
        """The batch. `last_offset_delta` may exceed the last record's (the cleaner keeps a
        batch's last offset when its tail records were removed, or an empty batch).

        An empty batch is written as Kafka writes one: uncompressed, with `base_timestamp`
        as its max timestamp and -1 as its base (unless it carries a delete horizon).
        """
        if last_offset_delta is None:
            if not self._count:
                raise EncodeError("an empty batch needs an explicit last_offset_delta")
            last_offset_delta = self._last_delta
        elif last_offset_delta < self._last_delta:
            raise EncodeError(
                f"last offset delta {last_offset_delta} is before the last record's "
                f"{self._last_delta}"
            )
        base_timestamp = NO_TIMESTAMP if self._base_timestamp is None else self._base_timestamp
        attributes = self._attributes
        if self._count:
            max_timestamp = self._max_timestamp
            records = (
                bytes(self._buf)
                if self._compression == Compression.NONE
                else compress(self._compression, self._buf)
            )
        else:
            # As Kafka's cleaner writes an empty batch: uncompressed, the timestamp as max.
            max_timestamp = base_timestamp
            if not attributes & _DELETE_HORIZON_BIT:
                base_timestamp = NO_TIMESTAMP
            attributes &= ~_CODEC_MASK
            records = b""
        try:
            header = _HEADER.pack(
                self.base_offset,
                _MIN_BATCH_LENGTH + len(records),
                self.partition_leader_epoch,
                MAGIC,
                0,
                attributes,
                last_offset_delta,
                base_timestamp,
                max_timestamp,
                self.producer_id,
                self.producer_epoch,
                self.base_sequence,
                self._count,
            )
        except struct.error as exc:
            raise EncodeError(f"batch header field out of range: {exc}") from exc
        crc = crc32c.crc32c(records, crc32c.crc32c(header[_ATTRIBUTES_AT:]))
        return b"".join(
            (header[:_CRC_AT], crc.to_bytes(4, "big"), header[_ATTRIBUTES_AT:], records)
        )


def _bind_builder() -> (
    Callable[[BatchBuilder, bytes | None, bytes | None, int], bool | None] | None
):
    bind = native_function("bind_builder")
    return None if bind is None else bind(BatchBuilder)


# BatchBuilder.append of a record without headers, in C (through the class's slots).
_builder_append = _bind_builder()


def build_control_batch(
    control_type: ControlType,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    base_offset: int = 0,
    timestamp: int | None = None,
    partition_leader_epoch: int = -1,
) -> bytes:
    """A transaction marker: a transactional control batch of one record."""
    builder = BatchBuilder(
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
        partition_leader_epoch=partition_leader_epoch,
    )
    builder.append(
        _CONTROL_VALUE.pack(0, coordinator_epoch),
        key=_CONTROL_KEY.pack(0, ControlType(control_type)),
        timestamp=timestamp,
    )
    return builder.build()
