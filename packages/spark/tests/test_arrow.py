"""Consumer records -> Arrow batches in exactly the schema Spark expects (no JVM needed)."""

from __future__ import annotations

import datetime

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema

from gregor.client import ConsumerRecord
from gregor.protocol.records import TimestampType
from gregor.spark.arrow import arrow_schema, spark_schema, to_record_batch


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
            "headers": [],
        },
    ]
    plain = to_record_batch("t", 2, records, include_headers=False)
    assert plain.schema.equals(arrow_schema(False)) and plain.num_rows == 2
    assert to_record_batch("t", 2, [], include_headers=False).num_rows == 0
    assert isinstance(plain, pa.RecordBatch)
