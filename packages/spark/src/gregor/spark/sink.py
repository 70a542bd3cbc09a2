"""Writing DataFrames to topics: df.write / writeStream .format("gregor").

The columns are spark-sql-kafka's: `value` (binary or string, required), `key` (binary or
string), `topic` (string; the `topic` option, when given, overrides it), `partition` (int;
null or absent lets the producer's partitioner decide) and `headers`
(array<struct<key: string, value: binary>>). Every `kafka.*` option is a producer option.
Each task produces its Arrow batches with one gregor-client Producer and flushes before it
reports success, so a record the broker refused fails the task, and then the job, with the
broker's error. Like spark-sql-kafka's sink this is at least once: a retried task writes
its records again.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructType,
)

from gregor.client import Producer
from gregor.protocol.errors import KafkaError
from gregor.spark.options import OptionError, client_config, lowered


@dataclass(frozen=True)
class WritePlan:
    client: dict[str, str]
    topic: str | None  # the `topic` option, which wins over the column
    columns: frozenset[str]


@dataclass
class Written(WriterCommitMessage):
    records: int


def write_plan(options: Mapping[str, str], schema: StructType) -> WritePlan:
    """Check the DataFrame's columns and the options, as spark-sql-kafka does."""
    opts = lowered(options)
    types = {f.name.lower(): f.dataType for f in schema.fields}
    topic = opts.get("topic")
    if topic is None and "topic" not in types:
        raise OptionError(
            "topic option required when no 'topic' attribute is present. Use the topic "
            "option for setting a topic."
        )
    _check(types, "topic", (StringType,), "a string", required=False)
    _check(types, "key", (StringType, BinaryType), "a string or binary", required=False)
    _check(types, "value", (StringType, BinaryType), "a string or binary", required=True)
    _check(types, "partition", (IntegerType,), "an int", required=False)
    if "headers" in types and not _headers_type(types["headers"]):
        raise OptionError(
            "headers attribute type must be array<struct<key:string,value:binary>>, not "
            f"{types['headers'].simpleString()}"
        )
    return WritePlan(client_config(opts), topic, frozenset(types))


def _check(
    types: Mapping[str, DataType],
    name: str,
    allowed: tuple[type[DataType], ...],
    words: str,
    *,
    required: bool,
) -> None:
    if name not in types:
        if required:
            raise OptionError(f"Required attribute '{name}' not found")
        return
    if not isinstance(types[name], allowed):
        raise OptionError(
            f"{name} attribute type must be {words}, not {types[name].simpleString()}"
        )


def _headers_type(data_type: DataType) -> bool:
    if not isinstance(data_type, ArrayType) or not isinstance(data_type.elementType, StructType):
        return False
    fields = [(f.name, type(f.dataType)) for f in data_type.elementType.fields]
    return fields == [("key", StringType), ("value", BinaryType)]


def produce_batches(plan: WritePlan, batches: Iterable[pa.RecordBatch]) -> Written:
    """Produce every row of every batch; returns once all are acknowledged, or raises the
    first error the broker (or the producer) reported."""
    failures: list[KafkaError] = []

    def report(error: KafkaError | None, _: object) -> None:
        if error is not None:
            failures.append(error)

    written = 0
    producer = Producer(plan.client)
    try:
        for batch in batches:
            for topic, value, key, partition, headers in _rows(plan, batch):
                if topic is None:
                    raise OptionError(
                        "Null topic present in the data. Use the topic option for setting a topic."
                    )
                producer.produce(topic, value, key, partition, headers, on_delivery=report)
            written += batch.num_rows
            if failures:
                break
        producer.flush()
    finally:
        producer.close()
    if failures:
        raise failures[0]
    return Written(written)


def _rows(plan: WritePlan, batch: pa.RecordBatch) -> Iterator[tuple[Any, ...]]:
    """(topic, value, key, partition, headers) of each row; bytes stay bytes."""
    count = batch.num_rows

    def column(name: str, as_bytes: bool = False) -> Iterable[Any]:
        if name not in plan.columns:
            return itertools.repeat(None, count)
        array = batch.column(batch.schema.get_field_index(_field(batch, name)))
        if as_bytes and pa.types.is_string(array.type):
            array = array.cast(pa.binary())
        return array.to_pylist()  # type: ignore[no-any-return]

    topics = itertools.repeat(plan.topic, count) if plan.topic else column("topic")
    headers: Iterable[Any] = column("headers")
    if "headers" in plan.columns:
        headers = [None if hs is None else [(h["key"], h["value"]) for h in hs] for hs in headers]
    return zip(
        topics,
        column("value", True),
        column("key", True),
        column("partition"),
        headers,
        strict=True,
    )


def _field(batch: pa.RecordBatch, name: str) -> str:
    """The column's name as the DataFrame spells it (Spark matches names case-insensitively)."""
    return str(next(n for n in batch.schema.names if n.lower() == name))


class BatchWriter(DataSourceArrowWriter):
    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.plan = write_plan(options, schema)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Written:
        return produce_batches(self.plan, iterator)


class StreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.plan = write_plan(options, schema)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Written:
        return produce_batches(self.plan, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to do: each task flushed its records before it reported."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to take back: what was acknowledged stays in the log (at least once)."""
