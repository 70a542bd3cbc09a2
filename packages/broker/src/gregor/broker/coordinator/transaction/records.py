"""The transaction coordinator's state as `__transaction_state` records, and back.

Writing: one record per transition, keyed by the transactional id, in a batch of its own
(uncompressed, create time), as Kafka's coordinator writes it; an expired id gets a
tombstone. Reading (when this broker becomes the coordinator of a partition): the batches
from the log start to its end, the last record of an id winning and a tombstone removing it.
"""

from __future__ import annotations

import logging
from collections import defaultdict

import attrs

from gregor.broker.coordinator.transaction.state import (
    NO_PRODUCER_EPOCH,
    TransactionMetadata,
    TxnState,
    TxnTransit,
)
from gregor.protocol import transaction_records as wire
from gregor.protocol.errors import ProtocolError
from gregor.protocol.records import BatchBuilder, RecordBatch

log = logging.getLogger(__name__)


def transit_value(transit: TxnTransit) -> bytes:
    by_topic: dict[str, list[int]] = defaultdict(list)
    for topic, partition in sorted(transit.partitions):
        by_topic[topic].append(partition)
    return wire.encode_value(
        wire.TransactionLogValue(
            producer_id=transit.producer_id,
            producer_epoch=transit.producer_epoch,
            transaction_timeout_ms=transit.timeout_ms,
            transaction_status=int(transit.state),
            # Kafka writes null for an Empty transaction, a list otherwise.
            transaction_partitions=[
                wire.TransactionPartitions(topic, parts) for topic, parts in by_topic.items()
            ]
            if transit.state is not TxnState.EMPTY
            else None,
            transaction_last_update_timestamp_ms=transit.update_ms,
            transaction_start_timestamp_ms=transit.start_ms,
        )
    )


def transit_batch(transactional_id: str, transit: TxnTransit) -> bytes:
    builder = BatchBuilder()
    value = None if transit.state is TxnState.DEAD else transit_value(transit)
    builder.append(value, key=wire.encode_key(transactional_id), timestamp=transit.update_ms)
    return builder.build()


def metadata_from_value(
    transactional_id: str, value: wire.TransactionLogValue
) -> TransactionMetadata:
    state = TxnState(value.transaction_status)
    partitions = {
        (entry.topic, partition)
        for entry in value.transaction_partitions or ()
        for partition in entry.partition_ids
    }
    return TransactionMetadata(
        transactional_id,
        producer_id=value.producer_id,
        previous_producer_id=value.previous_producer_id,
        producer_epoch=value.producer_epoch,
        last_producer_epoch=NO_PRODUCER_EPOCH,
        timeout_ms=value.transaction_timeout_ms,
        state=state,
        partitions=partitions,
        start_ms=value.transaction_start_timestamp_ms,
        update_ms=value.transaction_last_update_timestamp_ms,
    )


@attrs.define
class LoadedTransactions:
    """What replaying a partition found: each id's last value (tombstones remove ids)."""

    values: dict[str, wire.TransactionLogValue] = attrs.field(factory=dict)
    skipped: int = 0

    def replay(self, batch: RecordBatch, partition_name: str) -> None:
        if batch.header.is_control:
            return
        try:
            records = batch.records()
        except ProtocolError as exc:
            self.skipped += batch.header.records_count
            log.warning(
                "%s: skipping the batch at offset %d: %s",
                partition_name,
                batch.header.base_offset,
                exc,
            )
            return
        for record in records:
            try:
                if record.key is None:
                    raise ProtocolError("a record without a key")
                transactional_id = wire.decode_key(record.key)
                if record.value is None:
                    self.values.pop(transactional_id, None)
                else:
                    self.values[transactional_id] = wire.decode_value(record.value)
            except (ProtocolError, ValueError) as exc:
                self.skipped += 1
                log.warning(
                    "%s: skipping the record at offset %d: %s", partition_name, record.offset, exc
                )

    def build(self) -> dict[str, TransactionMetadata]:
        return {tid: metadata_from_value(tid, value) for tid, value in self.values.items()}
