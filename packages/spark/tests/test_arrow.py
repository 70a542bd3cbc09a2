"""Fetched records -> Arrow batches in exactly the schema Spark expects (no JVM needed)."""

from __future__ import annotations

import datetime

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema

from gregor.client import ConsumerRecord, FetchedBatch
from gregor.protocol.records import BatchBuilder, Compression, TimestampType, iter_batches
from gregor.spark.arrow import arrow_schema, spark_schema, to_record_batch
from gregor.spark.fetch import to_arrow
from gregor.spark.planning import OffsetRange


def test_arrow_schema_is_what_spark_checks() -> None:
    for headers in (False, True):
        assert to_arrow_schema(spark_schema(headers), timezone="UTC").equals(arrow_schema(headers))


def test_records_to_batch() -> None:
    records = [
        ConsumerRecord("t", 2, 10, 1_700_000_000_123, TimestampType.CREATE_TIME, b"k", b"v",
                       (("h1", b"x"), ("h2", None)), 0),
        ConsumerRecord("t", 2, 12, 1_700_000_000_456, TimestampType.LOG_APPEND_TIME, None,
                       None, (), None),
    ]  # fmt: skip
    batch = to_record_batch("t", 2, records, include_headers=True)
    assert batch.schema.equals(arrow_schema(True))
    utc = datetime.UTC
    assert batch.to_pylist() == [
        {
            "key": b"k",
            "value": b"v",
            "topic": "t",
            "partition": 2,
            "offset": 10,
            "timestamp": datetime.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=utc),
            "timestampType": 0,
            "headers": [{"key": "h1", "value": b"x"}, {"key": "h2", "value": None}],
        },
        {
            "key": None,
            "value": None,
            "topic": "t",
            "partition": 2,
            "offset": 12,
            "timestamp": datetime.datetime(2023, 11, 14, 22, 13, 20, 456000, tzinfo=utc),
            "timestampType": 1,
            "headers": None,  # no headers: null, as spark-sql-kafka
        },
    ]
    plain = to_record_batch("t", 2, records, include_headers=False)
    assert plain.schema.equals(arrow_schema(False)) and plain.num_rows == 2
    assert to_record_batch("t", 2, [], include_headers=False).num_rows == 0
    assert isinstance(plain, pa.RecordBatch)


def fetched(compression: Compression, base_offset: int, start: int) -> FetchedBatch:
    builder = BatchBuilder(compression, base_offset=base_offset)
    for n in range(50):
        key = None if n % 3 else b"key-%d" % n
        value = None if n % 7 == 0 else b"v" * n
        headers = [("h", b"x")] if n % 5 == 0 else []
        builder.append(value, key=key, headers=headers, timestamp=1_700_000_000_000 + n)
    batch = next(iter_batches(builder.build()))
    return FetchedBatch("t", 4, batch, start)


def test_fetched_batches_to_arrow_columns_or_records() -> None:
    """Columns decoded in one go hold what the records hold: from each batch's start,
    before the range's end, across codecs; with headers, through the records."""
    batches = [fetched(Compression.NONE, 100, 120), fetched(Compression.ZSTD, 150, 150)]
    r = OffsetRange("t", 4, 120, 190)
    records = [
        ConsumerRecord("t", 4, x.offset, x.timestamp, TimestampType.CREATE_TIME, x.key, x.value,
                       x.headers, None)
        for b in batches for x in b.record_batch.records() if 120 <= x.offset < 190
    ]  # fmt: skip
    for headers in (False, True):
        batch = to_arrow(r, batches, include_headers=headers)
        assert batch.schema.equals(arrow_schema(headers))
        assert batch.to_pylist() == to_record_batch("t", 4, records, headers).to_pylist()
        assert batch.num_rows == 70
    assert to_arrow(OffsetRange("t", 4, 0, 100), batches, include_headers=False).num_rows == 0
