"""One segment of a log: a `.log` file of batches and its three indexes.

The segment is the unit of rolling, retention, cleaning and recovery. Its `.log` file is the
concatenation of v2 batches exactly as clients and replicas exchange them. The offset index
gets an entry (last offset of the appended batches -> their position) once more than
`index.interval.bytes` were written since the previous entry, and the time index an entry for
the largest timestamp so far at the same moments, as in Kafka.

Files are opened when first used. The active segment writes through `pwrite` at its tracked
size and keeps its indexes mapped read-write; older segments are read-only.
"""

from __future__ import annotations

import logging
import os
import random
import resource
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TypeVar

from gregor.protocol.errors import CorruptRecordError, InvalidRecordError
from gregor.protocol.records import (
    STAMPED_PREFIX,
    BatchHeader,
    RecordBatch,
    stamp_produced_batch,
    verify_crc,
)
from gregor.storage.batches import read_batches, scan_headers
from gregor.storage.config import LogConfig
from gregor.storage.files import EMPTY_SLICE, FileHandle, FileSlice, fsync_path
from gregor.storage.index import OFFSET_ENTRY as _OFFSET_ENTRY
from gregor.storage.index import OffsetIndex, TimeIndex
from gregor.storage.names import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    segment_file,
)
from gregor.storage.results import NO_TIMESTAMP, AppendInfo
from gregor.storage.txn_index import AbortedTxn, TransactionIndex

log = logging.getLogger(__name__)


BatchCallback = Callable[[BatchHeader, memoryview], None]
IndexT = TypeVar("IndexT", OffsetIndex, TimeIndex)


class OpenSegments:
    """A bound on the inactive segments whose files are open, least recently used first out.

    Each open segment costs one descriptor, its `.log` (its index mappings hold none), and
    the memory of its mappings. An evicted segment only drops its
    references, so a thread still reading through them finishes first; its files reopen on
    the next use. The active segments are not counted.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._open: OrderedDict[int, weakref.ref[LogSegment]] = OrderedDict()

    def touch(self, segment: LogSegment) -> None:
        key = id(segment)
        with self._lock:
            if key in self._open:
                self._open.move_to_end(key)
                return
            self._open[key] = weakref.ref(segment, partial(self._collected, key))
            evicted = []
            while len(self._open) > self.limit:
                _key, ref = self._open.popitem(last=False)
                victim = ref()
                if victim is not None:
                    evicted.append(victim)
        for victim in evicted:
            victim.release_files()

    def forget(self, segment: LogSegment) -> None:
        self._forget(id(segment))

    def _collected(self, key: int, _ref: weakref.ref[LogSegment]) -> None:
        self._forget(key)

    def _forget(self, key: int) -> None:
        with self._lock:
            self._open.pop(key, None)

    def __len__(self) -> int:
        return len(self._open)


def _default_open_segments() -> int:
    # A quarter of the descriptors this process may open: each open segment takes one, and
    # the broker needs the rest for the active segments and sockets.
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return 1000 if soft == resource.RLIM_INFINITY else max(256, soft // 4)


OPEN_SEGMENTS = OpenSegments(_default_open_segments())


def use_all_open_files() -> int:
    """Raise this process's soft limit on open files to its hard limit, as the JVM does for
    Kafka at start (-XX:+MaxFDLimit; a soft limit of 1,024 is common, a broker needs one
    per partition and per connection), and bound the open segments by it. Returns the
    limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):  # e.g. macOS refuses RLIM_INFINITY: keep the soft one
            pass
    OPEN_SEGMENTS.limit = _default_open_segments()
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


class SegmentOffsetOverflowError(Exception):
    """Batches whose offsets do not fit the segment's 32-bit relative offsets."""


class LogSegment:
    """A `.log` file with its `.index`, `.timeindex` and `.txnindex`."""

    # Slots: the C twin of `fast_append` reads and writes its state through these slots'
    # offsets (resolved once, in the `fast_append` module), not by name.
    __slots__ = (
        "__weakref__",
        "_bytes_since_index",
        "_fast_index_interval",
        "_fast_offset_limit",
        "_fast_size_limit",
        "_fast_time_indexed",
        "_fast_timestamp_limit",
        "_log",
        "_max_timestamp",
        "_offset_index",
        "_read_hint",
        "_rolling_timestamp",
        "_size",
        "_time_index",
        "active",
        "base_offset",
        "config",
        "created_ms",
        "deleted",
        "directory",
        "log_path",
        "roll_jitter_ms",
        "suffix",
        "txn_index",
    )

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        config: LogConfig,
        *,
        created_ms: int,
        suffix: str = "",
        active: bool = True,
        new: bool = False,
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.config = config
        self.suffix = suffix
        self.created_ms = created_ms
        self.active = active
        self.deleted = False
        self.roll_jitter_ms = (
            random.randrange(config.segment_jitter_ms) if config.segment_jitter_ms > 0 else 0
        )
        self.log_path = segment_file(directory, base_offset, LOG_SUFFIX, suffix)
        self._log: FileHandle | None = None
        self._offset_index: OffsetIndex | None = None
        self._time_index: TimeIndex | None = None
        self.txn_index = TransactionIndex(
            segment_file(directory, base_offset, TXN_INDEX_SUFFIX, suffix), base_offset
        )
        self._bytes_since_index = 0
        self._max_timestamp: tuple[int, int] | None = None  # (timestamp, offset), lazily read
        self._rolling_timestamp: int | None = None  # the first batch's max timestamp
        # (offset, position) where the last read ended: where the next one likely starts.
        self._read_hint: tuple[int, int] | None = None
        # The fast append (`fast_append`): armed by a full `append` with the bounds
        # within which the next appends need none of its roll checks; -1 disarms it.
        self._fast_size_limit = -1
        self._fast_offset_limit = -1
        self._fast_timestamp_limit = -1
        self._fast_time_indexed = -1  # the timestamp of the time index's last entry
        self._fast_index_interval = config.index_interval_bytes
        if new:
            self._log = FileHandle(self.log_path, os.O_RDWR | os.O_CREAT | os.O_EXCL)
            if active and config.preallocate:
                self._log.truncate(config.segment_bytes)
            self._max_timestamp = (-1, base_offset)
            self._size = 0
        else:
            self._size = self.log_path.stat().st_size

    # -- files -----------------------------------------------------------------------------

    def _path(self, suffix: str) -> Path:
        return segment_file(self.directory, self.base_offset, suffix, self.suffix)

    @property
    def index_path(self) -> Path:
        return self._path(INDEX_SUFFIX)

    @property
    def time_index_path(self) -> Path:
        return self._path(TIME_INDEX_SUFFIX)

    def file(self) -> FileHandle:
        handle = self._log
        if handle is None:
            handle = self._log = FileHandle(self.log_path, os.O_RDWR)
        if not self.active:
            OPEN_SEGMENTS.touch(self)
        return handle

    def release_files(self) -> None:
        """Let an inactive segment's descriptors and mappings go (they reopen when needed)."""
        if not self.active:
            self._fast_size_limit = -1
            self._log = None
            self._offset_index = self._time_index = None

    @property
    def offset_index(self) -> OffsetIndex:
        index = self._offset_index
        if index is None:
            index = self._offset_index = self._open_index(OffsetIndex, self.index_path)
        return index

    @property
    def time_index(self) -> TimeIndex:
        index = self._time_index
        if index is None:
            index = self._time_index = self._open_index(TimeIndex, self.time_index_path)
        return index

    def _open_index(self, kind: type[IndexT], path: Path) -> IndexT:
        """Map an index: read-write and grown to `segment.index.bytes` for the active
        segment, read-only for the others."""
        max_size = self.config.segment_index_bytes
        index = kind(path, self.base_offset, max_size, writable=self.active)
        if self.active:
            index.resize(max_size)
        else:
            OPEN_SEGMENTS.touch(self)
        return index

    @property
    def size(self) -> int:
        return self._size

    def __repr__(self) -> str:
        return (
            f"LogSegment(base_offset={self.base_offset}, size={self._size}, {self.log_path.name})"
        )

    # -- timestamps ------------------------------------------------------------------------

    def _max_timestamp_entry(self) -> tuple[int, int]:
        entry = self._max_timestamp
        if entry is None:
            entry = self._max_timestamp = self.time_index.last_entry()
        return entry

    @property
    def max_timestamp_so_far(self) -> int:
        return self._max_timestamp_entry()[0]

    @property
    def offset_of_max_timestamp(self) -> int:
        return self._max_timestamp_entry()[1]

    def largest_timestamp(self) -> int:
        """The largest record timestamp, or the file's modification time when there is none."""
        timestamp = self.max_timestamp_so_far
        return timestamp if timestamp >= 0 else self.last_modified_ms()

    def last_modified_ms(self) -> int:
        try:
            return int(self.log_path.stat().st_mtime * 1000)
        except FileNotFoundError:
            return 0

    def first_batch_timestamp(self) -> int:
        """The max timestamp of the first batch, or -1 (what `segment.ms` counts from)."""
        if self._rolling_timestamp is None:
            self._rolling_timestamp = -1
            for _pos, header in scan_headers(self.file(), 0, self._size):
                self._rolling_timestamp = header.max_timestamp
                break
        return self._rolling_timestamp

    def time_waited_for_roll(self, now_ms: int, batch_timestamp: int) -> int:
        first = self.first_batch_timestamp()
        if first >= 0:
            return batch_timestamp - first
        return now_ms - self.created_ms

    def should_roll(
        self, *, now_ms: int, append_size: int, max_timestamp: int, max_offset: int
    ) -> bool:
        """Whether an append of `append_size` bytes must go to a new segment: the size, the age
        (`segment.ms` from the first batch's timestamp), full indexes, or relative offsets
        that would overflow 32 bits."""
        config = self.config
        size = self._size
        if size > config.segment_bytes - append_size:
            return True
        if size > 0:
            first = self._rolling_timestamp
            if first is None:
                first = self.first_batch_timestamp()
            waited = max_timestamp - first if first >= 0 else now_ms - self.created_ms
            if waited > self._max_wait_ms():
                return True
        offsets = self._offset_index or self.offset_index
        times = self._time_index or self.time_index
        return (
            offsets.entries >= offsets.max_entries
            or times.entries >= times.max_entries - 1
            or max_offset - self.base_offset > 0x7FFFFFFF
        )

    def _max_wait_ms(self) -> int:
        config = self.config
        segment_ms = config.segment_ms
        if config.compact:
            # A compacted log rolls in time for max.compaction.lag.ms: the active segment is
            # never cleaned.
            segment_ms = min(segment_ms, config.max_compaction_lag_ms)
        return segment_ms - self.roll_jitter_ms

    # -- append ----------------------------------------------------------------------------

    def append(
        self,
        largest_offset: int,
        largest_timestamp: int,
        offset_of_max_timestamp: int,
        parts: list[bytes | bytearray | memoryview],
        size: int,
    ) -> None:
        """Write batches (`parts`, `size` bytes) whose offsets are already set, and index them
        every `index.interval.bytes`."""
        if not size:
            return
        position = self._size
        if not 0 <= largest_offset - self.base_offset <= 0x7FFFFFFF:
            raise SegmentOffsetOverflowError(
                f"offset {largest_offset} does not fit segment {self.base_offset}"
            )
        if position == 0:
            self._rolling_timestamp = largest_timestamp
        (self._log or self.file()).pwritev(parts, position, size)
        self._size = position + size
        entry = self._max_timestamp or self._max_timestamp_entry()
        if largest_timestamp > entry[0]:
            entry = self._max_timestamp = (largest_timestamp, offset_of_max_timestamp)
        if self._bytes_since_index > self.config.index_interval_bytes:
            (self._offset_index or self.offset_index).append(largest_offset, position)
            (self._time_index or self.time_index).maybe_append(entry[0], entry[1])
            self._bytes_since_index = 0
        self._bytes_since_index += size
        self._arm_fast_append()

    def _arm_fast_append(self) -> None:
        """Set the bounds within which `fast_append` may skip `should_roll`: the same
        size, age, index and offset limits, as they stand after this append."""
        self._fast_size_limit = -1
        first = self._rolling_timestamp
        offsets, times = self._offset_index, self._time_index
        if (
            not self.active
            or self._log is None
            or self._size == 0
            or first is None
            or first < 0  # then the age counts from the clock: the full path
            or offsets is None
            or times is None
            or offsets.is_full()
            or times.is_full()
        ):
            return
        self._fast_offset_limit = self.base_offset + 0x7FFFFFFF
        self._fast_timestamp_limit = first + self._max_wait_ms()
        self._fast_time_indexed = times.last_entry()[0]
        self._fast_size_limit = self.config.segment_bytes

    def fast_append(
        self,
        records: bytes | bytearray | memoryview,
        base_offset: int,
        leader_epoch: int,
        max_size: int,
        log_start_offset: int,
    ) -> AppendInfo | None:
        """`append` of one produced batch without `should_roll`, valid while the last full
        `append` armed it: when `records` is one batch of a producer without a producer id
        (`stamp_produced_batch`'s rules, at most `max_size` bytes) and it stays within the
        armed bounds, write it with `base_offset` and `leader_epoch` stamped (one pwritev,
        no copy), index it, and return the log's AppendInfo. None, having written nothing,
        when the full path must take the batch. OSError (errno set) when the write fails.

        This is the reference; `fast_append.segment_fast_append` is its C twin where built.
        """
        size_limit = self._fast_size_limit
        if size_limit < 0:  # disarmed: the files may be gone
            return None
        stamped = stamp_produced_batch(records, base_offset, leader_epoch, max_size)
        if stamped is None or stamped[4] >= 0:
            return None
        prefix, delta, _first_ts, max_timestamp, _pid, _producer_epoch, _sequence = stamped
        last_offset = base_offset + delta
        if max_timestamp < NO_TIMESTAMP:
            max_timestamp = NO_TIMESTAMP
        position = self._size
        size = len(records)
        if (
            position + size > size_limit
            or last_offset > self._fast_offset_limit
            or max_timestamp > self._fast_timestamp_limit
        ):
            return None
        since = self._bytes_since_index
        offsets: OffsetIndex = self._offset_index  # type: ignore[assignment]  # armed: open
        index_due = since > self._fast_index_interval
        slot = offsets.entries
        mapping = offsets.mapping
        if index_due and (mapping is None or (slot + 1) * 8 > len(mapping)):
            raise ValueError(f"offset index slot {slot} is out of range")
        body = memoryview(records)[STAMPED_PREFIX:]
        fd = self._log.fd  # type: ignore[union-attr]  # armed only while open
        written = os.pwritev(fd, (prefix, body), position)
        while written < size:  # a short write, rare: finish it
            written += os.pwrite(fd, (prefix + body)[written:], position + written)
        if mapping is not None and index_due:
            _OFFSET_ENTRY.pack_into(mapping, slot * 8, last_offset - self.base_offset, position)
        self._size = position + size
        entry = self._max_timestamp
        if entry is None or max_timestamp > entry[0]:
            entry = self._max_timestamp = (max_timestamp, last_offset)
        if index_due:
            offsets.entries = slot + 1
            room = slot + 1 < offsets.max_entries
            if entry[0] > self._fast_time_indexed:
                self._fast_time_indexed = entry[0]
                room = self._time_index.append_in_order(*entry) and room  # type: ignore[union-attr]
            if not room:
                self._fast_size_limit = -1  # the next append rolls
            since = 0
        self._bytes_since_index = since + size
        return AppendInfo(
            base_offset,
            last_offset,
            max_timestamp,
            last_offset if max_timestamp != NO_TIMESTAMP else -1,
            NO_TIMESTAMP,
            log_start_offset,
            size,
            delta + 1,
            leader_epoch if leader_epoch >= 0 else None,
            False,
        )

    def append_aborted_txn(self, txn: AbortedTxn) -> None:
        self.txn_index.append(txn)

    # -- lookups -----------------------------------------------------------------------------

    def translate_offset(
        self, offset: int, start_position: int = 0
    ) -> tuple[int, BatchHeader] | None:
        """The position and header of the first batch whose last offset is >= `offset`."""
        position = max(self.offset_index.lookup(offset)[1], start_position)
        for pos, header in scan_headers(self.file(), position, self._size):
            if header.base_offset + header.last_offset_delta >= offset:
                return pos, header
        return None

    def batch_end_within(self, start: int, limit: int) -> tuple[int, int | None]:
        """The end of the last whole batch that starts at or after `start` and ends by `limit`,
        and the offset after that batch when it had to be read (else None).

        `start` is a batch boundary; the end is `start` when not even one batch fits.
        """
        limit = min(limit, self._size)
        if limit <= start:
            return start, None
        if limit == self._size:
            return limit, None
        position = max(self.offset_index.position_before(limit), start)
        end, next_offset = position, None
        for pos, header in scan_headers(self.file(), position, limit):
            end = pos + header.batch_length + 12
            next_offset = header.base_offset + header.last_offset_delta + 1
        return end, next_offset

    def batch_starts_at(self, position: int, offset: int) -> bool:
        """Whether a batch with base offset `offset` starts at `position`: one small read
        checks a remembered position (`start_position` of `read`)."""
        if not 0 <= position <= self._size - 12:
            return False
        head = self.file().pread(8, position)
        return len(head) == 8 and int.from_bytes(head, "big") == offset

    def read(
        self,
        start_offset: int,
        max_size: int,
        max_position: int | None,
        min_one_batch: bool,
        start_position: int | None = None,
    ) -> tuple[FileSlice, int, int] | None:
        """A slice of whole batches from the batch holding `start_offset`, or None past the end.

        Returns (slice, start position, size of the first batch, or -1 when it was not
        needed). The slice ends at `max_position` at most and holds at most `max_size` bytes,
        except that the first batch is whole even when larger, with `min_one_batch` (KIP-74).
        `start_position`, where the caller remembers a batch of `start_offset` starting,
        spares the index lookup and header scan when a batch does start there.
        """
        hint = self._read_hint
        first_size = -1
        if start_position is not None and self.batch_starts_at(start_position, start_offset):
            position = start_position
        elif hint is not None and hint[0] == start_offset and hint[1] < self._size:
            # A consumer reading on from where its last fetch ended: no lookup needed.
            position = hint[1]
        else:
            found = self.translate_offset(start_offset)
            if found is None:
                return None
            position = found[0]
            first_size = found[1].batch_length + 12
        if max_position is None or max_position <= position:
            return EMPTY_SLICE, position, first_size
        end, next_offset = self.batch_end_within(position, min(max_position, position + max_size))
        if end == position:  # the first batch alone is larger than max_size
            if first_size < 0:
                found = self.translate_offset(start_offset, position)
                first_size = found[1].batch_length + 12 if found is not None else 0
            if not min_one_batch or first_size <= 0:
                return EMPTY_SLICE, position, first_size
            end = position + first_size
        elif next_offset is not None:
            self._read_hint = (next_offset, end)
        return FileSlice(self.file(), position, end - position), position, first_size

    def read_next_offset(self) -> int:
        """The offset after the last batch (the base offset when the segment is empty)."""
        position = self.offset_index.last_entry()[1]
        next_offset = self.base_offset
        for _pos, header in scan_headers(self.file(), position, self._size):
            next_offset = header.base_offset + header.last_offset_delta + 1
        return next_offset

    def find_offset_by_timestamp(
        self, timestamp: int, starting_offset: int
    ) -> tuple[int, int, int] | None:
        """(timestamp, offset, leader epoch) of the first record at or after `timestamp`."""
        _ts, indexed_offset = self.time_index.lookup(timestamp)
        position = self.offset_index.lookup(max(indexed_offset, starting_offset))[1]
        handle = self.file()
        for pos, header in scan_headers(handle, position, self._size):
            if header.max_timestamp < timestamp:
                continue
            if header.base_offset + header.last_offset_delta < starting_offset:
                continue
            batch = RecordBatch.from_bytes(handle.pread(header.batch_length + 12, pos))
            for record in batch:
                if record.timestamp >= timestamp and record.offset >= starting_offset:
                    return record.timestamp, record.offset, header.partition_leader_epoch
        return None

    def collect_aborted_txns(
        self, fetch_offset: int, upper_bound: int
    ) -> tuple[list[AbortedTxn], bool]:
        return self.txn_index.collect(fetch_offset, upper_bound)

    # -- recovery and truncation -----------------------------------------------------------

    def recover(
        self, on_batch: BatchCallback | None = None, *, keep_txn_index: bool = False
    ) -> int:
        """Rebuild the indexes from the log, checking every batch; cut a bad tail.

        Returns the number of bytes truncated. `on_batch` sees each valid batch in order
        (producer state, aborted transactions and leader epochs are rebuilt through it);
        `keep_txn_index` keeps the aborted transactions when only the indexes are rebuilt.
        """
        was_active = self.active
        self.make_active()  # the indexes are rebuilt through writable mappings
        self._fast_size_limit = -1
        offset_index, time_index = self.offset_index, self.time_index
        offset_index.reset()
        time_index.reset()
        if not keep_txn_index:
            self.txn_index.reset()
        handle = self.file()
        file_size = handle.size()
        valid = 0
        last_index_entry = 0
        max_ts, offset_of_max = -1, self.base_offset
        next_offset = self.base_offset
        interval = self.config.index_interval_bytes
        try:
            for pos, header, data in read_batches(handle, 0, file_size):
                verify_crc(data, 0, header)
                last = header.base_offset + header.last_offset_delta
                if header.base_offset < next_offset or last - self.base_offset > 0x7FFFFFFF:
                    raise CorruptRecordError(
                        f"batch at {pos} has offsets {header.base_offset}..{last}, "
                        f"expected from {next_offset}"
                    )
                if header.max_timestamp > max_ts:
                    max_ts, offset_of_max = header.max_timestamp, last
                if pos - last_index_entry > interval:
                    offset_index.append(last, pos)
                    time_index.maybe_append(max_ts, offset_of_max)
                    last_index_entry = pos
                if on_batch is not None:
                    on_batch(header, data)
                valid = pos + header.batch_length + 12
                next_offset = last + 1
        except (CorruptRecordError, InvalidRecordError) as exc:
            log.warning("%s: invalid batch at position %d: %s", self.log_path, valid, exc)
        truncated = file_size - valid
        if truncated > 0:
            log.warning(
                "%s: truncating %d bytes of invalid data after position %d",
                self.log_path,
                truncated,
                valid,
            )
            handle.truncate(valid)
        self._size = valid
        self._read_hint = None
        self._max_timestamp = (max_ts, offset_of_max)
        time_index.maybe_append(max_ts, offset_of_max, skip_full_check=True)
        self._bytes_since_index = valid - last_index_entry if valid else 0
        self._rolling_timestamp = None
        if not was_active:
            self.on_become_inactive()
        return truncated

    def truncate_to(self, offset: int, now_ms: int) -> int:
        """Remove every batch from the one holding `offset` on; returns bytes removed."""
        found = self.translate_offset(offset)
        self.make_active()
        self._fast_size_limit = -1
        offset_index, time_index = self.offset_index, self.time_index
        offset_index.truncate_to(offset)
        time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        if found is None:
            return 0
        position = found[0]
        self._read_hint = None
        removed = self._size - position
        self.file().truncate(position)
        self._size = position
        if position == 0:
            self.created_ms = now_ms
            self._rolling_timestamp = None
        self._bytes_since_index = 0
        self._max_timestamp = self._read_largest_timestamp()
        return removed

    def _read_largest_timestamp(self) -> tuple[int, int]:
        ts, offset = self.time_index.last_entry()
        position = self.offset_index.lookup(offset)[1]
        for _pos, header in scan_headers(self.file(), position, self._size):
            if header.max_timestamp > ts:
                ts, offset = header.max_timestamp, header.base_offset + header.last_offset_delta
        return ts, offset

    # -- life cycle --------------------------------------------------------------------------

    def make_active(self) -> None:
        """Open the indexes read-write again (the segment became the last one)."""
        if self.active:
            return
        self.active = True
        OPEN_SEGMENTS.forget(self)
        for index in (self._offset_index, self._time_index):
            if index is not None:
                index.make_writable()

    def on_become_inactive(self) -> None:
        """The segment rolled: record its largest timestamp, trim and freeze its indexes."""
        self._fast_size_limit = -1
        entry = self._max_timestamp_entry()
        self.time_index.maybe_append(entry[0], entry[1], skip_full_check=True)
        self.offset_index.make_read_only()
        self.time_index.make_read_only()
        if self.config.preallocate and self._log is not None:
            self._log.truncate(self._size)
        self.active = False
        OPEN_SEGMENTS.touch(self)

    def flush(self) -> None:
        """fsync the log and its indexes (called off the event loop)."""
        handle = self._log
        if handle is not None and not handle.closed:
            handle.fsync()
        else:  # closed while idle (OPEN_SEGMENTS): its pages may still be dirty
            fsync_path(self.log_path)
        for index, path in (
            (self._offset_index, self.index_path),
            (self._time_index, self.time_index_path),
        ):
            if index is not None:
                index.flush()
            elif path.exists():
                fsync_path(path)
        self.txn_index.flush()

    def close(self) -> None:
        """Record the largest timestamp, trim the indexes and the file, let the files go."""
        self._fast_size_limit = -1
        if self.active and self._max_timestamp is not None and self._max_timestamp[0] >= 0:
            self.time_index.maybe_append(*self._max_timestamp, skip_full_check=True)
        for index in (self._offset_index, self._time_index):
            if index is not None:
                index.close()
        if self._log is not None and not self._log.closed and self.config.preallocate:
            self._log.truncate(self._size)
        self._log = None
        self._offset_index = self._time_index = None
        self.txn_index.close()

    def change_suffix(self, new_suffix: str) -> None:
        """Rename the segment's files (`.cleaned` -> `.swap` -> ``, or `` -> `.deleted`)."""
        old = self.suffix
        self.suffix = new_suffix
        new_log = segment_file(self.directory, self.base_offset, LOG_SUFFIX, new_suffix)
        os.replace(self.log_path, new_log)
        self.log_path = new_log
        for index, suffix in (
            (self._offset_index, INDEX_SUFFIX),
            (self._time_index, TIME_INDEX_SUFFIX),
        ):
            target = segment_file(self.directory, self.base_offset, suffix, new_suffix)
            if index is not None:
                index.rename(target)
            else:
                source = segment_file(self.directory, self.base_offset, suffix, old)
                if source.exists():
                    os.replace(source, target)
        self.txn_index.rename(
            segment_file(self.directory, self.base_offset, TXN_INDEX_SUFFIX, new_suffix)
        )

    def paths(self) -> list[Path]:
        return [
            self.log_path,
            self.index_path,
            self.time_index_path,
            self.txn_index.path,
        ]

    def delete_files(self) -> None:
        """Unlink the files now; open descriptors keep in-flight reads working."""
        for path in self.paths():
            path.unlink(missing_ok=True)

    def set_last_modified(self, ms: int) -> None:
        for path in (self.log_path, self.index_path, self.time_index_path):
            if path.exists():
                os.utime(path, ns=(ms * 1_000_000, ms * 1_000_000))

    def indexes_exist(self) -> bool:
        return self.index_path.exists() and self.time_index_path.exists()
