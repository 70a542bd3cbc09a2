"""Reading a log's segments: fetch ranges, aborted transactions, offsets by timestamp.

Reads take no lock: they work on the segment list's copy-on-write snapshot and on offsets
the caller read once. A segment deleted meanwhile (retention, truncation) keeps its open
descriptor, or the read finds it gone and says the offset went out of range.
"""

from __future__ import annotations

from gregor.protocol.errors import InvalidRecordError
from gregor.storage.epoch_cache import LeaderEpochCache
from gregor.storage.files import EMPTY_SLICE, FileSlice
from gregor.storage.results import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    NO_TIMESTAMP,
    TimestampAndOffset,
)
from gregor.storage.segment import LogSegment
from gregor.storage.segments import SegmentList
from gregor.storage.txn_index import AbortedTxn


class PositionCache:
    """Where recent read bounds start: the HW and the LSO, a lookup each time they move
    rather than each fetch, and the log end, where a follower's next fetch starts and a
    consumer's once the HW has caught up (a fetch at the tail would otherwise scan the
    batch headers since the last index entry). Cleared when the segments change; a
    position taken from the log end is checked before it is used (`LogSegment.read`)."""

    __slots__ = ("_positions",)

    SIZE = 16

    def __init__(self) -> None:
        self._positions: dict[int, tuple[LogSegment, int]] = {}

    def get(self, offset: int) -> tuple[LogSegment, int] | None:
        return self._positions.get(offset)

    def remember(self, offset: int, segment: LogSegment, position: int) -> None:
        positions = self._positions
        if offset not in positions and len(positions) >= self.SIZE:
            del positions[next(iter(positions))]  # the oldest
        positions[offset] = (segment, position)

    def find(self, segments: SegmentList, offset: int) -> tuple[LogSegment, int]:
        """The segment and position where `offset` starts."""
        cached = self._positions.get(offset)
        if cached is not None:
            return cached
        segment = segments.floor(offset) or segments.first
        found = segment.translate_offset(offset)
        result = (segment, found[0] if found is not None else segment.size)
        self.remember(offset, *result)
        return result

    def clear(self) -> None:
        self._positions.clear()


def read_range(
    segments: SegmentList,
    positions: PositionCache,
    start_offset: int,
    max_bytes: int,
    min_one_batch: bool,
    bound: int,
    log_end_offset: int,
) -> tuple[LogSegment | None, FileSlice, bool]:
    """Whole batches from the one holding `start_offset` to `bound` (an offset), at most
    `max_bytes` of them unless `min_one_batch`. Returns the segment read, the slice, and
    whether the first batch alone was over `max_bytes` (so nothing came).

    OSError (FileNotFoundError, ValueError: a segment deleted meanwhile) go to the caller."""
    if bound == log_end_offset:
        active = segments.active
        bound_segment, bound_position = active, active.size
        positions.remember(bound, active, bound_position)
    else:
        bound_segment, bound_position = positions.find(segments, bound)
    if start_offset >= bound:
        return None, EMPTY_SLICE, False
    remembered = positions.get(start_offset)
    segment = segments.floor(start_offset)
    while segment is not None and segment.base_offset <= bound_segment.base_offset:
        limit = bound_position if segment is bound_segment else segment.size
        known = remembered[1] if remembered is not None and remembered[0] is segment else None
        found = segment.read(start_offset, max_bytes, limit, min_one_batch, known)
        if found is not None:
            records, _position, first_size = found
            incomplete = not min_one_batch and not records.length and first_size > max_bytes
            return segment, records, incomplete
        segment = segments.higher(segment.base_offset)
    return None, EMPTY_SLICE, False


def collect_aborted_transactions(
    segments: SegmentList, start_offset: int, upper_bound: int
) -> list[AbortedTxn]:
    """The aborted transactions that overlap [start_offset, upper_bound), from the
    `.txnindex` of the segments from the one holding `start_offset` on (Kafka's
    collectAbortedTransactions): each entry's last stable offset says when a later segment
    can hold no more that overlap."""
    found: list[AbortedTxn] = []
    for segment in segments.from_offset(start_offset):
        txns, complete = segment.collect_aborted_txns(start_offset, upper_bound)
        found.extend(txns)
        if complete:
            break
    return found


def aborted_in_read(
    segments: SegmentList,
    start_offset: int,
    segment: LogSegment | None,
    records: FileSlice,
    log_end_offset: int,
) -> list[AbortedTxn]:
    """The aborted transactions a read_committed consumer needs for `records` (read from
    `segment`): those overlapping the fetch offset up to the end of the slice (the next
    index entry's offset: an upper bound, as in Kafka)."""
    if segment is None or not records.length:
        return []
    entry = segment.offset_index.lookup_position(records.position + records.length)
    if entry is not None:
        upper = entry[0]
    else:
        following = segments.higher(segment.base_offset)
        upper = following.base_offset if following is not None else log_end_offset
    return collect_aborted_transactions(segments, start_offset, upper)


def offset_for_timestamp(
    segments: SegmentList,
    epoch_cache: LeaderEpochCache,
    timestamp: int,
    log_start_offset: int,
    log_end_offset: int,
) -> TimestampAndOffset | None:
    """ListOffsets: the first offset at or after `timestamp`, or a special lookup.

    `-2` earliest, `-1` latest (the log end; the caller bounds it by the HW or LSO), `-3`
    the record with the largest timestamp, `-4` earliest local, `-5` latest tiered (none).
    None when nothing matches."""
    if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
        earliest = epoch_cache.earliest_entry()
        epoch = earliest[0] if earliest is not None and earliest[1] <= log_start_offset else None
        return TimestampAndOffset(NO_TIMESTAMP, log_start_offset, epoch)
    if timestamp == LATEST_TIMESTAMP:
        return TimestampAndOffset(NO_TIMESTAMP, log_end_offset, epoch_cache.latest_epoch())
    if timestamp == LATEST_TIERED_TIMESTAMP:
        return TimestampAndOffset(NO_TIMESTAMP, -1, None)
    if timestamp == MAX_TIMESTAMP:
        return _max_timestamp_offset(segments, log_start_offset)
    if timestamp < 0:
        raise InvalidRecordError(f"unknown special timestamp {timestamp}")
    for segment in segments.all():
        if segment.largest_timestamp() >= timestamp:
            found = _found(segment, timestamp, log_start_offset)
            if found is not None:
                return found
    return None


def _max_timestamp_offset(
    segments: SegmentList, log_start_offset: int
) -> TimestampAndOffset | None:
    best: LogSegment | None = None
    for segment in segments.all():
        if segment.size and (
            best is None or segment.max_timestamp_so_far > best.max_timestamp_so_far
        ):
            best = segment
    if best is None or best.max_timestamp_so_far < 0:
        return None
    return _found(best, best.max_timestamp_so_far, log_start_offset)


def _found(segment: LogSegment, timestamp: int, log_start_offset: int) -> TimestampAndOffset | None:
    found = segment.find_offset_by_timestamp(timestamp, log_start_offset)
    if found is None:
        return None
    ts, offset, epoch = found
    return TimestampAndOffset(ts, offset, epoch if epoch >= 0 else None)
