"""What an append does to producer state (Kafka's analyzeAndValidateProducerState and
updateProducers), and the replay of batches already in the log into it.

An append first checks each producer's batches against its state without changing it (a
duplicate of a retained batch stops the append: its original offsets answer it); once the
batches are written the checked updates are applied and the transactions their markers
completed are closed, each aborted one recorded in the segment's `.txnindex` with the last
stable offset as it stands after it.
"""

from __future__ import annotations

from typing import NamedTuple

from gregor.protocol.records import BatchHeader
from gregor.storage.batches import scan_headers
from gregor.storage.producer_state import (
    AppendOrigin,
    BatchMetadata,
    CompletedTxn,
    ProducerAppendInfo,
    ProducerStateManager,
)
from gregor.storage.segment import LogSegment
from gregor.storage.txn_index import AbortedTxn
from gregor.storage.validation import Headers, Records


class ProducerUpdates(NamedTuple):
    """The checked producer state changes of one append, applied once it is written."""

    updates: dict[int, ProducerAppendInfo]
    completed: list[CompletedTxn]
    # A client's retried batch, already in the log: (its retained metadata, its header).
    duplicate: tuple[BatchMetadata, BatchHeader] | None = None


NO_UPDATES = ProducerUpdates({}, [])


def analyze_producers(
    producer_state: ProducerStateManager,
    buf: Records,
    headers: Headers,
    bases: list[int],
    origin: AppendOrigin,
) -> ProducerUpdates:
    """Check the batches of producers (those with a producer id) against their state.

    Raises the producer state errors (OutOfOrderSequenceNumber, InvalidProducerEpoch,
    InvalidTxnState, TransactionCoordinatorFenced); changes nothing."""
    updates: dict[int, ProducerAppendInfo] = {}
    completed: list[CompletedTxn] = []
    view: memoryview | None = None
    for (pos, header), base in zip(headers, bases, strict=True):
        producer_id = header.producer_id
        if producer_id < 0:
            continue
        if origin is AppendOrigin.CLIENT:
            entry = producer_state.producers.get(producer_id)
            duplicate = entry.find_duplicate(header) if entry is not None else None
            if duplicate is not None:
                return ProducerUpdates({}, [], (duplicate, header))
        info = updates.get(producer_id)
        if info is None:
            info = updates[producer_id] = producer_state.prepare_update(producer_id, origin)
        control = None
        if header.is_control:
            view = view if view is not None else memoryview(buf)
            control = view[pos : pos + header.batch_length + 12]
        done = info.append(header, control, base)
        if done is not None:
            completed.append(done)
    return ProducerUpdates(updates, completed) if updates else NO_UPDATES


def apply_producer_updates(
    producer_state: ProducerStateManager, changes: ProducerUpdates, segment: LogSegment
) -> None:
    """Apply an append's checked changes once its batches are in `segment`."""
    for info in changes.updates.values():
        producer_state.update(info)
    for txn in changes.completed:
        complete_txn(producer_state, txn, segment)


def complete_txn(
    producer_state: ProducerStateManager, txn: CompletedTxn, segment: LogSegment
) -> None:
    """Close a transaction whose marker is in `segment`: an aborted one goes into the
    segment's `.txnindex` first, with the last stable offset once it is closed."""
    if txn.is_aborted:
        lso = producer_state.last_stable_offset_after(txn)
        segment.append_aborted_txn(
            AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, lso)
        )
    producer_state.complete_txn(txn)


def apply_batch(
    producer_state: ProducerStateManager, header: BatchHeader, data: memoryview | None
) -> CompletedTxn | None:
    """Record a batch from the log in the producer state, as replication does (`data`, the
    whole batch, is needed for control batches only)."""
    if header.producer_id < 0:
        return None
    info = producer_state.prepare_update(header.producer_id, AppendOrigin.REPLICATION)
    done = info.append(header, data)
    producer_state.update(info)
    return done


def replay_segment(
    producer_state: ProducerStateManager, segment: LogSegment, start: int, end: int
) -> None:
    """Feed the batches of `segment` with offsets in [start, end) to the producer state,
    closing the transactions their markers end (the `.txnindex` already holds the aborted
    ones)."""
    handle = segment.file()
    for pos, header in scan_headers(handle, 0, segment.size):
        last = header.base_offset + header.last_offset_delta
        if last < start:
            continue
        if header.base_offset >= end:
            break
        data = handle.pread(header.batch_length + 12, pos) if header.is_control else None
        done = apply_batch(producer_state, header, memoryview(data) if data is not None else None)
        if done is not None:
            producer_state.complete_txn(done)
        producer_state.map_end_offset = last + 1
