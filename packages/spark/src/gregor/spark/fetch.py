"""Reading one offset range on an executor, with gregor-client's Consumer.

The consumer is assigned the one partition (no group: the source keeps its own offsets),
sought to the range's start, and read until its position reaches the range's end. Record
batches come out as fetched, about `RECORDS_PER_BATCH` records at a time, and leave as
Arrow record batches (`arrow`). The position, not the records seen, says how far the read
got: compaction, control batches and aborted transactions leave gaps in the offsets, which
are not data loss.

Data loss is a range that starts before the log does now (retention deleted it) or ends
after it (the log was truncated or recreated): with failOnDataLoss it fails the task with
the reason, without it the read goes on with what is there.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping

import pyarrow as pa

from gregor.client import Consumer, FetchedBatch, TopicPartition
from gregor.protocol.errors import OffsetOutOfRangeError
from gregor.protocol.records import decode_columns
from gregor.spark.arrow import columns_to_record_batch, to_record_batch
from gregor.spark.planning import OffsetRange, data_loss

RECORDS_PER_BATCH = 10_000  # Spark's spark.sql.execution.arrow.maxRecordsPerBatch
_WAIT = 1.0  # seconds a poll waits before the read checks where the log ends


def consumer_config(client: Mapping[str, str]) -> dict[str, str]:
    """A consumer that keeps no offsets of its own and reports out-of-range offsets."""
    config = dict(client)
    config.pop("group.id", None)
    config.update({"enable.auto.commit": "false", "auto.offset.reset": "none"})
    return config


def read_range(
    client: Mapping[str, str],
    r: OffsetRange,
    *,
    include_headers: bool,
    fail_on_data_loss: bool,
    poll_timeout_ms: int,
) -> Iterator[pa.RecordBatch]:
    """The records of offsets [r.start, r.end) of r's partition, as Arrow record batches."""
    tp = TopicPartition(r.topic, r.partition)
    where = f"{r.topic}-{r.partition}"
    with Consumer(consumer_config(client)) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, r.start)
        position = r.start
        waited_since = time.monotonic()
        while position < r.end:
            try:
                batches = consumer.consume_batches(RECORDS_PER_BATCH, timeout=_WAIT)
            except OffsetOutOfRangeError:
                earliest = consumer.beginning_offsets([tp])[tp]
                latest = consumer.end_offsets([tp])[tp]
                if position < earliest:
                    data_loss(
                        f"offsets [{position}, {min(earliest, r.end)}) of {where} are gone: "
                        f"the log starts at {earliest} now",
                        fail_on_data_loss,
                    )
                    position = earliest
                else:
                    data_loss(
                        f"offsets [{max(latest, position)}, {r.end}) of {where} are gone: "
                        f"the log ends at {latest} now",
                        fail_on_data_loss,
                    )
                    return
                consumer.seek(tp, position)
                continue
            if batches:
                position = min(r.end, batches[-1].last_offset + 1)
                batch = to_arrow(r, batches, include_headers)
                if batch.num_rows:
                    yield batch
                waited_since = time.monotonic()
                continue
            moved = consumer.position(tp)
            if moved > position:  # past control batches or a compacted gap
                position = moved
                waited_since = time.monotonic()
                continue
            latest = consumer.end_offsets([tp])[tp]
            if latest <= position:
                data_loss(
                    f"offsets [{position}, {r.end}) of {where} are gone: the log ends at "
                    f"{latest} now",
                    fail_on_data_loss,
                )
                return
            if time.monotonic() - waited_since > poll_timeout_ms / 1000:
                raise TimeoutError(
                    f"no records from {where} at offset {position} for "
                    f"{poll_timeout_ms} ms (kafkaConsumer.pollTimeoutMs), though the log "
                    f"ends at {latest}"
                )


def to_arrow(r: OffsetRange, batches: list[FetchedBatch], include_headers: bool) -> pa.RecordBatch:
    """The records of `batches` before r.end as one Arrow record batch: decoded to columns
    in one go, or (headers) as records."""
    if include_headers:
        records = [x for b in batches for x in b.records() if x.offset < r.end]
        return to_record_batch(r.topic, r.partition, records, include_headers)
    columns = decode_columns((b.record_batch, b.start, r.end) for b in batches)
    return columns_to_record_batch(r.topic, r.partition, columns)
