"""Legacy message sets (magic 0 and 1): layout, wrappers, errors, and conversion to and
from v2 batches."""

from __future__ import annotations

import struct
import zlib

import pytest

from gregor.protocol.compression import Compression, compress, decompress
from gregor.protocol.errors import (
    CorruptRecordError,
    EncodeError,
    InvalidRecordError,
    UnsupportedCompressionTypeError,
)
from gregor.protocol.legacy import (
    LegacyBatch,
    MessageSetBuilder,
    batches_to_message_set,
    encode_message,
    message_set_to_batch,
)
from gregor.protocol.records import (
    BatchBuilder,
    ControlType,
    Record,
    RecordBatch,
    TimestampType,
    build_control_batch,
    iter_batches,
)


def test_v0_message_layout() -> None:
    data = encode_message(42, 0, b"value", key=b"key")
    body = bytes((0, 0)) + struct.pack(">i", 3) + b"key" + struct.pack(">i", 5) + b"value"
    assert data == struct.pack(">qiI", 42, 4 + len(body), zlib.crc32(body)) + body


def test_v1_message_layout_has_a_timestamp_and_null_key() -> None:
    data = encode_message(7, 1, b"v", timestamp=1_234, attributes=0x08)
    body = bytes((1, 0x08)) + struct.pack(">q", 1_234) + b"\xff\xff\xff\xff"
    body += struct.pack(">i", 1) + b"v"
    assert data == struct.pack(">qiI", 7, 4 + len(body), zlib.crc32(body)) + body


def wrapper_parts(data: bytes) -> tuple[int, int, int, bytes]:
    """(offset, attributes, timestamp, decompressed inner set) of a v1 wrapper message."""
    offset, _, _, magic, attributes, timestamp = struct.unpack_from(">qiIbbq", data)
    assert magic == 1
    (size,) = struct.unpack_from(">i", data, 30)  # after offset..timestamp and a null key
    value = data[34 : 34 + size]
    return offset, attributes, timestamp, decompress(attributes & 7, value)


def inner_offsets(inner: bytes) -> list[int]:
    offsets, pos = [], 0
    while pos < len(inner):
        offset, size = struct.unpack_from(">qi", inner, pos)
        offsets.append(offset)
        pos += 12 + size
    return offsets


def test_v1_wrapper_has_relative_inner_offsets_and_the_last_offset() -> None:
    builder = MessageSetBuilder(1, Compression.GZIP, base_offset=100)
    for i in range(3):
        builder.append(b"m%d" % i, timestamp=10 + i)
    builder.append(b"gap", timestamp=5, offset=110)
    data = builder.build()
    offset, attributes, timestamp, inner = wrapper_parts(data)
    assert (offset, attributes, timestamp) == (110, Compression.GZIP, 12)
    assert inner_offsets(inner) == [0, 1, 2, 10]
    [batch] = iter_batches(data)
    assert [r.offset for r in batch] == [100, 101, 102, 110]
    assert (batch.header.base_offset, batch.header.last_offset) == (100, 110)


def test_v0_wrapper_has_absolute_inner_offsets() -> None:
    builder = MessageSetBuilder(0, Compression.SNAPPY, base_offset=100)
    builder.append(b"a")
    builder.append(b"b", key=b"k")
    data = builder.build()
    (offset,) = struct.unpack_from(">q", data)
    (size,) = struct.unpack_from(">i", data, 22)  # after offset..attributes and a null key
    inner = decompress(Compression.SNAPPY, data[26 : 26 + size])
    assert (offset, inner_offsets(inner)) == (101, [100, 101])
    [batch] = iter_batches(data)
    assert list(batch) == [Record(100, -1, None, b"a"), Record(101, -1, b"k", b"b")]
    assert batch.header.magic == 0 and batch.header.compression is Compression.SNAPPY


def test_log_append_time_wrapper_stamps_every_inner_message() -> None:
    builder = MessageSetBuilder(
        1, Compression.LZ4, base_offset=0, timestamp_type=TimestampType.LOG_APPEND_TIME
    )
    builder.append(b"a", timestamp=1)
    builder.append(b"b", timestamp=9)
    [batch] = iter_batches(builder.build())
    assert batch.header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert [r.timestamp for r in batch] == [9, 9]


def test_uncompressed_messages_are_one_batch_each() -> None:
    builder = MessageSetBuilder(1, base_offset=5)
    builder.append(b"x", timestamp=1)
    builder.append(None, key=b"tombstone", timestamp=2)
    batches = list(iter_batches(builder.build()))
    assert [b.header.records_count for b in batches] == [1, 1]
    assert [list(b) for b in batches] == [
        [Record(5, 1, None, b"x")],
        [Record(6, 2, b"tombstone", None)],
    ]
    header = batches[1].header
    assert (header.next_offset, header.producer_id, header.is_control) == (7, -1, False)
    with pytest.raises(InvalidRecordError, match="not a control batch"):
        batches[1].control_record()
    batches[1].verify_crc()


def test_legacy_batch_from_bytes_reads_one_entry() -> None:
    builder = MessageSetBuilder(1, base_offset=3)
    builder.append(b"x", timestamp=1)
    data = b"\x00" * 4 + builder.build()
    assert list(LegacyBatch.from_bytes(data, 4)) == [Record(3, 1, None, b"x")]


def corrupt(data: bytes, index: int, value: int, fix_crc: bool = True) -> bytes:
    out = bytearray(data)
    out[index] = value
    if fix_crc:
        struct.pack_into(">I", out, 12, zlib.crc32(bytes(out[16:])))
    return bytes(out)


PLAIN = encode_message(0, 1, b"value", key=b"key", timestamp=5)


@pytest.mark.parametrize(
    ("data", "error", "message"),
    [
        (corrupt(PLAIN, 40, 0, fix_crc=False), CorruptRecordError, "stored CRC"),
        (PLAIN[:-1], CorruptRecordError, "partial batch of 41 bytes"),
        (PLAIN[:10], CorruptRecordError, "partial batch of 10 bytes"),
        (corrupt(PLAIN, 11, 5), CorruptRecordError, "below the minimum"),
        (corrupt(PLAIN, 29, 50), CorruptRecordError, "does not fit"),  # key length
        (corrupt(PLAIN, 36, 1), CorruptRecordError, "4 bytes after its value"),  # value length
        (PLAIN[:11] + bytes([18]) + PLAIN[12:30], CorruptRecordError, "too short for magic 1"),
    ],
)
def test_malformed_messages(data: bytes, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        list(iter_batches(data, strict=True))


def wrapper_of(inner: bytes, codec: Compression = Compression.GZIP, magic: int = 1) -> bytes:
    return encode_message(9, magic, compress(codec, inner), timestamp=0, attributes=codec)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (wrapper_of(wrapper_of(encode_message(0, 1, b"x"))), "holds a compressed message"),
        (wrapper_of(encode_message(0, 0, b"x")), "magic 1 wrapper holds a magic 0"),
        (wrapper_of(b""), "holds no messages"),
        (encode_message(0, 1, None, attributes=Compression.GZIP), "null value"),
    ],
)
def test_invalid_wrappers(data: bytes, message: str) -> None:
    with pytest.raises(InvalidRecordError, match=message):
        list(iter_batches(data))


def test_wrapper_of_garbage_is_corrupt() -> None:
    data = encode_message(0, 1, b"not gzip", attributes=Compression.GZIP)
    with pytest.raises(CorruptRecordError, match="gzip"):
        list(iter_batches(data))
    truncated_inner = wrapper_of(encode_message(0, 1, b"x")[:-1])
    with pytest.raises(CorruptRecordError, match="truncated"):
        list(iter_batches(truncated_inner))


def test_builder_rejects_what_old_formats_cannot_hold() -> None:
    with pytest.raises(EncodeError, match="magic 0 or 1"):
        MessageSetBuilder(2)
    with pytest.raises(UnsupportedCompressionTypeError):
        MessageSetBuilder(1, Compression.ZSTD)
    builder = MessageSetBuilder(1)
    with pytest.raises(EncodeError, match="at least one"):
        builder.build()
    builder.append(b"a", offset=4)
    with pytest.raises(EncodeError, match="does not follow"):
        builder.append(b"b", offset=4)
    with pytest.raises(EncodeError, match="magic 0 or 1"):
        encode_message(0, 2, b"x")
    with pytest.raises(EncodeError):
        encode_message(0, 1, "text")  # type: ignore[arg-type]


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [Compression.NONE, Compression.GZIP, Compression.LZ4])
def test_produce_conversion_to_one_v2_batch(magic: int, codec: Compression) -> None:
    builder = MessageSetBuilder(magic, codec, base_offset=0)
    for i in range(5):
        builder.append(b"value %d" % i, key=b"k%d" % i, timestamp=1_000 + i)
    batch = RecordBatch.from_bytes(message_set_to_batch(builder.build()))
    batch.verify_crc()
    assert batch.header.compression is codec
    assert batch.header.records_count == 5
    stamp = (lambda i: 1_000 + i) if magic else (lambda i: -1)
    assert list(batch) == [Record(i, stamp(i), b"k%d" % i, b"value %d" % i) for i in range(5)]


def test_produce_conversion_with_an_explicit_codec_and_errors() -> None:
    builder = MessageSetBuilder(1, Compression.SNAPPY)
    builder.append(b"x", timestamp=3)
    converted = message_set_to_batch(builder.build(), Compression.ZSTD)
    assert RecordBatch.from_bytes(converted).header.compression is Compression.ZSTD
    with pytest.raises(InvalidRecordError, match="no messages"):
        message_set_to_batch(b"")
    with pytest.raises(InvalidRecordError, match="mixes"):
        message_set_to_batch(builder.build() + converted)
    with pytest.raises(CorruptRecordError, match="partial"):
        message_set_to_batch(builder.build()[:-3])


def compacted_batch(codec: Compression) -> bytes:
    builder = BatchBuilder(codec, base_offset=1000)
    builder.append(b"a", key=b"1", timestamp=50, headers=[("dropped", b"x")])
    builder.append(b"b", key=b"2", timestamp=60, offset_delta=7)
    return builder.build(last_offset_delta=9)


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [Compression.NONE, Compression.GZIP, Compression.SNAPPY])
def test_fetch_down_conversion_keeps_offsets(magic: int, codec: Compression) -> None:
    marker = build_control_batch(
        ControlType.COMMIT, producer_id=1, producer_epoch=0, coordinator_epoch=0, base_offset=1010
    )
    old = batches_to_message_set(compacted_batch(codec) + marker, magic)
    batches = list(iter_batches(old, strict=True))
    assert {b.header.magic for b in batches} == {magic}
    assert {b.header.compression for b in batches} == {codec}
    stamp = (lambda t: t) if magic else (lambda t: -1)
    assert [r for b in batches for r in b] == [
        Record(1000, stamp(50), b"1", b"a"),
        Record(1007, stamp(60), b"2", b"b"),
    ]


def test_down_conversion_of_zstd_needs_another_codec() -> None:
    data = compacted_batch(Compression.ZSTD)
    with pytest.raises(UnsupportedCompressionTypeError):
        batches_to_message_set(data, 1)
    old = batches_to_message_set(data, 1, Compression.GZIP)
    assert [b.header.compression for b in iter_batches(old)] == [Compression.GZIP]


def test_down_conversion_keeps_log_append_time() -> None:
    builder = BatchBuilder(Compression.GZIP, timestamp_type=TimestampType.LOG_APPEND_TIME)
    builder.append(b"a", timestamp=70)
    builder.append(b"b", timestamp=70)
    [batch] = iter_batches(batches_to_message_set(builder.build(), 1))
    assert batch.header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert [r.timestamp for r in batch] == [70, 70]


def test_down_conversion_skips_empty_batches() -> None:
    empty = BatchBuilder(base_offset=3).build(last_offset_delta=2)
    assert batches_to_message_set(empty, 1) == b""
