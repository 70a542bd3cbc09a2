"""Producer state: what idempotence and transactions need to know about each producer id.

Per producer id: its epoch, the sequences and offsets of its last 5 batches (to answer a
retried batch with its original offsets and to reject gaps), the coordinator epoch of its last
transaction marker, and the first offset of its ongoing transaction. Only batch headers are
read, never records (a transaction marker's one record excepted).

The rules are Kafka's (`ProducerAppendInfo`):
- an epoch below the producer's current one is fenced (InvalidProducerEpoch);
- in the same epoch a batch must continue the last sequence (OutOfOrderSequence), unless the
  producer's state was lost (it has no epoch yet), and a batch equal to one of the last five
  is a duplicate whose original offsets are returned;
- a new epoch starts at sequence 0;
- a producer inside a transaction may write only transactional batches (InvalidTxnState);
- a marker from an older coordinator epoch is fenced (TransactionCoordinatorFenced).
Batches from replication are not validated, only recorded.

Snapshots (`<offset>.snapshot`, Kafka's `ProducerSnapshot` v1 format, CRC-32C checked) are
written at segment rolls and clean shutdown; after a crash the state is rebuilt from the
latest snapshot plus the batches after it.
"""

from __future__ import annotations

import enum
import logging
import os
import struct
from collections import deque
from collections.abc import Iterable
from pathlib import Path
from typing import Final

import attrs

from gregor.protocol.checksums import crc32c
from gregor.protocol.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceNumberError,
    TransactionCoordinatorFencedError,
)
from gregor.protocol.records import BatchHeader, ControlType, RecordBatch
from gregor.storage.files import atomic_write
from gregor.storage.names import SNAPSHOT_SUFFIX, offset_name, parse_offset_file

log = logging.getLogger(__name__)

NUM_BATCHES_TO_RETAIN: Final = 5
NO_PRODUCER_EPOCH: Final = -1
NO_SEQUENCE: Final = -1
INT_MAX: Final = 2**31 - 1

_SNAPSHOT_VERSION: Final = 1
_SNAPSHOT_HEAD: Final = struct.Struct(">hIi")  # version, crc, entry count
_SNAPSHOT_ENTRY: Final = struct.Struct(">qhiqiqiq")
_CRC_START: Final = 6  # the CRC covers everything after the version and the CRC itself


class AppendOrigin(enum.Enum):
    CLIENT = "client"  # a producer: full validation
    COORDINATOR = "coordinator"  # a group/transaction coordinator: epochs only
    REPLICATION = "replication"  # a follower copying the leader: recorded, not validated


class CorruptSnapshotError(Exception):
    pass


@attrs.frozen(slots=True)
class BatchMetadata:
    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return (self.last_seq - self.offset_delta) % (INT_MAX + 1)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


@attrs.define(slots=True)
class ProducerStateEntry:
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    coordinator_epoch: int = -1
    last_timestamp: int = -1
    current_txn_first_offset: int | None = None
    batches: deque[BatchMetadata] = attrs.field(factory=lambda: deque(maxlen=5))

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def first_seq(self) -> int:
        return self.batches[0].first_seq if self.batches else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    @property
    def last_offset_delta(self) -> int:
        return self.batches[-1].offset_delta if self.batches else 0

    def copy(self) -> ProducerStateEntry:
        return ProducerStateEntry(
            self.producer_id,
            self.producer_epoch,
            self.coordinator_epoch,
            self.last_timestamp,
            self.current_txn_first_offset,
            deque(self.batches, maxlen=NUM_BATCHES_TO_RETAIN),
        )

    def maybe_update_epoch(self, epoch: int) -> None:
        if self.producer_epoch != epoch:
            self.batches.clear()
            self.producer_epoch = epoch

    def add_batch(self, epoch: int, last_seq: int, last_offset: int, delta: int, ts: int) -> None:
        self.maybe_update_epoch(epoch)
        self.batches.append(BatchMetadata(last_seq, last_offset, delta, ts))
        self.last_timestamp = ts

    def find_duplicate(self, header: BatchHeader) -> BatchMetadata | None:
        """The retained batch with the same epoch and sequence range, if any."""
        if header.producer_epoch != self.producer_epoch:
            return None
        first, last = header.base_sequence, header.last_sequence
        for batch in self.batches:
            if batch.first_seq == first and batch.last_seq == last:
                return batch
        return None


@attrs.frozen(slots=True)
class CompletedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


@attrs.define(slots=True)
class TxnMetadata:
    producer_id: int
    first_offset: int
    last_offset: int | None = None


class ProducerAppendInfo:
    """The validation of one producer's batches in one append, applied to the state after."""

    __slots__ = ("current", "origin", "producer_id", "started_txns", "updated")

    def __init__(
        self, producer_id: int, current: ProducerStateEntry | None, origin: AppendOrigin
    ) -> None:
        self.producer_id = producer_id
        self.current = current or ProducerStateEntry(producer_id)
        self.origin = origin
        self.updated = self.current.copy()
        self.updated.batches.clear()
        self.started_txns: list[TxnMetadata] = []

    def _check_epoch(self, epoch: int, offset: int) -> None:
        if epoch < self.updated.producer_epoch and self.origin is not AppendOrigin.REPLICATION:
            raise InvalidProducerEpochError(
                f"epoch {epoch} of producer {self.producer_id} at offset {offset} is older "
                f"than its current epoch {self.updated.producer_epoch}"
            )

    def _check_sequence(self, epoch: int, first_seq: int, offset: int) -> None:
        updated, current = self.updated, self.current
        if epoch != updated.producer_epoch:
            if first_seq != 0 and updated.producer_epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceNumberError(
                    f"producer {self.producer_id} starts epoch {epoch} at sequence {first_seq} "
                    f"(offset {offset}); a new epoch starts at 0"
                )
            return
        if updated.batches:
            last_seq = updated.last_seq
        elif epoch == current.producer_epoch:
            last_seq = current.last_seq
        else:
            last_seq = NO_SEQUENCE
        in_sequence = first_seq == last_seq + 1 or (first_seq == 0 and last_seq == INT_MAX)
        if current.producer_epoch != NO_PRODUCER_EPOCH and not in_sequence:
            raise OutOfOrderSequenceNumberError(
                f"out of order sequence for producer {self.producer_id} at offset {offset}: "
                f"{first_seq} (incoming), {last_seq} (current end)"
            )

    def append_data(self, header: BatchHeader, first_offset: int) -> None:
        """A data batch whose first offset is `first_offset` (the header's may not be set yet)."""
        epoch = header.producer_epoch
        last_offset = first_offset + header.last_offset_delta
        self._check_epoch(epoch, first_offset)
        if self.origin is AppendOrigin.CLIENT:
            self._check_sequence(epoch, header.base_sequence, first_offset)
        updated = self.updated
        updated.add_batch(
            epoch,
            header.last_sequence,
            last_offset,
            last_offset - first_offset,
            header.max_timestamp,
        )
        transactional = header.is_transactional
        if updated.current_txn_first_offset is not None and not transactional:
            raise InvalidTxnStateError(
                f"producer {self.producer_id} wrote a non-transactional batch at offset "
                f"{first_offset} inside its transaction"
            )
        if updated.current_txn_first_offset is None and transactional:
            updated.current_txn_first_offset = first_offset
            self.started_txns.append(TxnMetadata(self.producer_id, first_offset))

    def append_marker(
        self, epoch: int, control: ControlType, coordinator_epoch: int, offset: int, ts: int
    ) -> CompletedTxn | None:
        self._check_epoch(epoch, offset)
        updated = self.updated
        if (
            updated.coordinator_epoch > coordinator_epoch
            and self.origin is not AppendOrigin.REPLICATION
        ):
            raise TransactionCoordinatorFencedError(
                f"marker for producer {self.producer_id} at offset {offset} has coordinator "
                f"epoch {coordinator_epoch}, older than {updated.coordinator_epoch}"
            )
        completed = None
        if updated.current_txn_first_offset is not None:
            completed = CompletedTxn(
                self.producer_id,
                updated.current_txn_first_offset,
                offset,
                control == ControlType.ABORT,
            )
        updated.maybe_update_epoch(epoch)
        updated.coordinator_epoch = coordinator_epoch
        updated.current_txn_first_offset = None
        updated.last_timestamp = ts
        return completed

    def append(
        self, header: BatchHeader, data: memoryview | bytes | None, base_offset: int | None = None
    ) -> CompletedTxn | None:
        """Validate and record one batch at `base_offset` (default: the header's); `data`, the
        whole batch, is needed for control batches only."""
        offset = header.base_offset if base_offset is None else base_offset
        if header.is_control:
            if header.records_count == 0 or data is None:
                return None  # an empty control batch: its transaction was cleaned away
            marker = RecordBatch(header, data).control_record()
            return self.append_marker(
                header.producer_epoch,
                marker.type,
                marker.coordinator_epoch,
                offset,
                header.max_timestamp,
            )
        self.append_data(header, offset)
        return None


class ProducerStateManager:
    """The producer state of one log, with its snapshots in the log's directory."""

    # Slots: the fast append's C twin stores `map_end_offset` through its offset.
    __slots__ = (
        "directory",
        "last_snap_offset",
        "map_end_offset",
        "max_txn_timeout_ms",
        "ongoing_txns",
        "producer_id_expiration_ms",
        "producers",
        "snapshots",
        "unreplicated_txns",
    )

    def __init__(
        self, directory: Path, *, producer_id_expiration_ms: int, max_txn_timeout_ms: int = 900_000
    ) -> None:
        self.directory = directory
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.max_txn_timeout_ms = max_txn_timeout_ms
        self.producers: dict[int, ProducerStateEntry] = {}
        # Keyed by first offset, kept in offset order (transactions start in offset order).
        self.ongoing_txns: dict[int, TxnMetadata] = {}
        self.unreplicated_txns: dict[int, TxnMetadata] = {}
        self.map_end_offset = 0
        self.last_snap_offset = 0
        self.snapshots: dict[int, Path] = self._list_snapshots()

    # -- snapshots on disk -----------------------------------------------------------------

    def _list_snapshots(self) -> dict[int, Path]:
        found: dict[int, Path] = {}
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return found
        for name in names:
            parsed = parse_offset_file(name)
            if parsed is not None and parsed[1] == SNAPSHOT_SUFFIX and not parsed[2]:
                found[parsed[0]] = self.directory / name
        return dict(sorted(found.items()))

    def latest_snapshot_offset(self) -> int | None:
        return max(self.snapshots) if self.snapshots else None

    def oldest_snapshot_offset(self) -> int | None:
        return min(self.snapshots) if self.snapshots else None

    def _delete_snapshot(self, offset: int) -> None:
        path = self.snapshots.pop(offset, None)
        if path is not None:
            path.unlink(missing_ok=True)

    def delete_snapshots_before(self, offset: int) -> None:
        for snap in [o for o in self.snapshots if o < offset]:
            self._delete_snapshot(snap)

    def remove_stray_snapshots(self, segment_base_offsets: Iterable[int]) -> None:
        """Delete snapshots that match no segment, except the newest (from a clean shutdown)."""
        bases = set(segment_base_offsets)
        stray = sorted(o for o in self.snapshots if o not in bases)
        keep = stray[-1] if stray and (not bases or stray[-1] > max(bases)) else None
        for offset in stray:
            if offset != keep:
                self._delete_snapshot(offset)

    def take_snapshot(self, *, sync: bool = True) -> Path | None:
        """Write a snapshot at the current end offset if none is there yet."""
        if self.map_end_offset <= self.last_snap_offset:
            return None
        path = self.directory / f"{offset_name(self.map_end_offset)}{SNAPSHOT_SUFFIX}"
        atomic_write(path, encode_snapshot(self.producers.values()), sync=sync)
        self.snapshots[self.map_end_offset] = path
        self.snapshots = dict(sorted(self.snapshots.items()))
        self.last_snap_offset = self.map_end_offset
        return path

    # -- loading ---------------------------------------------------------------------------

    def _is_expired(self, now_ms: int, entry: ProducerStateEntry) -> bool:
        return (
            entry.current_txn_first_offset is None
            and now_ms - entry.last_timestamp >= self.producer_id_expiration_ms
        )

    def _load_entry(self, entry: ProducerStateEntry) -> None:
        self.producers[entry.producer_id] = entry
        if entry.current_txn_first_offset is not None:
            self.ongoing_txns[entry.current_txn_first_offset] = TxnMetadata(
                entry.producer_id, entry.current_txn_first_offset
            )

    def _load_from_snapshot(self, log_start_offset: int, now_ms: int) -> None:
        while self.snapshots:
            offset = max(self.snapshots)
            try:
                entries = decode_snapshot(self.snapshots[offset].read_bytes())
            except (CorruptSnapshotError, OSError) as exc:
                log.warning("%s: dropping producer snapshot %d: %s", self.directory, offset, exc)
                self._delete_snapshot(offset)
                continue
            for entry in sorted(entries, key=lambda e: e.current_txn_first_offset or -1):
                if not self._is_expired(now_ms, entry):
                    self._load_entry(entry)
            self.last_snap_offset = self.map_end_offset = offset
            return
        self.last_snap_offset = self.map_end_offset = log_start_offset

    def truncate_and_reload(self, log_start_offset: int, log_end_offset: int, now_ms: int) -> None:
        """Drop snapshots outside (start, end] and reload from the latest one left."""
        for offset in list(self.snapshots):
            if offset > log_end_offset or offset <= log_start_offset:
                self._delete_snapshot(offset)
        if log_end_offset != self.map_end_offset:
            self.producers.clear()
            self.ongoing_txns.clear()
            self.unreplicated_txns.clear()
            self._load_from_snapshot(log_start_offset, now_ms)
        else:
            self.on_log_start_offset_incremented(log_start_offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self.producers.clear()
        self.ongoing_txns.clear()
        self.unreplicated_txns.clear()
        for snap in list(self.snapshots):
            self._delete_snapshot(snap)
        self.last_snap_offset = 0
        self.map_end_offset = offset

    def on_log_start_offset_incremented(self, log_start_offset: int) -> None:
        self._remove_unreplicated(log_start_offset)
        if self.map_end_offset < log_start_offset:
            self.map_end_offset = log_start_offset
        latest = self.latest_snapshot_offset()
        self.last_snap_offset = latest if latest is not None else log_start_offset

    # -- updates ---------------------------------------------------------------------------

    def prepare_update(self, producer_id: int, origin: AppendOrigin) -> ProducerAppendInfo:
        return ProducerAppendInfo(producer_id, self.producers.get(producer_id), origin)

    def update(self, info: ProducerAppendInfo) -> None:
        current = self.producers.get(info.producer_id)
        updated = info.updated
        if current is None:
            self.producers[info.producer_id] = updated
        else:
            current.maybe_update_epoch(updated.producer_epoch)
            current.batches.extend(updated.batches)
            current.coordinator_epoch = updated.coordinator_epoch
            current.current_txn_first_offset = updated.current_txn_first_offset
            current.last_timestamp = updated.last_timestamp
        for txn in info.started_txns:
            self.ongoing_txns[txn.first_offset] = txn

    def last_stable_offset_after(self, completed: CompletedTxn) -> int:
        """The LSO once `completed` is done: the next other ongoing transaction's start."""
        for txn in self.ongoing_txns.values():
            if txn.producer_id != completed.producer_id:
                return txn.first_offset
        return completed.last_offset + 1

    def complete_txn(self, completed: CompletedTxn) -> None:
        txn = self.ongoing_txns.pop(completed.first_offset, None)
        if txn is None:
            raise ValueError(f"transaction {completed} was not started")
        txn.last_offset = completed.last_offset
        self.unreplicated_txns[completed.first_offset] = txn

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        self._remove_unreplicated(high_watermark)

    def _remove_unreplicated(self, offset: int) -> None:
        done = [
            first
            for first, txn in self.unreplicated_txns.items()
            if txn.last_offset is not None and txn.last_offset < offset
        ]
        for first in done:
            del self.unreplicated_txns[first]

    def first_unstable_offset(self) -> int | None:
        """The first offset of an undecided transaction or of a decided one whose marker is
        not yet below the high watermark."""
        # Ongoing transactions start in offset order; completed ones finish in any order.
        candidates = list(self.unreplicated_txns)
        if self.ongoing_txns:
            candidates.append(next(iter(self.ongoing_txns)))
        return min(candidates) if candidates else None

    def first_undecided_offset(self) -> int | None:
        return next(iter(self.ongoing_txns), None)

    def remove_expired_producers(self, now_ms: int) -> None:
        expired = [pid for pid, e in self.producers.items() if self._is_expired(now_ms, e)]
        for pid in expired:
            del self.producers[pid]

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producers.get(producer_id)

    def active_producers(self) -> dict[int, ProducerStateEntry]:
        return dict(self.producers)


def encode_snapshot(entries: Iterable[ProducerStateEntry]) -> bytes:
    items = list(entries)
    body = bytearray(_SNAPSHOT_HEAD.size + _SNAPSHOT_ENTRY.size * len(items))
    pos = _SNAPSHOT_HEAD.size
    for e in items:
        _SNAPSHOT_ENTRY.pack_into(
            body,
            pos,
            e.producer_id,
            e.producer_epoch,
            e.last_seq,
            e.last_data_offset,
            e.last_offset_delta,
            e.last_timestamp,
            e.coordinator_epoch,
            -1 if e.current_txn_first_offset is None else e.current_txn_first_offset,
        )
        pos += _SNAPSHOT_ENTRY.size
    struct.pack_into(">i", body, _CRC_START, len(items))
    crc = crc32c(memoryview(body)[_CRC_START:])
    struct.pack_into(">hI", body, 0, _SNAPSHOT_VERSION, crc)
    return bytes(body)


def decode_snapshot(data: bytes) -> list[ProducerStateEntry]:
    if len(data) < _SNAPSHOT_HEAD.size:
        raise CorruptSnapshotError(f"snapshot of {len(data)} bytes is truncated")
    version, crc, count = _SNAPSHOT_HEAD.unpack_from(data)
    if version != _SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"snapshot has unknown version {version}")
    if count < 0 or len(data) != _SNAPSHOT_HEAD.size + count * _SNAPSHOT_ENTRY.size:
        raise CorruptSnapshotError(f"snapshot size {len(data)} does not hold {count} entries")
    computed = crc32c(memoryview(data)[_CRC_START:])
    if computed != crc:
        raise CorruptSnapshotError(f"snapshot CRC {crc:#010x} does not match {computed:#010x}")
    entries: list[ProducerStateEntry] = []
    for fields in _SNAPSHOT_ENTRY.iter_unpack(memoryview(data)[_SNAPSHOT_HEAD.size :]):
        pid, epoch, last_seq, last_offset, delta, ts, coord_epoch, txn_first = fields
        entry = ProducerStateEntry(
            pid, epoch, coord_epoch, ts, txn_first if txn_first >= 0 else None
        )
        if last_offset >= 0:
            entry.batches.append(BatchMetadata(last_seq, last_offset, delta, ts))
        entries.append(entry)
    return entries
