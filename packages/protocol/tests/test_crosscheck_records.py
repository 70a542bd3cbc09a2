"""Record batches and message sets built by kafka-python and aiokafka (its C extension and
its pure-Python classes) decode with ours, and ours decode with theirs, with every codec."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import aiokafka.record.default_records as aiokafka_default
import aiokafka.record.legacy_records as aiokafka_legacy
import aiokafka.record.memory_records as aiokafka_memory
import kafka.record.default_records as kafka_default
import kafka.record.legacy_records as kafka_legacy
import kafka.record.memory_records as kafka_memory
import pytest

from gregor.protocol.compression import Compression
from gregor.protocol.legacy import MessageSetBuilder
from gregor.protocol.records import (
    BatchBuilder,
    ControlType,
    Record,
    RecordBatch,
    TimestampType,
    build_control_batch,
    iter_batches,
    read_batch_header,
)


@dataclass(frozen=True)
class Library:
    """One third-party implementation of the record formats."""

    name: str
    batch_builder: Any  # DefaultRecordBatchBuilder
    batch_reader: Any  # DefaultRecordBatch
    legacy_builder: Any  # LegacyRecordBatchBuilder
    memory_records: Callable[[bytes], Any]  # MemoryRecords: reads any record data


LIBRARIES = [
    Library(
        "kafka-python",
        kafka_default.DefaultRecordBatchBuilder,
        kafka_default.DefaultRecordBatch,
        kafka_legacy.LegacyRecordBatchBuilder,
        kafka_memory.MemoryRecords,
    ),
    Library(
        "aiokafka",
        aiokafka_default.DefaultRecordBatchBuilder,
        aiokafka_default.DefaultRecordBatch,
        aiokafka_legacy.LegacyRecordBatchBuilder,
        aiokafka_memory.MemoryRecords,
    ),
    Library(
        "aiokafka-pure-python",
        aiokafka_default._DefaultRecordBatchBuilderPy,
        aiokafka_default._DefaultRecordBatchPy,
        aiokafka_legacy._LegacyRecordBatchBuilderPy,
        aiokafka_memory._MemoryRecordsPy,
    ),
]
CODECS = list(Compression)
LEGACY_CODECS = [c for c in CODECS if c is not Compression.ZSTD]

# Keys, values and headers worth crossing: nulls, empties, multibyte lengths, unicode names.
SAMPLES: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]] = [
    (None, b"plain value", []),
    (b"key", None, []),
    (b"", b"", [("h", b"v")]),
    (b"k" * 300, b"v" * 20_000, [("trace-id", b"abc"), ("ünïcode", None), ("", b"")]),
    *[(b"key-%d" % i, b"value %d " % i * 15, []) for i in range(150)],
]
BASE_TIMESTAMP = 1_700_000_000_000


def timestamp_of(index: int) -> int:
    return BASE_TIMESTAMP + index * 7 - (300 if index == 2 else 0)


def as_bytes(value: Any) -> bytes | None:
    return None if value is None else bytes(value)


def their_records(records: Iterator[Any]) -> list[tuple[Any, ...]]:
    return [
        (
            r.offset,
            r.timestamp,
            as_bytes(r.key),
            as_bytes(r.value),
            [(k, as_bytes(v)) for k, v in r.headers],
        )
        for r in records
    ]


def our_records(batch: RecordBatch) -> list[tuple[Any, ...]]:
    return [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]


def expected(base_offset: int = 0) -> list[tuple[Any, ...]]:
    return [
        (base_offset + i, timestamp_of(i), key, value, headers)
        for i, (key, value, headers) in enumerate(SAMPLES)
    ]


@pytest.mark.parametrize("library", LIBRARIES, ids=lambda lib: lib.name)
@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_their_batches_decode_with_ours(library: Library, codec: Compression) -> None:
    builder = library.batch_builder(2, int(codec), 1, 4242, 7, 100, 10**7)
    for i, (key, value, headers) in enumerate(SAMPLES):
        builder.append(i, timestamp_of(i), key, value, headers)
    data = bytes(builder.build())
    batch = RecordBatch.from_bytes(data)
    batch.verify_crc()
    header = batch.header
    assert header.compression is codec
    assert header.is_transactional and not header.is_control
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (4242, 7, 100)
    assert header.records_count == len(SAMPLES)
    assert header.last_sequence == 100 + len(SAMPLES) - 1
    assert header.max_timestamp == max(timestamp_of(i) for i in range(len(SAMPLES)))
    assert our_records(batch) == expected()


@pytest.mark.parametrize("library", LIBRARIES, ids=lambda lib: lib.name)
@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_our_batches_decode_with_theirs(library: Library, codec: Compression) -> None:
    builder = BatchBuilder(
        codec,
        base_offset=1000,
        producer_id=99,
        producer_epoch=3,
        base_sequence=2**31 - 5,
        is_transactional=True,
        partition_leader_epoch=12,
    )
    for i, (key, value, headers) in enumerate(SAMPLES):
        builder.append(value, key=key, headers=headers, timestamp=timestamp_of(i))
    theirs = library.batch_reader(builder.build())
    assert theirs.validate_crc()
    assert (theirs.base_offset, theirs.producer_id, theirs.producer_epoch) == (1000, 99, 3)
    assert theirs.compression_type == codec
    assert theirs.is_transactional and not theirs.is_control_batch
    assert their_records(iter(theirs)) == expected(1000)


@pytest.mark.parametrize("library", LIBRARIES, ids=lambda lib: lib.name)
def test_our_batches_are_their_bytes(library: Library) -> None:
    """Byte for byte, but for the leader epoch: Java writes -1 (as we do), they write 0."""
    theirs = library.batch_builder(2, 0, 0, -1, -1, -1, 10**7)
    ours = BatchBuilder()
    for i, (key, value, headers) in enumerate(SAMPLES):
        theirs.append(i, timestamp_of(i), key, value, headers)
        ours.append(value, key=key, headers=headers, timestamp=timestamp_of(i))
    their_bytes = bytearray(theirs.build())
    their_bytes[12:16] = b"\xff\xff\xff\xff"  # the leader epoch; the CRC does not cover it
    assert ours.build() == their_bytes


@pytest.mark.parametrize("library", LIBRARIES, ids=lambda lib: lib.name)
def test_log_append_time_and_control_batches_read_by_theirs(library: Library) -> None:
    builder = BatchBuilder(Compression.GZIP, timestamp_type=TimestampType.LOG_APPEND_TIME)
    builder.append(b"a", timestamp=5)
    builder.append(b"b", timestamp=9)
    theirs = library.batch_reader(builder.build())
    assert theirs.timestamp_type == 1
    assert [(r.offset, r.timestamp) for r in theirs] == [(0, 9), (1, 9)]
    marker = build_control_batch(
        ControlType.ABORT, producer_id=8, producer_epoch=1, coordinator_epoch=4, base_offset=30
    )
    theirs = library.batch_reader(marker)
    assert theirs.validate_crc()
    assert theirs.is_control_batch and theirs.is_transactional
    [record] = list(theirs)
    assert (record.offset, bytes(record.key)) == (30, b"\x00\x00\x00\x00")


def read_theirs(library: Library, data: bytes) -> list[tuple[Any, ...]]:
    records = library.memory_records(data)
    out: list[tuple[Any, ...]] = []
    while (batch := records.next_batch()) is not None:
        out += [(r.offset, r.timestamp, as_bytes(r.key), as_bytes(r.value)) for r in batch]
    return out


LEGACY_SAMPLES = [(key, value) for key, value, _ in SAMPLES[:40]]


# Every library, magic and codec a message set can have; aiokafka has no lz4 for magic 0.
LEGACY_CASES = pytest.mark.parametrize(
    ("library", "magic", "codec"),
    [
        pytest.param(
            library,
            magic,
            codec,
            id=f"{library.name}-v{magic}-{codec.name.lower()}",
            marks=[pytest.mark.skip(reason="aiokafka has no lz4 for magic 0")]
            if (magic, codec, library.name[:8]) == (0, Compression.LZ4, "aiokafka")
            else [],
        )
        for library in LIBRARIES
        for magic in (0, 1)
        for codec in LEGACY_CODECS
    ],
)


@LEGACY_CASES
def test_their_message_sets_decode_with_ours(
    library: Library, magic: int, codec: Compression
) -> None:
    builder = library.legacy_builder(magic, int(codec), 10**7)
    for i, (key, value) in enumerate(LEGACY_SAMPLES):
        builder.append(i, timestamp_of(i), key, value)
    data = bytes(builder.build())
    batches = list(iter_batches(data, strict=True))
    assert {b.header.magic for b in batches} == {magic}
    for batch in batches:
        batch.verify_crc()
    stamp = timestamp_of if magic else (lambda i: -1)
    got = [(r.offset, r.timestamp, r.key, r.value) for b in batches for r in b]
    assert got == [(i, stamp(i), k, v) for i, (k, v) in enumerate(LEGACY_SAMPLES)]
    if codec is not Compression.NONE:
        [wrapper] = batches
        assert wrapper.header.compression is codec
        assert wrapper.header.last_offset == len(LEGACY_SAMPLES) - 1


@LEGACY_CASES
def test_our_message_sets_decode_with_theirs(
    library: Library, magic: int, codec: Compression
) -> None:
    builder = MessageSetBuilder(magic, codec, base_offset=500)
    for i, (key, value) in enumerate(LEGACY_SAMPLES):
        builder.append(value, key=key, timestamp=timestamp_of(i))
    stamp = timestamp_of if magic else (lambda i: None)
    assert read_theirs(library, builder.build()) == [
        (500 + i, stamp(i), k, v) for i, (k, v) in enumerate(LEGACY_SAMPLES)
    ]


@pytest.mark.parametrize("library", LIBRARIES, ids=lambda lib: lib.name)
def test_mixed_record_data_reads_the_same_both_ways(library: Library) -> None:
    if library.name == "aiokafka":
        pytest.skip("aiokafka's C MemoryRecords misreads a legacy entry followed by more data")
    ours = BatchBuilder(Compression.SNAPPY, base_offset=0)
    ours.append(b"v2 record", timestamp=BASE_TIMESTAMP)
    old = MessageSetBuilder(1, Compression.GZIP, base_offset=1)
    old.append(b"v1 record", timestamp=BASE_TIMESTAMP + 1)
    theirs = library.batch_builder(2, int(Compression.LZ4), 0, -1, -1, -1, 10**6)
    theirs.append(0, BASE_TIMESTAMP + 2, None, b"their record", [])
    theirs_data = bytearray(theirs.build())
    theirs_data[:8] = (2).to_bytes(8, "big")  # base offset 2: no CRC change needed
    blob = ours.build() + old.build() + bytes(theirs_data)
    mine = [(r.offset, r.timestamp, r.key, r.value) for b in iter_batches(blob) for r in b]
    assert mine == read_theirs(library, blob)
    assert [r[3] for r in mine] == [b"v2 record", b"v1 record", b"their record"]
    assert read_batch_header(theirs_data).base_offset == 2


def test_record_type_is_what_we_document() -> None:
    batch = RecordBatch.from_bytes(build_control_batch(ControlType.COMMIT, **MARKER))
    assert all(type(r) is Record for r in batch)


MARKER = {"producer_id": 1, "producer_epoch": 0, "coordinator_epoch": 0}
