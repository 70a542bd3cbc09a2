"""Record batches v2: the header layout, CRC, in-place patches, scanning, records, builder."""

from __future__ import annotations

import struct

import crc32c
import pytest

from gregor.protocol import records
from gregor.protocol.compression import Compression
from gregor.protocol.errors import CorruptRecordError, DecodeError, EncodeError, InvalidRecordError
from gregor.protocol.legacy import MessageSetBuilder
from gregor.protocol.records import (
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    BatchBuilder,
    ControlRecord,
    ControlType,
    Record,
    RecordBatch,
    TimestampType,
    build_control_batch,
    iter_batches,
    patch_base_offset,
    patch_leader_epoch,
    patch_log_append_time,
    read_batch_header,
    scan_batches,
    verify_crc,
)

DECODERS = [records._decode_records_py]
if records._decode_records_c is not None:
    DECODERS.append(records._decode_records_c)


@pytest.fixture(params=DECODERS, ids=lambda f: "c" if f is records._decode_records_c else "py")
def decoder(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> object:
    """Runs a test once per record decoder (pure Python, and C when it was built)."""
    monkeypatch.setattr(records, "_decode_records", request.param)
    return request.param


def sample_batch(codec: Compression = Compression.NONE, **kwargs: object) -> bytes:
    builder = BatchBuilder(codec, **kwargs)  # type: ignore[arg-type]
    builder.append(b"v0", key=b"k0", timestamp=1_000)
    builder.append(None, key=b"k1", timestamp=1_005, headers=[("trace", b"t1"), ("empty", None)])
    builder.append(b"v2", timestamp=999)
    return builder.build()


def test_header_fields_sit_where_kafka_puts_them() -> None:
    data = sample_batch(
        base_offset=0x0102030405060708,
        producer_id=77,
        producer_epoch=3,
        base_sequence=41,
        is_transactional=True,
        partition_leader_epoch=9,
    )
    assert struct.unpack_from(">q", data, 0)[0] == 0x0102030405060708
    assert struct.unpack_from(">i", data, 8)[0] == len(data) - LOG_OVERHEAD
    assert struct.unpack_from(">i", data, 12)[0] == 9
    assert data[16] == 2
    assert struct.unpack_from(">I", data, 17)[0] == crc32c.crc32c(data[21:])
    assert struct.unpack_from(">h", data, 21)[0] == 0x10  # transactional, no codec
    assert struct.unpack_from(">iqqqhii", data, 23) == (2, 1_000, 1_005, 77, 3, 41, 3)
    header = read_batch_header(data)
    assert header.size == len(data)
    assert header.last_offset == 0x0102030405060708 + 2
    assert header.next_offset == 0x0102030405060708 + 3
    assert header.is_transactional and not header.is_control
    assert header.last_sequence == 43
    assert header.compression is Compression.NONE
    assert header.timestamp_type is TimestampType.CREATE_TIME


@pytest.mark.parametrize("codec", list(Compression))
def test_round_trip_with_every_codec(codec: Compression, decoder: object) -> None:
    data = sample_batch(codec, base_offset=100)
    batch = RecordBatch.from_bytes(data)
    batch.verify_crc()
    assert batch.header.compression is codec
    assert list(batch) == [
        Record(100, 1_000, b"k0", b"v0", ()),
        Record(101, 1_005, b"k1", None, (("trace", b"t1"), ("empty", None))),
        Record(102, 999, None, b"v2", ()),
    ]
    assert batch.header.max_timestamp == 1_005


def test_large_values_and_many_records_use_multibyte_varints(decoder: object) -> None:
    builder = BatchBuilder(Compression.ZSTD, base_timestamp=10**12)
    values = [bytes([i % 256]) * (i * 37) for i in range(300)]
    for i, value in enumerate(values):
        builder.append(value, key=str(i).encode() * 50, timestamp=10**12 + i * 1000 - 5000)
    batch = RecordBatch.from_bytes(builder.build())
    got = list(batch)
    assert [r.value for r in got] == values
    assert [r.offset for r in got] == list(range(300))
    assert [r.timestamp for r in got] == [10**12 + i * 1000 - 5000 for i in range(300)]
    assert got[299].key == b"299" * 50


def test_offset_deltas_kept_for_the_log_cleaner(decoder: object) -> None:
    builder = BatchBuilder(base_offset=1000)
    builder.append(b"a", timestamp=5, offset_delta=3)
    builder.append(b"b", timestamp=6, offset_delta=200)
    data = builder.build(last_offset_delta=250)
    header = read_batch_header(data)
    assert (header.base_offset, header.last_offset, header.records_count) == (1000, 1250, 2)
    assert [r.offset for r in RecordBatch.from_bytes(data)] == [1003, 1200]


def test_empty_batch_keeps_last_offset_and_timestamp() -> None:
    builder = BatchBuilder(Compression.ZSTD, base_offset=7, base_timestamp=1234, producer_id=5)
    data = builder.build(last_offset_delta=4)
    header = read_batch_header(data)
    assert (header.records_count, header.next_offset, header.size) == (0, 12, 61)
    assert (header.base_timestamp, header.max_timestamp) == (-1, 1234)
    assert header.compression is Compression.NONE
    assert list(RecordBatch.from_bytes(data)) == []
    verify_crc(data, 0, header)


def test_builder_rejects_what_cannot_be_written() -> None:
    builder = BatchBuilder()
    with pytest.raises(EncodeError, match="explicit last_offset_delta"):
        builder.build()
    builder.append(b"x", offset_delta=5)
    with pytest.raises(EncodeError, match="does not follow"):
        builder.append(b"y", offset_delta=5)
    with pytest.raises(EncodeError, match="before the last record"):
        builder.build(last_offset_delta=4)
    with pytest.raises(EncodeError, match="must be bytes"):
        builder.append("text")  # type: ignore[arg-type]
    with pytest.raises(EncodeError, match="must be bytes"):
        builder.append(b"v", key=5)  # type: ignore[arg-type]
    with pytest.raises(EncodeError, match="header names str"):
        builder.append(b"v", headers=[(5, b"x")])  # type: ignore[list-item]
    assert len(builder) == 1
    with pytest.raises(EncodeError, match="out of range"):
        BatchBuilder(producer_epoch=1 << 20).build(last_offset_delta=0)


def test_estimated_size_is_the_uncompressed_size() -> None:
    builder = BatchBuilder()
    assert builder.estimated_size() == BATCH_HEADER_SIZE
    for i in range(10):
        builder.append(b"x" * i, timestamp=1)
    assert builder.estimated_size() == len(builder.build())


def test_delete_horizon_is_the_base_timestamp(decoder: object) -> None:
    builder = BatchBuilder(delete_horizon_ms=50_000)
    builder.append(None, key=b"tombstone", timestamp=40_000)
    data = builder.build()
    header = read_batch_header(data)
    assert header.has_delete_horizon and header.delete_horizon_ms == 50_000
    assert header.base_timestamp == 50_000
    assert [r.timestamp for r in RecordBatch.from_bytes(data)] == [40_000]


def test_patches_leave_the_crc_valid() -> None:
    buf = bytearray(sample_batch() + sample_batch())
    second = read_batch_header(buf).size
    patch_base_offset(buf, second, 5000)
    patch_leader_epoch(buf, second, 12)
    header = read_batch_header(buf, second)
    assert (header.base_offset, header.partition_leader_epoch) == (5000, 12)
    verify_crc(buf, second, header)
    assert [r.offset for r in RecordBatch.from_bytes(buf, second)] == [5000, 5001, 5002]
    with pytest.raises(EncodeError):
        patch_base_offset(buf, second, 1 << 64)


def test_log_append_time_overrides_every_record_timestamp(decoder: object) -> None:
    buf = bytearray(sample_batch(Compression.GZIP))
    patch_log_append_time(buf, 0, 77_777)
    header = read_batch_header(buf)
    verify_crc(buf, 0, header)
    assert header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert header.max_timestamp == 77_777
    assert [r.timestamp for r in RecordBatch.from_bytes(buf)] == [77_777] * 3


def test_crc_covers_attributes_to_the_end() -> None:
    data = sample_batch()
    for index in (21, 40, len(data) - 1):
        flipped = bytearray(data)
        flipped[index] ^= 0x01
        with pytest.raises(CorruptRecordError, match="stored CRC"):
            verify_crc(flipped, 0, read_batch_header(flipped))
    with pytest.raises(CorruptRecordError, match="truncated"):
        verify_crc(data[:-1], 0, read_batch_header(data))


def test_scan_batches_stops_before_a_partial_batch() -> None:
    one, two = sample_batch(base_offset=0), sample_batch(Compression.LZ4, base_offset=3)
    blob = one + two + two[:30]
    assert [(pos, h.base_offset) for pos, h in scan_batches(blob)] == [(0, 0), (len(one), 3)]
    blob = one + two + two[:-1]
    assert len(list(scan_batches(blob))) == 2
    assert [pos for pos, _ in scan_batches(blob, len(one), len(one) + len(two))] == [len(one)]
    assert list(scan_batches(blob, 0, len(one) - 1)) == []


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({16: 3}, "magic 3"),
        ({8: 0, 9: 0, 10: 0, 11: 48}, "below the header"),
        ({57: 0xFF}, "negative records count"),
        ({22: 0x05}, "unknown compression 5"),
    ],
)
def test_malformed_headers(patch: dict[int, int], message: str) -> None:
    data = bytearray(sample_batch())
    for index, byte in patch.items():
        data[index] = byte
    with pytest.raises(CorruptRecordError, match=message):
        read_batch_header(data)
    with pytest.raises(CorruptRecordError, match=message):
        list(scan_batches(data))


def test_truncated_header_and_batch() -> None:
    data = sample_batch()
    with pytest.raises(CorruptRecordError, match="truncated"):
        read_batch_header(data[:60])
    with pytest.raises(CorruptRecordError, match="truncated"):
        RecordBatch.from_bytes(data[:-1])


def rebuild_crc(data: bytearray) -> bytes:
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    return bytes(data)


@pytest.mark.parametrize(
    ("count", "message"),
    [(4, "truncated|does not fit"), (2, "after its 2 records"), (10**6, "declares 1000000")],
)
def test_records_count_must_match_the_records(count: int, message: str, decoder: object) -> None:
    data = bytearray(sample_batch())
    struct.pack_into(">i", data, 57, count)
    batch = RecordBatch.from_bytes(rebuild_crc(data))
    with pytest.raises(CorruptRecordError, match=message):
        list(batch)


def test_record_length_must_match_its_fields(decoder: object) -> None:
    builder = BatchBuilder()
    builder.append(b"value", timestamp=0)
    data = bytearray(builder.build())
    data[61] += 2  # the record's length varint (zigzag, one byte): two bytes longer
    with pytest.raises(CorruptRecordError):
        list(RecordBatch.from_bytes(rebuild_crc(data)))


def test_header_key_must_be_utf8(decoder: object) -> None:
    builder = BatchBuilder()
    builder.append(b"v", timestamp=0, headers=[("é", b"x")])
    data = bytearray(builder.build())
    at = bytes(data).index("é".encode())
    data[at] = 0xFF
    with pytest.raises(CorruptRecordError, match="UTF-8"):
        list(RecordBatch.from_bytes(rebuild_crc(data)))


def test_garbage_compressed_payload_is_corrupt(decoder: object) -> None:
    data = bytearray(sample_batch(Compression.SNAPPY))
    data[70:80] = b"\xff" * 10
    with pytest.raises(CorruptRecordError):
        list(RecordBatch.from_bytes(rebuild_crc(data)))


@pytest.mark.parametrize("control_type", list(ControlType))
def test_control_batches(control_type: ControlType) -> None:
    data = build_control_batch(
        control_type,
        producer_id=3000,
        producer_epoch=4,
        coordinator_epoch=17,
        base_offset=55,
        timestamp=9_999,
    )
    batch = RecordBatch.from_bytes(data)
    batch.verify_crc()
    header = batch.header
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.records_count) == (3000, 4, 1)
    assert batch.control_record() == ControlRecord(control_type, 17)
    [record] = batch
    assert record.key == struct.pack(">hh", 0, control_type)
    assert record.value == struct.pack(">hi", 0, 17)
    assert (record.offset, record.timestamp) == (55, 9_999)


def control_like(key: bytes | None, value: bytes | None, count: int = 1) -> RecordBatch:
    builder = BatchBuilder(is_control=True, is_transactional=True)
    for _ in range(count):
        builder.append(value, key=key, timestamp=0)
    return RecordBatch.from_bytes(builder.build())


@pytest.mark.parametrize(
    ("batch", "message"),
    [
        (control_like(b"\x00\x00", b"\x00" * 6), "shorter than 4"),
        (control_like(b"\xff\xff\x00\x01", b"\x00" * 6), "version -1"),
        (control_like(b"\x00\x00\x00\x05", b"\x00" * 6), "type 5"),
        (control_like(b"\x00\x00\x00\x01", b"\x00" * 5), "shorter than 6"),
        (control_like(b"\x00\x00\x00\x01", b"\x00" * 6, count=2), "2 records"),
        (RecordBatch.from_bytes(sample_batch()), "not a control batch"),
    ],
)
def test_malformed_control_records(batch: RecordBatch, message: str) -> None:
    with pytest.raises(InvalidRecordError, match=message):
        batch.control_record()


def test_iter_batches_reads_v2_and_legacy_data(decoder: object) -> None:
    legacy = MessageSetBuilder(1, Compression.GZIP, base_offset=3)
    legacy.append(b"old", timestamp=7)
    legacy.append(b"older", key=b"k", timestamp=8)
    blob = sample_batch(base_offset=0) + legacy.build() + sample_batch(base_offset=5)
    batches = list(iter_batches(blob + blob[:20]))
    assert [b.header.magic for b in batches] == [2, 1, 2]
    assert [r.offset for b in batches for r in b] == [0, 1, 2, 3, 4, 5, 6, 7]
    assert [r.value for r in batches[1]] == [b"old", b"older"]
    with pytest.raises(CorruptRecordError, match="partial batch of 20 bytes"):
        list(iter_batches(blob + blob[:20], strict=True))
    assert list(iter_batches(None)) == []
    assert list(iter_batches(b"")) == []
    bad = bytearray(sample_batch())
    bad[16] = 7
    with pytest.raises(CorruptRecordError, match="unknown magic 7"):
        list(iter_batches(bad))


def test_records_are_decoded_once_and_from_memoryviews(decoder: object) -> None:
    blob = memoryview(bytearray(b"\x00" * 5 + sample_batch(Compression.GZIP)))
    batch = RecordBatch.from_bytes(blob, 5)
    assert batch.records() is batch.records()
    assert all(type(r.value) in (bytes, type(None)) for r in batch)
    assert len(batch) == 3
    assert "offsets 0..2" in repr(batch)


def test_corrupt_record_error_is_a_decode_error_mapped_to_corrupt_message() -> None:
    error = CorruptRecordError("x")
    assert isinstance(error, DecodeError)
    assert error.code == 2 and error.retriable


@pytest.mark.parametrize("native", [False, True], ids=["py", "c"])
def test_decode_columns(native: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each batch's records in [start, end) become Arrow-layout columns: offsets, timestamps
    (LogAppendTime's too), the batch's timestamp type, keys and values with null bits;
    legacy batches go through their records."""
    if native and records._decode_columns_c is None:
        pytest.skip("the C extension was not built")
    if not native:
        monkeypatch.setattr(records, "_decode_columns_c", None)
    legacy = MessageSetBuilder(1, Compression.GZIP, base_offset=20)
    legacy.append(b"old", key=None, timestamp=7)
    appended = sample_batch(
        Compression.LZ4, base_offset=10, timestamp_type=TimestampType.LOG_APPEND_TIME
    )
    batches = [*iter_batches(sample_batch()), *iter_batches(appended)]
    columns = records.decode_columns([(batches[0], 1, 3), (batches[1], 0, 12)])
    assert columns.rows == 4
    assert struct.unpack("<4q", columns.offsets) == (1, 2, 10, 11)
    stamp = batches[1].header.max_timestamp
    assert struct.unpack("<4q", columns.timestamps) == (1_005, 999, stamp, stamp)
    assert struct.unpack("<4i", columns.timestamp_types) == (0, 0, 1, 1)
    assert (columns.key_nulls, bytes(columns.key_validity)) == (1, b"\x0d")
    assert struct.unpack("<5i", columns.key_offsets) == (0, 2, 2, 4, 6)
    assert bytes(columns.key_data) == b"k1k0k1"
    assert (columns.value_nulls, bytes(columns.value_validity)) == (2, b"\x06")
    assert struct.unpack("<5i", columns.value_offsets) == (0, 0, 2, 4, 4)
    assert bytes(columns.value_data) == b"v2v0"
    [old] = iter_batches(legacy.build())
    mixed = records.decode_columns([(old, 0, 100), (batches[0], 0, 1)])
    assert struct.unpack("<2q", mixed.offsets) == (20, 0)
    assert bytes(mixed.value_data) == b"oldv0"
    assert records.decode_columns([]).rows == 0
