"""One partition's log: its offsets, appends, rolling, flushing, truncation and closing.

The seams, as in Kafka: `validation` checks an append's batches and assigns their offsets
(LogValidator), `appends` what it does to producer state, `fast_append` the common append in
one call, `reads` fetches and offset lookups, `retention` which segments go. `Log` owns the
state and the lock, and calls them.

`Log` is synchronous and thread-safe: appends, truncations and other changes hold the log's
lock; reads work on a copy-on-write snapshot of the segment list and take no lock. The broker
appends and reads on its event loop (an append is a `pwrite` of bytes it already has); the
log manager runs `flush`, `delete_old_segments` and the cleaner in threads.

Appends validate batch headers and CRCs, patch base offsets and leader epochs in place, and
check producer state from headers only: no record is decoded on the hot path (compacted topics
excepted: Kafka requires a key on every record there, which needs the records).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from gregor.protocol.errors import (
    KafkaStorageError,
    OffsetOutOfRangeError,
    RecordListTooLargeError,
    UnknownServerError,
)
from gregor.protocol.records import BatchHeader, ControlType, build_control_batch
from gregor.storage.appends import analyze_producers, apply_producer_updates, replay_segment
from gregor.storage.checkpoints import write_partition_metadata
from gregor.storage.config import LogConfig
from gregor.storage.deletion import DeletionQueue
from gregor.storage.epoch_cache import LeaderEpochCache
from gregor.storage.fast_append import log_fast_append
from gregor.storage.fast_append import segment_fast_append as _segment_fast_append
from gregor.storage.files import fsync_path
from gregor.storage.names import SWAP_SUFFIX, parse_partition_dir
from gregor.storage.producer_state import AppendOrigin, BatchMetadata, ProducerStateManager
from gregor.storage.reads import (
    PositionCache,
    aborted_in_read,
    collect_aborted_transactions,
    offset_for_timestamp,
    read_range,
)
from gregor.storage.results import (
    NO_TIMESTAMP,
    AppendInfo,
    FetchDataInfo,
    FetchIsolation,
    TimestampAndOffset,
)
from gregor.storage.retention import (
    Deletable,
    below_log_start,
    deletable_segments,
    expired,
    over_size,
    retire,
)
from gregor.storage.segment import LogSegment
from gregor.storage.segments import SegmentList
from gregor.storage.txn_index import AbortedTxn
from gregor.storage.validation import (
    Assigned,
    Headers,
    assign_offsets,
    check_leader_append,
    follower_offsets,
    validate_batches,
)

log = logging.getLogger(__name__)

Clock = Callable[[], int]


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


_CLIENT = AppendOrigin.CLIENT


class UnexpectedAppendOffsetError(UnknownServerError):
    """A follower append whose first offset is below the log end offset."""


class Log:
    """A partition's segmented log in its directory `<log.dir>/<topic>-<partition>`."""

    # Slots: the C twin of `_fast_append` reads and writes its state through these slots'
    # offsets (resolved once, in `fast_append.log_fast_append`).
    __slots__ = (
        "__weakref__",
        "_first_unstable",
        "_hw",
        "_leo",
        "_lock",
        "_log_start_offset",
        "_noted_epoch",
        "_noted_version",
        "_own_deletions",
        "_pending_snapshots",
        "_positions",
        "clock",
        "closed",
        "config",
        "deletions",
        "dir",
        "epoch_cache",
        "last_flush_ms",
        "offline",
        "on_flush_needed",
        "on_io_error",
        "partition",
        "producer_state",
        "recovery_point",
        "segments",
        "structure_version",
        "topic",
        "topic_id",
    )

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        *,
        segments: SegmentList,
        log_start_offset: int,
        log_end_offset: int,
        recovery_point: int,
        high_watermark: int,
        producer_state: ProducerStateManager,
        epoch_cache: LeaderEpochCache,
        topic_id: uuid.UUID | None = None,
        clock: Clock = wall_clock_ms,
        deletions: DeletionQueue | None = None,
    ) -> None:
        self.dir = directory
        parsed = parse_partition_dir(directory.name)
        self.topic, self.partition = parsed if parsed is not None else (directory.name, 0)
        self.config = config
        self.topic_id = topic_id
        self.clock = clock
        self.deletions = deletions if deletions is not None else DeletionQueue()
        self._own_deletions = deletions is None
        self.segments = segments
        self.producer_state = producer_state
        self.epoch_cache = epoch_cache
        self._lock = threading.RLock()
        self._log_start_offset = log_start_offset
        self._leo = log_end_offset
        self.recovery_point = min(recovery_point, log_end_offset)
        self.last_flush_ms = clock()
        self._hw = min(max(high_watermark, log_start_offset), log_end_offset)
        self._positions = PositionCache()
        self._first_unstable: int | None = None
        self._pending_snapshots: list[Path] = []
        self._noted_epoch, self._noted_version = -1, -1  # see _note_epoch
        self.offline = False
        self.closed = False
        # Bumped by truncations: a cleaner that started before one must not swap its output in.
        self.structure_version = 0
        # Set by the log manager: flushing runs off the event loop, I/O errors take the
        # directory offline. Without a manager, flushes run inline and errors just raise.
        self.on_flush_needed: Callable[[Log], None] | None = None
        self.on_io_error: Callable[[Log, OSError], None] | None = None
        self._update_first_unstable()

    # -- identity and offsets --------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.dir.name

    @property
    def topic_partition(self) -> tuple[str, int]:
        return self.topic, self.partition

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._leo

    @property
    def high_watermark(self) -> int:
        return self._hw

    @high_watermark.setter
    def high_watermark(self, offset: int) -> None:
        self.update_high_watermark(offset)

    @property
    def last_stable_offset(self) -> int:
        unstable = self._first_unstable
        return unstable if unstable is not None and unstable < self._hw else self._hw

    @property
    def size(self) -> int:
        return self.segments.size_in_bytes()

    @property
    def active_segment(self) -> LogSegment:
        return self.segments.active

    def __repr__(self) -> str:
        return (
            f"Log({self.name}, start={self._log_start_offset}, end={self._leo}, "
            f"hw={self._hw}, segments={len(self.segments)})"
        )

    def update_high_watermark(self, offset: int) -> int:
        """Set the high watermark (clamped to the log's offsets); returns the value set."""
        with self._lock:
            hw = min(max(offset, self._log_start_offset), self._leo)
            if hw != self._hw:
                self._hw = hw
                self.producer_state.on_high_watermark_updated(hw)
                self._update_first_unstable()
            return hw

    def maybe_increment_high_watermark(self, offset: int) -> bool:
        """Raise the high watermark to `offset` if that is higher (the leader's rule)."""
        with self._lock:
            if offset > self._hw:
                self.update_high_watermark(offset)
                return True
            return False

    def _update_first_unstable(self) -> None:
        """The LSO's input: the first offset of an undecided transaction, or of a decided one
        whose marker is not below the high watermark yet (Kafka's firstUnstableOffset)."""
        producer_state = self.producer_state
        producer_state.on_high_watermark_updated(self._hw)  # e.g. markers replayed at load
        unstable = producer_state.first_unstable_offset()
        if unstable is not None and unstable < self._log_start_offset:
            unstable = self._log_start_offset
        self._first_unstable = unstable

    # -- errors ------------------------------------------------------------------------------

    def _storage_error(self, what: str, exc: OSError) -> KafkaStorageError:
        self.offline = True
        hook = self.on_io_error
        if hook is not None:
            hook(self, exc)
        return KafkaStorageError(f"{what} of {self.name} in {self.dir.parent} failed: {exc}")

    @contextmanager
    def _io(self, what: str) -> Iterator[None]:
        if self.offline:
            raise KafkaStorageError(f"{self.name} is in an offline log directory {self.dir.parent}")
        try:
            yield
        except OSError as exc:
            raise self._storage_error(what, exc) from exc

    # -- appends -------------------------------------------------------------------------------

    def append_as_leader(
        self,
        records: bytes | bytearray | memoryview,
        leader_epoch: int,
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> AppendInfo:
        """Append a producer's batches: assign offsets, stamp the leader epoch, validate.

        Raises CorruptRecordError (bad CRC or sizes), MessageTooLargeError (a batch over
        `max.message.bytes`), InvalidRecordError, InvalidTimestampError, and the producer
        state errors (OutOfOrderSequenceNumber, InvalidProducerEpoch, InvalidTxnState,
        TransactionCoordinatorFenced). A duplicate of one of a producer's last five batches is
        not written again; its original offsets are returned with `duplicate=True`.
        """
        if origin is _CLIENT:
            try:
                info = _fast_append(self, records, leader_epoch)
            except OSError as exc:
                with self._lock:
                    raise self._storage_error("append", exc) from exc
            if info is not None:
                return info
        return self._append_checked(records, leader_epoch, origin)

    def append_txn_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        control: ControlType,
        coordinator_epoch: int,
        leader_epoch: int,
        timestamp: int | None = None,
    ) -> AppendInfo:
        """Write the COMMIT or ABORT marker of a producer's transaction (WriteTxnMarkers, on
        the partition leader): a control batch of one record, appended as the coordinator's.

        It completes the producer's ongoing transaction, if any (a marker without one is
        written all the same, as Kafka does); an ABORT adds the transaction to the segment's
        `.txnindex`. The LSO moves past the transaction once the marker is below the high
        watermark. Raises InvalidProducerEpoch (an epoch below the producer's),
        TransactionCoordinatorFenced (a coordinator epoch below its last marker's) and
        KafkaStorageError."""
        marker = build_control_batch(
            control,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            coordinator_epoch=coordinator_epoch,
            timestamp=self.clock() if timestamp is None else timestamp,
        )
        return self.append_as_leader(marker, leader_epoch, AppendOrigin.COORDINATOR)

    def _fast_append(
        self, records: bytes | bytearray | memoryview, leader_epoch: int
    ) -> AppendInfo | None:
        """The fast append of `append_as_leader`: one batch of a producer without a producer
        id, for a log with nothing to check in records or timestamps, into an active segment
        that needs no roll. `LogSegment.fast_append` checks the batch (sizes, magic, CRC),
        stamps its first 16 bytes with the offset and epoch, writes them and the rest of the
        caller's bytes (no copy) with one pwritev and indexes it; around it, under the log's
        lock, the log end offset, the epoch cache and the flush policy. None, having written
        nothing, when the checked path must take the batch; OSError (errno set) when the
        write fails.

        This is the reference; `fast_append.log_fast_append` is its C twin, one call for all
        of it, which `append_as_leader` uses where built.
        """
        config = self.config
        if not config.fast_appends:
            return None
        lock = self._lock
        lock.acquire()
        try:
            segment = self.segments.last
            if segment is None or self.offline:
                return None
            offset = self._leo
            info = _segment_fast_append(
                segment,
                records,
                offset,
                leader_epoch,
                config.fast_append_max_bytes,
                self._log_start_offset,
            )
            if info is None:
                return None
            self._leo = end = info.last_offset + 1
            self.producer_state.map_end_offset = end
            if leader_epoch >= 0 and (
                leader_epoch != self._noted_epoch or self.epoch_cache.version != self._noted_version
            ):
                self._note_epoch(leader_epoch, offset)
            if end - self.recovery_point >= config.flush_messages:
                self._request_flush()
            return info
        finally:
            lock.release()

    def _note_epoch(self, epoch: int, offset: int) -> None:
        """`epoch_cache.assign` for the fast append. It skips this (inline) while nothing
        changed the cache since it last found `epoch` current (offsets only grow meanwhile)."""
        cache = self.epoch_cache
        cache.assign(epoch, offset)
        self._noted_epoch, self._noted_version = epoch, cache.version

    def _append_checked(
        self,
        records: bytes | bytearray | memoryview,
        leader_epoch: int,
        origin: AppendOrigin,
    ) -> AppendInfo:
        """Any append of a leader, every check in turn (the fast append's reference)."""
        headers = validate_batches(
            records, self.name, self.config.max_message_bytes, origin, strict=True
        )
        if not headers:
            return self._empty_append_info()
        now = self.clock()
        append_time = check_leader_append(records, headers, self.config, self.name, now)
        with self._lock:
            if self.offline:
                raise KafkaStorageError(f"{self.name} is in an offline log directory")
            assigned = assign_offsets(records, headers, self._leo, leader_epoch, append_time)
            return self._append_locked(
                assigned, records, headers, append_time, origin, leader_epoch, now
            )

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> AppendInfo:
        """Append a leader's batches with the offsets and epochs they carry."""
        headers = validate_batches(
            records,
            self.name,
            self.config.max_message_bytes,
            AppendOrigin.REPLICATION,
            strict=False,
        )
        if not headers:
            return self._empty_append_info()
        assigned = follower_offsets(records, headers, self.name)
        first_header = headers[0][1]
        with self._lock:
            if self.offline:
                raise KafkaStorageError(f"{self.name} is in an offline log directory")
            if first_header.base_offset + first_header.last_offset_delta < self._leo:
                raise UnexpectedAppendOffsetError(
                    f"follower append to {self.name} starts at {first_header.base_offset}, "
                    f"below the log end offset {self._leo}"
                )
            return self._append_locked(
                assigned,
                records,
                headers,
                NO_TIMESTAMP,
                AppendOrigin.REPLICATION,
                None,
                self.clock(),
            )

    def _empty_append_info(self) -> AppendInfo:
        return AppendInfo(-1, -1, NO_TIMESTAMP, -1, NO_TIMESTAMP, self._log_start_offset, 0, 0)

    def _append_locked(
        self,
        assigned: Assigned,
        records: bytes | bytearray | memoryview,
        headers: Headers,
        append_time: int,
        origin: AppendOrigin,
        leader_epoch: int | None,
        now: int,
    ) -> AppendInfo:
        """Check producer state, roll if needed, write, and update the log's state."""
        first_offset, last_offset = assigned.bases[0], assigned.last_offset
        last_pos, last_header = headers[-1]
        size = last_pos + last_header.batch_length + 12 - headers[0][0]
        if size > self.config.segment_bytes:
            raise RecordListTooLargeError(
                f"append of {size} bytes to {self.name} exceeds the segment size "
                f"{self.config.segment_bytes} (segment.bytes)"
            )
        producer_state = self.producer_state
        changes = analyze_producers(producer_state, records, headers, assigned.bases, origin)
        if changes.duplicate is not None:
            return self._duplicate_info(*changes.duplicate)
        try:
            segment = self.segments.active
            if segment.should_roll(
                now_ms=now,
                append_size=size,
                max_timestamp=assigned.max_timestamp,
                max_offset=last_offset,
            ):
                segment = self._roll(first_offset)
            if leader_epoch is not None:
                if leader_epoch >= 0:
                    self.epoch_cache.assign(leader_epoch, first_offset)
            else:
                for _pos, header in headers:
                    if header.partition_leader_epoch >= 0:
                        self.epoch_cache.assign(header.partition_leader_epoch, header.base_offset)
            segment.append(
                last_offset,
                assigned.max_timestamp,
                assigned.offset_of_max_timestamp,
                assigned.parts,
                size,
            )
            self._leo = last_offset + 1
            if changes.updates:
                apply_producer_updates(producer_state, changes, segment)
                self._update_first_unstable()
        except OSError as exc:
            raise self._storage_error("append", exc) from exc
        producer_state.map_end_offset = last_offset + 1
        if self._leo - self.recovery_point >= self.config.flush_messages:
            self._request_flush()
        if leader_epoch is None:
            leader_epoch = last_header.partition_leader_epoch
        count = last_header.records_count
        if len(headers) > 1:
            count = sum(h.records_count for _p, h in headers)
        return AppendInfo(
            first_offset,
            last_offset,
            assigned.max_timestamp,
            assigned.offset_of_max_timestamp,
            append_time,
            self._log_start_offset,
            size,
            count,
            leader_epoch if leader_epoch >= 0 else None,
        )

    def _duplicate_info(self, duplicate: BatchMetadata, header: BatchHeader) -> AppendInfo:
        return AppendInfo(
            duplicate.first_offset,
            duplicate.last_offset,
            duplicate.timestamp,
            duplicate.last_offset,
            duplicate.timestamp if self.config.log_append_time else NO_TIMESTAMP,
            self._log_start_offset,
            0,
            header.records_count,
            duplicate=True,
        )

    # -- rolling -----------------------------------------------------------------------------

    def roll(self, expected_next_offset: int | None = None) -> LogSegment:
        """Start a new active segment at the log end offset (or the given later offset)."""
        with self._lock, self._io("roll"):
            return self._roll(expected_next_offset)

    def _roll(self, expected_next_offset: int | None = None) -> LogSegment:
        new_offset = max(expected_next_offset or 0, self._leo)
        previous = self.segments.active
        if previous.base_offset == new_offset and previous.size == 0:
            return previous  # nothing written since the last roll
        existing = self.segments.get(new_offset)
        if existing is not None:
            raise KafkaStorageError(
                f"cannot roll {self.name} to offset {new_offset}: a segment starts there"
            )
        previous.on_become_inactive()
        self.producer_state.map_end_offset = max(self.producer_state.map_end_offset, new_offset)
        snapshot = self.producer_state.take_snapshot(sync=False)
        if snapshot is not None:
            self._pending_snapshots.append(snapshot)
        segment = LogSegment(
            self.dir, new_offset, self.config, created_ms=self.clock(), active=True, new=True
        )
        self.segments.add(segment)
        self._positions.clear()
        self._request_flush()
        return segment

    # -- flushing ------------------------------------------------------------------------------

    def _request_flush(self) -> None:
        hook = self.on_flush_needed
        if hook is not None:
            hook(self)
        else:
            self.flush()

    def flush(self, up_to: int | None = None) -> None:
        """Make everything below `up_to` (default: the log end offset) durable.

        fsyncs the segments between the recovery point and `up_to` and moves the recovery
        point. Run it off the event loop.
        """
        with self._lock:
            if self.offline or self.closed:
                return
            offset = self._leo if up_to is None else min(up_to, self._leo)
            if offset <= self.recovery_point:
                return
            segments = self.segments.between(self.recovery_point, offset)
            snapshots, self._pending_snapshots = self._pending_snapshots, []
        try:
            for segment in segments:
                try:
                    segment.flush()
                except FileNotFoundError:
                    if not segment.deleted:
                        raise
                    # deleted (retention, truncation) meanwhile: nothing of it to keep
            self.epoch_cache.flush()
            for path in snapshots:
                try:
                    fsync_path(path)
                except FileNotFoundError:
                    pass  # removed with its segment
        except OSError as exc:
            raise self._storage_error("flush", exc) from exc
        with self._lock:
            if offset > self.recovery_point:
                self.recovery_point = offset
            self.last_flush_ms = self.clock()

    # -- reads -----------------------------------------------------------------------------

    def read(
        self,
        start_offset: int,
        max_bytes: int,
        isolation: FetchIsolation = FetchIsolation.HIGH_WATERMARK,
        min_one_batch: bool = True,
        max_offset: int | None = None,
    ) -> FetchDataInfo:
        """Whole batches from the one holding `start_offset`, at most `max_bytes` of them.

        With `min_one_batch` the first batch is returned whole even if larger (KIP-74). The
        upper bound is the log end (followers), the high watermark, or the last stable offset
        (read_committed, with the aborted transactions of the range), and `max_offset` when
        given. Raises OffsetOutOfRangeError outside [log start, log end].
        """
        if self.offline:
            raise KafkaStorageError(f"{self.name} is in an offline log directory")
        leo = self._leo
        hw, log_start = self._hw, self._log_start_offset
        lso = self.last_stable_offset
        if start_offset < log_start or start_offset > leo:
            raise OffsetOutOfRangeError(
                f"offset {start_offset} is out of range for {self.name}: "
                f"the log holds [{log_start}, {leo})"
            )
        if isolation is FetchIsolation.LOG_END:
            bound = leo
        elif isolation is FetchIsolation.HIGH_WATERMARK:
            bound = hw
        else:
            bound = lso
        if max_offset is not None:
            bound = min(bound, max_offset)
        segments = self.segments
        try:
            segment, records, incomplete = read_range(
                segments, self._positions, start_offset, max_bytes, min_one_batch, bound, leo
            )
            aborted = None
            if isolation is FetchIsolation.TXN_COMMITTED:
                aborted = aborted_in_read(segments, start_offset, segment, records, leo)
        except (FileNotFoundError, ValueError) as exc:
            # The segment was deleted (retention, truncation) while it was being read.
            raise OffsetOutOfRangeError(
                f"offset {start_offset} of {self.name} went away during the read: {exc}"
            ) from None
        except OSError as exc:
            raise self._storage_error("read", exc) from exc
        return FetchDataInfo(
            records,
            start_offset,
            hw,
            log_start,
            lso,
            leo,
            aborted,
            first_entry_incomplete=incomplete,
        )

    def collect_aborted_transactions(self, start_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions that overlap [start_offset, upper_bound)."""
        return collect_aborted_transactions(self.segments, start_offset, upper_bound)

    def offset_for_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """ListOffsets: the first offset at or after `timestamp`, or a special lookup.

        `-2` earliest, `-1` latest (the log end; the broker bounds it by HW or LSO), `-3` the
        record with the largest timestamp, `-4` earliest local. None when nothing matches.
        """
        with self._io("offset lookup"):
            return offset_for_timestamp(
                self.segments, self.epoch_cache, timestamp, self._log_start_offset, self._leo
            )

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int] | None:
        """(epoch, end offset) for OffsetsForLeaderEpoch; None when unknown."""
        found_epoch, offset = self.epoch_cache.end_offset_for(epoch, self._leo)
        return None if offset < 0 else (found_epoch, offset)

    # -- log start offset and retention --------------------------------------------------------

    def delete_records(self, before_offset: int) -> int:
        """DeleteRecords: move the log start offset up to `before_offset` (at most the HW).

        Returns the new log start offset; the segments wholly below it go with the next
        retention pass.
        """
        with self._lock, self._io("delete records"):
            if before_offset > self._hw:
                raise OffsetOutOfRangeError(
                    f"cannot move the log start offset of {self.name} to {before_offset}, "
                    f"beyond the high watermark {self._hw}"
                )
            self._increment_log_start_offset(before_offset)
            return self._log_start_offset

    def _increment_log_start_offset(self, offset: int) -> None:
        if offset <= self._log_start_offset:
            return
        self._log_start_offset = offset
        self.epoch_cache.truncate_from_start(offset)
        self.producer_state.on_log_start_offset_incremented(offset)
        self._update_first_unstable()

    def delete_old_segments(self) -> int:
        """Retention: delete segments below the log start offset, over `retention.bytes` or
        older than `retention.ms` (for `cleanup.policy` delete). Returns how many went."""
        with self._lock, self._io("retention"):
            deleted = self._delete_segments(below_log_start(self._log_start_offset))
            config = self.config
            if config.delete:
                deleted += self._delete_segments(over_size(self.size, config.retention_bytes))
                deleted += self._delete_segments(expired(self.clock(), config.retention_ms))
            return deleted

    def _delete_segments(self, predicate: Deletable | None) -> int:
        if predicate is None:
            return 0
        segments = self.segments
        deletable = deletable_segments(segments, self._leo, self._hw, predicate)
        if not deletable:
            return 0
        if len(deletable) == len(segments):
            self._roll()
        new_start = segments.higher(deletable[-1].base_offset)
        if new_start is None:
            raise KafkaStorageError(f"{self.name} has no segment after {deletable[-1]}")
        self._increment_log_start_offset(new_start.base_offset)
        self._remove_segments(deletable)
        self.producer_state.delete_snapshots_before(segments.first.base_offset)
        return len(deletable)

    def _remove_segments(self, segments: list[LogSegment]) -> None:
        """Take segments out of the log now; unlink their files after file.delete.delay.ms."""
        paths = retire(segments)
        self.segments.remove(segments)
        self._positions.clear()
        self.deletions.schedule(paths, self.clock() + self.config.file_delete_delay_ms)

    # -- leader epochs --------------------------------------------------------------------------

    def begin_epoch(self, epoch: int) -> int:
        """A new leader's `epoch` starts at the log end offset, which is returned; the leader
        epoch checkpoint is written. A write that fails takes the log offline (as an append
        does) and raises KafkaStorageError."""
        with self._lock, self._io("leader epoch checkpoint"):
            start = self._leo
            self.epoch_cache.assign(epoch, start)
            return start

    # -- truncation (followers) -----------------------------------------------------------------

    def truncate_to(self, target: int) -> bool:
        """Remove everything at and after `target`; returns whether anything went."""
        if target < 0:
            raise ValueError(f"cannot truncate {self.name} to a negative offset {target}")
        with self._lock, self._io("truncate"):
            if target >= self._leo:
                return False
            if self.segments.first.base_offset > target:
                self._truncate_fully(target)
                return True
            doomed = [s for s in self.segments.all() if s.base_offset > target]
            if doomed:
                if self.segments.floor(target) is None:
                    raise KafkaStorageError(f"no segment of {self.name} holds {target}")
                self._remove_segments(doomed)
            active = self.segments.active
            active.truncate_to(target, self.clock())
            self._leo = active.read_next_offset()
            self._after_truncation()
            return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and start again, empty, at `offset`."""
        with self._lock, self._io("truncate"):
            self._truncate_fully(offset)

    def _truncate_fully(self, offset: int) -> None:
        old = self.segments.all()
        paths = retire(old)
        segment = LogSegment(
            self.dir, offset, self.config, created_ms=self.clock(), active=True, new=True
        )
        self.segments.replace([segment], old)
        self.deletions.schedule(paths, self.clock() + self.config.file_delete_delay_ms)
        self._leo = offset
        self._log_start_offset = offset
        self.epoch_cache.clear()
        self.producer_state.truncate_fully_and_start_at(offset)
        self._after_truncation()

    def _after_truncation(self) -> None:
        leo = self._leo
        self.structure_version += 1
        self._positions.clear()
        self.epoch_cache.truncate_from_end(leo)
        if self._log_start_offset > leo:
            self._log_start_offset = leo
        self.recovery_point = min(self.recovery_point, leo)
        self._hw = min(max(self._hw, self._log_start_offset), leo)
        self.rebuild_producer_state(leo)
        self._update_first_unstable()

    # -- producer state ------------------------------------------------------------------------

    def rebuild_producer_state(self, up_to: int) -> None:
        """Load the latest snapshot below `up_to` and replay the batches after it."""
        psm = self.producer_state
        psm.truncate_and_reload(self._log_start_offset, up_to, self.clock())
        start = psm.map_end_offset
        if start < up_to:
            for segment in self.segments.between(start, up_to):
                replay_segment(psm, segment, start, up_to)
        psm.map_end_offset = up_to

    def take_producer_snapshot(self) -> None:
        with self._lock, self._io("producer snapshot"):
            self.producer_state.take_snapshot(sync=True)

    def remove_expired_producers(self) -> None:
        with self._lock:
            self.producer_state.remove_expired_producers(self.clock())

    def has_ongoing_transaction(self, producer_id: int) -> bool:
        entry = self.producer_state.producers.get(producer_id)
        return entry is not None and entry.current_txn_first_offset is not None

    def ongoing_transactions(self) -> dict[int, int]:
        """producer id -> first offset of each transaction with no marker yet, in offset
        order (DescribeProducers' currentTxnStartOffset; what the coordinator must finish)."""
        return {txn.producer_id: first for first, txn in self.producer_state.ongoing_txns.items()}

    # -- cleaner support -------------------------------------------------------------------------

    def replace_segments(
        self, new: LogSegment, old: list[LogSegment], *, expected_version: int | None = None
    ) -> bool:
        """Swap the cleaner's output in for the segments it was made from, atomically.

        The cleaned segment was written as `.cleaned`; it becomes `.swap`, the old segments
        leave the log (renamed `.deleted`), then the swap file takes its final name. A crash
        at any step is completed or undone by the next load. Returns False, changing
        nothing, when the log was truncated or lost one of `old` meanwhile.
        """
        with self._lock, self._io("segment swap"):
            current = {id(s) for s in self.segments.all()}
            if (
                self.closed
                or any(id(s) not in current for s in old)
                or (expected_version is not None and expected_version != self.structure_version)
            ):
                return False
            new.change_suffix(SWAP_SUFFIX)
            paths = retire(old)
            new.change_suffix("")
            self.segments.replace([new], old)
            self._positions.clear()
            self.deletions.schedule(paths, self.clock() + self.config.file_delete_delay_ms)
            return True

    def write_topic_id(self, topic_id: uuid.UUID) -> None:
        with self._lock, self._io("partition metadata"):
            write_partition_metadata(self.dir, topic_id)
            self.topic_id = topic_id

    # -- closing ---------------------------------------------------------------------------------

    def close(self) -> None:
        """Clean shutdown: snapshot producer state, flush, trim and close the files."""
        with self._lock:
            if self.closed:
                return
            if not self.offline:
                try:
                    self.producer_state.map_end_offset = self._leo
                    self.producer_state.take_snapshot(sync=True)
                    for segment in self.segments.all():
                        segment.close()
                    self.epoch_cache.flush()
                except OSError as exc:
                    raise self._storage_error("close", exc) from exc
            self.closed = True
        if self._own_deletions:
            self.deletions.run_due()

    def close_handles(self) -> None:
        """Let every file go without writing anything (the directory is offline)."""
        with self._lock:
            self.closed = True
            self.segments.clear()

    def delete(self) -> None:
        """Remove the whole log from disk (the partition was deleted)."""
        with self._lock:
            self.closed = True
            segments = self.segments.all()
            self.segments.clear()
            for segment in segments:
                segment.deleted = True


# The fast append of append_as_leader: Log._fast_append's C twin where built.
_fast_append: Callable[[Log, bytes | bytearray | memoryview, int], AppendInfo | None] = (
    log_fast_append(Log) or Log._fast_append
)
