"""Log compaction: keep at least the last record of every key (seed 000 section 4.8).

One cleaning round of a log, as Kafka's cleaner does it:

1. The dirty section runs from the cleaner checkpoint to the first uncleanable offset: the
   active segment, the last stable offset and `min.compaction.lag.ms` all stop it. Logs are
   picked by dirty ratio (`min.cleanable.dirty.ratio`) or because `max.compaction.lag.ms`
   passed.
2. The offset map holds the last offset of every key in the dirty section.
3. The log is recopied from its start up to the end of the map, a few segments at a time
   into one `.cleaned` segment: a record stays when no later record has its key. Tombstones
   stay until `delete.retention.ms` after their first cleaning (the batch's delete horizon);
   records of aborted transactions go, and so do transaction markers once nothing of their
   transaction is left and their delete horizon passed. A batch keeps its base and last
   offsets and its producer fields; the last batch of an active producer stays even when
   empty, so the producer's sequence survives.
4. The cleaned segment is swapped in atomically (`.cleaned` -> `.swap` -> final name).

Cleaning reads and writes files in its own thread, throttled to
`log.cleaner.io.max.bytes.per.second`; the log's lock is taken only for the swap.
"""

from __future__ import annotations

import enum
import heapq
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable
from typing import Final

import attrs

from gregor.protocol.records import (
    BatchBuilder,
    BatchHeader,
    ControlType,
    Record,
    RecordBatch,
    read_batch_header,
)
from gregor.storage.batches import read_batches
from gregor.storage.log import Log
from gregor.storage.names import CLEANED_SUFFIX
from gregor.storage.segment import LogSegment
from gregor.storage.txn_index import AbortedTxn

log = logging.getLogger(__name__)

ENTRY_OVERHEAD: Final = 96  # bytes a map entry costs besides its key, roughly, in CPython


class CleaningAbortedError(Exception):
    """The log changed under the cleaner (truncated, deleted, closed): try again later."""


class Throttler:
    """Sleeps the cleaner thread to keep its I/O under a rate (bytes per second)."""

    def __init__(self, rate: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self._clock = clock
        self._start = clock()
        self._bytes = 0.0

    def throttle(self, nbytes: int) -> None:
        if math.isinf(self.rate):
            return
        self._bytes += nbytes
        elapsed = self._clock() - self._start
        expected = self._bytes / self.rate
        if expected > elapsed:
            time.sleep(expected - elapsed)
        if elapsed > 1.0:  # a fresh window keeps the rate responsive
            self._start, self._bytes = self._clock(), 0.0


class OffsetMap:
    """key -> last offset in the dirty section, bounded by `log.cleaner.dedupe.buffer.size`."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.used = 0
        self._map: dict[bytes, int] = {}
        self.latest_offset = -1

    def __len__(self) -> int:
        return len(self._map)

    def fits(self, key: bytes) -> bool:
        return key in self._map or self.used + len(key) + ENTRY_OVERHEAD <= self.max_bytes

    def put(self, key: bytes, offset: int) -> None:
        if key not in self._map:
            self.used += len(key) + ENTRY_OVERHEAD
        self._map[key] = offset

    def get(self, key: bytes) -> int:
        return self._map.get(key, -1)


@attrs.frozen(slots=True)
class LogToClean:
    log: Log
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    needs_compaction_now: bool

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.cleanable_bytes
        return self.cleanable_bytes / total if total else 0.0


@attrs.define(slots=True)
class CleanerStats:
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_retained: int = 0
    segments_cleaned: int = 0


def cleanable_range(log: Log, checkpoint: int | None, now_ms: int) -> LogToClean:
    """The dirty section of a compacted log and how dirty it is (Kafka's rules)."""
    start = log.log_start_offset
    first_dirty = checkpoint if checkpoint is not None else start
    if first_dirty < start or first_dirty > log.log_end_offset:
        first_dirty = start
    segments = log.segments.all()
    # The (exclusive) end offset of each segment is where the next one starts.
    ends = [s.base_offset for s in segments[1:]] + [log.log_end_offset]
    dirty = [(s, end) for s, end in zip(segments[:-1], ends[:-1], strict=True) if end > first_dirty]
    bounds = [log.last_stable_offset, segments[-1].base_offset]
    lag = log.config.min_compaction_lag_ms
    if lag > 0:
        for segment, _end in dirty:
            if segment.largest_timestamp() > now_ms - lag:
                bounds.append(segment.base_offset)
                break
    uncleanable = max(first_dirty, min(bounds))
    # Cleaning works on whole segments: round down to the start of the segment holding it.
    holder = log.segments.floor(uncleanable)
    first_uncleanable = holder.base_offset if holder is not None else uncleanable
    low = min(first_dirty, first_uncleanable)
    clean_bytes = sum(s.size for s in segments if s.base_offset < first_dirty)
    cleanable_bytes = sum(
        s.size
        for s, end in zip(segments, ends, strict=True)
        if s.base_offset < first_uncleanable and end > low
    )
    needs_now = False
    if log.config.max_compaction_lag_ms < 2**62:
        first_timestamps = [s.first_batch_timestamp() for s, _end in dirty]
        known = [ts for ts in first_timestamps if ts >= 0]
        needs_now = bool(known) and now_ms - min(known) > log.config.max_compaction_lag_ms
    return LogToClean(log, first_dirty, first_uncleanable, clean_bytes, cleanable_bytes, needs_now)


def grab_filthiest(logs: Iterable[tuple[Log, int | None]], now_ms: int) -> LogToClean | None:
    """The compacted log most in need of cleaning, if any needs it."""
    best: LogToClean | None = None
    for candidate_log, checkpoint in logs:
        if not candidate_log.config.compact or candidate_log.offline or candidate_log.closed:
            continue
        candidate = cleanable_range(candidate_log, checkpoint, now_ms)
        if candidate.cleanable_bytes == 0:
            continue
        ratio_ok = candidate.dirty_ratio > candidate_log.config.min_cleanable_dirty_ratio
        if not (ratio_ok or candidate.needs_compaction_now):
            continue
        if best is None or candidate.dirty_ratio > best.dirty_ratio:
            best = candidate
    return best


class _Retention(enum.Enum):
    DELETE = 0  # the batch goes entirely
    DELETE_EMPTY = 1  # the batch goes if no record of it stays
    RETAIN_EMPTY = 2  # the batch stays, if need be as an empty header


class _TxnState:
    """Which transactions the cleaner is inside while it walks the log (Kafka's
    CleanedTransactionMetadata): aborted data goes, markers go when nothing is left."""

    def __init__(self) -> None:
        self._aborted: list[tuple[int, int, AbortedTxn]] = []  # heap by first offset
        self._ongoing_aborted: dict[int, tuple[AbortedTxn, bool]] = {}  # pid -> (txn, seen data)
        self._ongoing_committed: set[int] = set()
        self._seq = 0
        self.retained_aborted: list[AbortedTxn] = []

    def add_aborted(self, txns: Iterable[AbortedTxn]) -> None:
        for txn in txns:
            self._seq += 1
            heapq.heappush(self._aborted, (txn.first_offset, self._seq, txn))

    def _consume_up_to(self, offset: int) -> None:
        while self._aborted and self._aborted[0][0] <= offset:
            _first, _seq, txn = heapq.heappop(self._aborted)
            self._ongoing_aborted.setdefault(txn.producer_id, (txn, False))

    def on_data_batch(self, header: BatchHeader) -> bool:
        """Whether the batch belongs to an aborted transaction (and can go)."""
        self._consume_up_to(header.base_offset + header.last_offset_delta)
        if not header.is_transactional:
            return False
        ongoing = self._ongoing_aborted.get(header.producer_id)
        if ongoing is not None:
            self._ongoing_aborted[header.producer_id] = (ongoing[0], True)
            return True
        self._ongoing_committed.add(header.producer_id)
        return False

    def on_control_batch(self, header: BatchHeader, batch: RecordBatch) -> bool:
        """Whether the marker can go (nothing of its transaction was seen in this pass)."""
        self._consume_up_to(header.base_offset + header.last_offset_delta)
        if header.records_count == 0:
            return True
        marker = batch.control_record()
        pid = header.producer_id
        if marker.type == ControlType.ABORT:
            ongoing = self._ongoing_aborted.pop(pid, None)
            if ongoing is not None and ongoing[1]:
                self.retained_aborted.append(ongoing[0])
                return False
            return True
        if pid in self._ongoing_committed:
            self._ongoing_committed.discard(pid)
            return False
        return True


class Cleaner:
    """Cleans one log at a time (run it in a thread)."""

    def __init__(
        self,
        *,
        dedupe_buffer_size: int = 128 * 1024 * 1024,
        io_max_bytes_per_second: float = math.inf,
        clock: Callable[[], int] | None = None,
    ) -> None:
        self.dedupe_buffer_size = dedupe_buffer_size
        self.throttler = Throttler(io_max_bytes_per_second)
        self._clock = clock
        self.abort = threading.Event()

    def _check(self) -> None:
        if self.abort.is_set():
            raise CleaningAbortedError("cleaning aborted")

    def clean(self, target: LogToClean, now_ms: int) -> tuple[int, CleanerStats]:
        """Clean the log; returns the new first dirty offset (the cleaner checkpoint)."""
        log_ = target.log
        stats = CleanerStats()
        version = log_.structure_version
        offset_map = OffsetMap(self.dedupe_buffer_size)
        self._build_offset_map(
            log_, target.first_dirty_offset, target.first_uncleanable_offset, offset_map, stats
        )
        end_offset = offset_map.latest_offset + 1
        if end_offset <= target.first_dirty_offset:
            return target.first_dirty_offset, stats
        active_producers = {
            pid: (entry.last_data_offset, entry.producer_epoch)
            for pid, entry in log_.producer_state.active_producers().items()
        }
        segments = [s for s in log_.segments.all()[:-1] if s.base_offset < end_offset]
        for group in group_segments(
            segments, log_.config.segment_bytes, log_.config.segment_index_bytes
        ):
            self._clean_group(
                log_, group, offset_map, now_ms, stats, active_producers, end_offset, version
            )
        return end_offset, stats

    # -- the offset map ------------------------------------------------------------------------

    def _build_offset_map(
        self, log_: Log, start: int, end: int, offset_map: OffsetMap, stats: CleanerStats
    ) -> None:
        aborted_ranges = _aborted_ranges(log_.collect_aborted_transactions(start, end))
        for segment in log_.segments.between(start, end):
            if segment.base_offset >= end or segment is log_.segments.active:
                break
            full = False
            for _pos, header, data in read_batches(segment.file(), 0, segment.size):
                self._check()
                self.throttler.throttle(len(data))
                stats.bytes_read += len(data)
                last = header.base_offset + header.last_offset_delta
                if last < start:
                    continue
                if header.base_offset >= end:
                    break
                if not header.is_control and not _in_aborted(aborted_ranges, header):
                    records = RecordBatch(header, data).records()
                    if not all(offset_map.fits(r.key) for r in records if r.key is not None):
                        full = True
                        break
                    for record in records:
                        if record.key is not None and record.offset >= start:
                            offset_map.put(record.key, record.offset)
                offset_map.latest_offset = last
            if full:
                if offset_map.latest_offset < 0:
                    raise CleaningAbortedError(
                        f"the offset map of {self.dedupe_buffer_size} bytes cannot hold one batch"
                    )
                break

    # -- recopying -------------------------------------------------------------------------------

    def _clean_group(
        self,
        log_: Log,
        group: list[LogSegment],
        offset_map: OffsetMap,
        now_ms: int,
        stats: CleanerStats,
        active_producers: dict[int, tuple[int, int]],
        round_end: int,
        version: int,
    ) -> None:
        cleaned = LogSegment(
            log_.dir,
            group[0].base_offset,
            log_.config,
            created_ms=now_ms,
            suffix=CLEANED_SUFFIX,
            active=True,
            new=True,
        )
        try:
            txns = _TxnState()
            for i, segment in enumerate(group):
                upper = (
                    group[i + 1].base_offset if i + 1 < len(group) else segment.read_next_offset()
                )
                txns.add_aborted(log_.collect_aborted_transactions(segment.base_offset, upper))
                self._clean_into(
                    log_,
                    segment,
                    cleaned,
                    offset_map,
                    now_ms,
                    stats,
                    txns,
                    active_producers,
                    round_end,
                )
            for txn in txns.retained_aborted:
                cleaned.append_aborted_txn(txn)
            cleaned.on_become_inactive()
            cleaned.flush()
            cleaned.set_last_modified(group[-1].last_modified_ms())
            self._check()
            if not log_.replace_segments(cleaned, group, expected_version=version):
                raise CleaningAbortedError(f"{log_.name} changed while it was cleaned")
            stats.segments_cleaned += len(group)
        except BaseException:
            cleaned.delete_files()
            raise

    def _clean_into(
        self,
        log_: Log,
        source: LogSegment,
        dest: LogSegment,
        offset_map: OffsetMap,
        now_ms: int,
        stats: CleanerStats,
        txns: _TxnState,
        active_producers: dict[int, tuple[int, int]],
        round_end: int,
    ) -> None:
        delete_retention = log_.config.delete_retention_ms
        for _pos, header, data in read_batches(source.file(), 0, source.size):
            self._check()
            self.throttler.throttle(len(data))
            stats.bytes_read += len(data)
            batch = RecordBatch(header, data)
            if header.is_control:
                can_discard = txns.on_control_batch(header, batch)
                horizon = header.delete_horizon_ms
                discard_records = can_discard and horizon is not None and horizon <= now_ms
            else:
                can_discard = txns.on_data_batch(header)
                discard_records = can_discard
            last = header.base_offset + header.last_offset_delta
            if header.producer_id >= 0 and _is_last_of_producer(header, active_producers):
                retention = _Retention.RETAIN_EMPTY
            elif last + 1 == round_end:
                retention = _Retention.RETAIN_EMPTY  # keeps the round's last offset
            elif discard_records:
                retention = _Retention.DELETE
            else:
                retention = _Retention.DELETE_EMPTY
            if retention is _Retention.DELETE:
                continue
            records = [] if discard_records and header.records_count else batch.records()
            stats.records_read += len(records)
            retained: list[Record] = []
            for record in records:
                if discard_records:
                    continue
                if header.is_control or _retain(offset_map, header, record, now_ms):
                    retained.append(record)
            out: bytes | memoryview | None = None
            if retained:
                tombstones = any(r.value is None for r in retained)
                marker_for_empty = can_discard and header.is_control
                needs_horizon = (
                    tombstones or marker_for_empty
                ) and header.delete_horizon_ms is None
                if len(retained) == len(records) and not needs_horizon:
                    out = data
                else:
                    horizon = (
                        now_ms + delete_retention if needs_horizon else header.delete_horizon_ms
                    )
                    out = _rebuild(header, retained, horizon)
            elif retention is _Retention.RETAIN_EMPTY:
                out = _rebuild(header, [], None)
            if out is None:
                continue
            stats.records_retained += len(retained)
            stats.bytes_written += len(out)
            self.throttler.throttle(len(out))
            written = read_batch_header(out)
            written_last = written.base_offset + written.last_offset_delta
            dest.append(written_last, written.max_timestamp, written_last, [out], len(out))


def _retain(offset_map: OffsetMap, header: BatchHeader, record: Record, now_ms: int) -> bool:
    if record.offset > offset_map.latest_offset:
        return True
    key = record.key
    if key is None:
        return False  # a compacted topic keeps keyed records only
    if record.offset < offset_map.get(key):
        return False
    if record.value is not None:
        return True
    horizon = header.delete_horizon_ms
    return horizon is None or now_ms < horizon


def _is_last_of_producer(header: BatchHeader, active: dict[int, tuple[int, int]]) -> bool:
    found = active.get(header.producer_id)
    if found is None:
        return False
    last_data_offset, epoch = found
    if last_data_offset >= 0:
        return header.base_offset + header.last_offset_delta == last_data_offset
    return header.is_control and header.producer_epoch == epoch


def _rebuild(header: BatchHeader, records: list[Record], delete_horizon: int | None) -> bytes:
    """A batch of the retained records with the original offsets and producer fields."""
    builder = BatchBuilder(
        header.compression,
        base_offset=header.base_offset,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        is_transactional=header.is_transactional,
        is_control=header.is_control,
        partition_leader_epoch=header.partition_leader_epoch,
        timestamp_type=header.timestamp_type,
        base_timestamp=None if records else header.max_timestamp,
        delete_horizon_ms=delete_horizon,
    )
    for record in records:
        builder.append(
            record.value,
            key=record.key,
            headers=record.headers,
            timestamp=record.timestamp,
            offset_delta=record.offset - header.base_offset,
        )
    return builder.build(last_offset_delta=header.last_offset_delta)


def _aborted_ranges(txns: list[AbortedTxn]) -> dict[int, list[tuple[int, int]]]:
    ranges: dict[int, list[tuple[int, int]]] = {}
    for txn in txns:
        ranges.setdefault(txn.producer_id, []).append((txn.first_offset, txn.last_offset))
    return ranges


def _in_aborted(ranges: dict[int, list[tuple[int, int]]], header: BatchHeader) -> bool:
    if not header.is_transactional:
        return False
    return any(
        first <= header.base_offset <= last for first, last in ranges.get(header.producer_id, ())
    )


def group_segments(
    segments: list[LogSegment], max_size: int, max_index_size: int
) -> list[list[LogSegment]]:
    """Runs of consecutive segments that fit one cleaned segment (size, index, offsets)."""
    groups: list[list[LogSegment]] = []
    i = 0
    while i < len(segments):
        group = [segments[i]]
        size = segments[i].size
        index_size = segments[i].offset_index.size_in_bytes()
        time_size = segments[i].time_index.size_in_bytes()
        i += 1
        while i < len(segments):
            nxt = segments[i]
            following = segments[i + 1].base_offset if i + 1 < len(segments) else None
            last_offset = (following - 1) if following is not None else nxt.read_next_offset() - 1
            if (
                size + nxt.size > max_size
                or index_size + nxt.offset_index.size_in_bytes() > max_index_size
                or time_size + nxt.time_index.size_in_bytes() > max_index_size
                or (nxt.size > 0 and last_offset - group[0].base_offset > 2**31 - 1)
            ):
                break
            group.append(nxt)
            size += nxt.size
            index_size += nxt.offset_index.size_in_bytes()
            time_size += nxt.time_index.size_in_bytes()
            i += 1
        groups.append(group)
    return groups
