"""Fetched records -> Arrow record batches in spark-sql-kafka's schema.

An executor hands Spark whole Arrow record batches, never rows. Without headers, the
fetched record batches are decoded straight into column buffers (gregor-protocol's
`decode_columns`, in C) that Arrow wraps without a copy: no Python object per record. With
headers, the consumer's records are turned into columns by `zip` and `pyarrow.array`, both
in C. The Arrow schema is the one Spark expects for the Spark schema below (Spark checks it
batch by batch): timestamps are microseconds in UTC, and a range's topic and partition are
constants, repeated by Arrow.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from gregor.client import ConsumerRecord
from gregor.protocol.records import Buffer, RecordColumns

# spark-sql-kafka's schema.
_SPARK_FIELDS = [
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
]
_SPARK_HEADERS = StructField(
    "headers",
    ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())])),
)

HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")
_FIELDS = [
    ("key", pa.binary()),
    ("value", pa.binary()),
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("timestamp", TIMESTAMP_TYPE),
    ("timestampType", pa.int32()),
]
ARROW_SCHEMA = pa.schema(_FIELDS)
ARROW_SCHEMA_WITH_HEADERS = pa.schema([*_FIELDS, ("headers", HEADER_TYPE)])


def spark_schema(include_headers: bool) -> StructType:
    return StructType([*_SPARK_FIELDS, _SPARK_HEADERS] if include_headers else _SPARK_FIELDS)


def arrow_schema(include_headers: bool) -> pa.Schema:
    return ARROW_SCHEMA_WITH_HEADERS if include_headers else ARROW_SCHEMA


def to_record_batch(
    topic: str, partition: int, records: Sequence[ConsumerRecord], include_headers: bool
) -> pa.RecordBatch:
    """The records of one topic-partition as one Arrow record batch."""
    count = len(records)
    if count == 0:
        schema = arrow_schema(include_headers)
        return pa.record_batch([pa.array([], f.type) for f in schema], schema=schema)
    # Columns of the record tuples: (topic, partition, offset, timestamp, timestamp type,
    # key, value, headers, leader epoch).
    columns = list(zip(*records, strict=True))
    millis = pa.array(columns[3], pa.int64())
    arrays = [
        pa.array(columns[5], pa.binary()),
        pa.array(columns[6], pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), count),
        pa.repeat(pa.scalar(partition, pa.int32()), count),
        pa.array(columns[2], pa.int64()),
        pc.multiply(millis, 1000).cast(TIMESTAMP_TYPE),
        pa.array(columns[4], pa.int32()),
    ]
    if include_headers:
        # A record without headers has null there, as spark-sql-kafka gives it.
        arrays.append(pa.array([h or None for h in columns[7]], HEADER_TYPE))
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema(include_headers))


def columns_to_record_batch(topic: str, partition: int, columns: RecordColumns) -> pa.RecordBatch:
    """Decoded columns of one topic-partition as one Arrow record batch (no headers)."""
    c = columns
    rows = c.rows
    millis = pa.Array.from_buffers(pa.int64(), rows, [None, pa.py_buffer(c.timestamps)])
    arrays = [
        _binary(rows, c.key_validity, c.key_nulls, c.key_offsets, c.key_data),
        _binary(rows, c.value_validity, c.value_nulls, c.value_offsets, c.value_data),
        pa.repeat(pa.scalar(topic, pa.string()), rows),
        pa.repeat(pa.scalar(partition, pa.int32()), rows),
        pa.Array.from_buffers(pa.int64(), rows, [None, pa.py_buffer(c.offsets)]),
        pc.multiply(millis, 1000).cast(TIMESTAMP_TYPE),
        pa.Array.from_buffers(pa.int32(), rows, [None, pa.py_buffer(c.timestamp_types)]),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


def _binary(rows: int, validity: Buffer, nulls: int, offsets: Buffer, data: Buffer) -> pa.Array:
    """A binary column from its buffers (no bitmap when nothing is null), without a copy."""
    bitmap = pa.py_buffer(validity) if nulls else None
    buffers = [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)]
    return pa.Array.from_buffers(pa.binary(), rows, buffers, null_count=nulls)
