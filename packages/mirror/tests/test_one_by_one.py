"""Which fetched batches pass through to the target as bytes (OneByOne.passes)."""

from __future__ import annotations

from typing import Any

from gregor.client import FetchedBatch, TopicPartition
from gregor.mirror.flow import OneByOne
from gregor.protocol.records import BatchBuilder, RecordBatch, TimestampType

SOURCE, TARGET = TopicPartition("t", 0), TopicPartition("A.t", 0)


def fetched(**settings: Any) -> FetchedBatch:
    builder = BatchBuilder(base_offset=100, **settings)
    for i in range(3):
        builder.append(b"v%d" % i, key=b"k", timestamp=1_700_000_000_000 + i)
    return FetchedBatch(
        SOURCE.topic, SOURCE.partition, RecordBatch.from_bytes(builder.build()), 100
    )


def test_a_plain_batch_passes_a_cleaned_or_log_append_time_one_goes_record_by_record() -> None:
    rules = OneByOne()
    assert rules.passes(SOURCE, TARGET, fetched())
    # The first timestamp of a batch the cleaner gave a delete horizon is the source's
    # horizon: the target must not inherit it.
    assert not rules.passes(SOURCE, TARGET, fetched(delete_horizon_ms=1_700_000_100_000))
    assert not rules.passes(SOURCE, TARGET, fetched(timestamp_type=TimestampType.LOG_APPEND_TIME))
