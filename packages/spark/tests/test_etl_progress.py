"""gregor-etl's progress lines, from what a StreamingQueryListener is handed."""

from __future__ import annotations

import json

import pytest

from gregor.spark.etl import progress_line, source_offsets


def test_source_offsets_reads_spark_sql_kafka_json() -> None:
    text = json.dumps({"t": {"0": 5, "1": 7}})
    assert source_offsets(text) == {("t", 0): 5, ("t", 1): 7}


@pytest.mark.parametrize("missing", [None, "", "None", "null"])
def test_source_offsets_none_where_spark_has_none(missing: str | None) -> None:
    # PySpark turns a Java null (no latest offsets for a batch an earlier run planned)
    # into the string "None": that is no offsets, not bad JSON.
    assert source_offsets(missing) is None


def test_progress_line_has_each_partitions_offsets_and_the_lag() -> None:
    start = {("t", 0): 100, ("t", 1): 200}
    end = {("t", 0): 150, ("t", 1): 260, ("t", 2): 9}  # partition 2 is new this batch
    latest = {("t", 0): 170, ("t", 1): 260, ("t", 2): 10}
    line = progress_line("t", 4, 119, 1000, start, end, latest)
    assert line == (
        "t: batch 4: 119 records, offsets 0:100-150 1:200-260 2:?-9, 1000 this run, lag 21"
    )
