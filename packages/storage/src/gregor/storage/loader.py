"""Opening a log: clean up interrupted work, load segments, recover what was not flushed.

The steps, as Kafka's `LogLoader`:

1. Files of interrupted work go: `.deleted` (a retention or truncation whose unlink did not
   happen), `.cleaned` (a cleaner run that did not finish), `.tmp` (a checkpoint or snapshot
   write). A `.swap` segment (a cleaner swap half done) replaces the segments it covers.
2. Every `.log` file becomes a segment; a segment whose indexes are missing gets them rebuilt.
3. After an unclean shutdown, every segment from the one holding the recovery point on is
   recovered: each batch is checked (size, CRC, increasing offsets), the indexes and the
   aborted transactions are rebuilt, and a torn or garbage tail is cut at the last valid
   batch (later segments are then dropped).
4. Producer state comes from the latest snapshot plus the batches after it; the leader epoch
   cache is cut to the log's offsets (and rebuilt from the batches if its file is corrupt).
"""

from __future__ import annotations

import logging
import os
import uuid
from pathlib import Path

from gregor.protocol.errors import InconsistentTopicIdError
from gregor.protocol.records import BatchHeader
from gregor.storage.appends import apply_batch, complete_txn, replay_segment
from gregor.storage.batches import scan_headers
from gregor.storage.checkpoints import (
    LEADER_EPOCH_CHECKPOINT,
    CorruptCheckpointError,
    read_partition_metadata,
    write_partition_metadata,
)
from gregor.storage.config import DAY_MS, LogConfig
from gregor.storage.deletion import DeletionQueue
from gregor.storage.epoch_cache import LeaderEpochCache
from gregor.storage.index import CorruptIndexError
from gregor.storage.log import Clock, Log, wall_clock_ms
from gregor.storage.names import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    parse_offset_file,
    segment_file,
)
from gregor.storage.producer_state import ProducerStateManager
from gregor.storage.segment import BatchCallback, LogSegment
from gregor.storage.segments import SegmentList

log = logging.getLogger(__name__)


def open_log(
    directory: Path,
    config: LogConfig,
    *,
    log_start_offset: int = 0,
    recovery_point: int = 0,
    high_watermark: int = 0,
    clean_shutdown: bool = False,
    topic_id: uuid.UUID | None = None,
    clock: Clock = wall_clock_ms,
    deletions: DeletionQueue | None = None,
    producer_id_expiration_ms: int = DAY_MS,
    max_txn_timeout_ms: int = 15 * 60_000,
) -> Log:
    """Load (or create) the log in `directory` and recover it if needed."""
    directory.mkdir(parents=True, exist_ok=True)
    stored_id = _read_topic_id(directory)
    if topic_id is not None and stored_id is not None and stored_id != topic_id:
        raise InconsistentTopicIdError(
            f"{directory} holds topic id {stored_id}, not the expected {topic_id}"
        )
    if topic_id is not None and stored_id is None:
        write_partition_metadata(directory, topic_id)
    now = clock()
    _remove_interrupted_work(directory, config, now)
    segments = _load_segments(directory, config, now)
    if not segments:
        segments = [
            LogSegment(
                directory, max(log_start_offset, 0), config, created_ms=now, active=True, new=True
            )
        ]
    segments[-1].make_active()
    sanity_check(segments[-1])
    segment_list = SegmentList(segments)
    psm = ProducerStateManager(
        directory,
        producer_id_expiration_ms=producer_id_expiration_ms,
        max_txn_timeout_ms=max_txn_timeout_ms,
    )
    epoch_cache = LeaderEpochCache(directory / LEADER_EPOCH_CHECKPOINT)
    log_start = max(log_start_offset, segment_list.first.base_offset)

    if clean_shutdown:
        leo = segment_list.active.read_next_offset()
    else:
        leo = _recover(segment_list, psm, epoch_cache, log_start, recovery_point, now)
    if epoch_cache.corrupt_on_load:
        _rebuild_epoch_cache(segment_list, epoch_cache)

    if log_start > leo:
        # The checkpointed start is past the data (e.g. every record was deleted): start empty.
        log.warning("%s: log start offset %d is past the end %d", directory, log_start, leo)
        for segment in segment_list.all():
            segment.delete_files()
        segment_list = SegmentList(
            [LogSegment(directory, log_start, config, created_ms=now, active=True, new=True)]
        )
        leo = log_start
        psm.truncate_fully_and_start_at(log_start)

    psm.remove_stray_snapshots(s.base_offset for s in segment_list.all())
    result = Log(
        directory,
        config,
        segments=segment_list,
        log_start_offset=log_start,
        log_end_offset=leo,
        recovery_point=leo if clean_shutdown else min(recovery_point, leo),
        high_watermark=high_watermark,
        producer_state=psm,
        epoch_cache=epoch_cache,
        topic_id=topic_id if topic_id is not None else stored_id,
        clock=clock,
        deletions=deletions,
    )
    epoch_cache.truncate_from_end(leo)
    epoch_cache.truncate_from_start(log_start)
    if psm.map_end_offset != leo or clean_shutdown:
        result.rebuild_producer_state(leo)
    psm.delete_snapshots_before(segment_list.first.base_offset)
    return result


def _read_topic_id(directory: Path) -> uuid.UUID | None:
    try:
        return read_partition_metadata(directory)
    except CorruptCheckpointError as exc:
        log.warning("%s: ignoring a corrupt partition.metadata: %s", directory, exc)
        return None


def _remove_interrupted_work(directory: Path, config: LogConfig, now: int) -> None:
    names = sorted(os.listdir(directory))
    swaps: list[int] = []
    for name in names:
        path = directory / name
        if name.endswith(".tmp"):
            path.unlink(missing_ok=True)
            continue
        parsed = parse_offset_file(name)
        if parsed is None:
            continue
        base, suffix, extra = parsed
        if extra in (DELETED_SUFFIX, CLEANED_SUFFIX):
            path.unlink(missing_ok=True)
        elif extra == SWAP_SUFFIX:
            if suffix == LOG_SUFFIX:
                swaps.append(base)
            else:
                path.unlink(missing_ok=True)  # the indexes are rebuilt from the log
    for base in swaps:
        _complete_swap(directory, config, base, now)


def _complete_swap(directory: Path, config: LogConfig, base: int, now: int) -> None:
    """Finish a cleaner swap: the `.swap` segment replaces the segments in its range."""
    swapped = LogSegment(directory, base, config, created_ms=now, suffix=SWAP_SUFFIX, active=False)
    swapped.recover(keep_txn_index=True)
    end = swapped.read_next_offset()
    for name in os.listdir(directory):
        parsed = parse_offset_file(name)
        if parsed is None or parsed[2] or parsed[1] != LOG_SUFFIX:
            continue
        if base <= parsed[0] < end:
            for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
                segment_file(directory, parsed[0], suffix).unlink(missing_ok=True)
    swapped.change_suffix("")
    swapped.close()
    log.info("%s: completed the swap of the cleaned segment at %d", directory, base)


def _load_segments(directory: Path, config: LogConfig, now: int) -> list[LogSegment]:
    logs: set[int] = set()
    others: list[tuple[int, Path]] = []
    for name in os.listdir(directory):
        parsed = parse_offset_file(name)
        if parsed is None or parsed[2]:
            continue
        if parsed[1] == LOG_SUFFIX:
            logs.add(parsed[0])
        elif parsed[1] in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
            others.append((parsed[0], directory / name))
    for base, path in others:
        if base not in logs:
            path.unlink(missing_ok=True)  # an index without its log
    segments: list[LogSegment] = []
    for base in sorted(logs):
        segment = LogSegment(directory, base, config, created_ms=now, active=False)
        if not segment.indexes_exist():
            log.info("%s: rebuilding the indexes of segment %d", directory, base)
            segment.recover(keep_txn_index=True)
        segments.append(segment)
    return segments


def _recover(
    segments: SegmentList,
    psm: ProducerStateManager,
    epoch_cache: LeaderEpochCache,
    log_start: int,
    recovery_point: int,
    now: int,
) -> int:
    """Recover the segments from the one holding the recovery point; returns the log end."""
    unflushed = segments.from_offset(max(recovery_point, segments.first.base_offset))
    start = unflushed[0].base_offset
    # Producer state as of the first unflushed segment, from a snapshot and the batches after.
    psm.truncate_and_reload(log_start, start, now)
    if psm.map_end_offset < start:
        for segment in segments.between(psm.map_end_offset, start):
            replay_segment(psm, segment, psm.map_end_offset, start)
    psm.map_end_offset = start
    for i, segment in enumerate(unflushed):
        truncated = segment.recover(_recovery_callback(segment, psm, epoch_cache))
        if truncated > 0:
            doomed = unflushed[i + 1 :]
            if doomed:
                log.warning(
                    "%s: dropping %d segments after the corruption in %s",
                    segment.directory,
                    len(doomed),
                    segment.log_path.name,
                )
                for later in doomed:
                    later.delete_files()
                segments.remove(doomed)
                segment.make_active()
            break
    leo = segments.active.read_next_offset()
    psm.map_end_offset = leo
    return leo


def _recovery_callback(
    segment: LogSegment, psm: ProducerStateManager, epoch_cache: LeaderEpochCache
) -> BatchCallback:
    def on_batch(header: BatchHeader, data: memoryview) -> None:
        epoch = header.partition_leader_epoch
        latest = epoch_cache.latest_epoch()
        if epoch >= 0 and (latest is None or epoch > latest):
            epoch_cache.assign(epoch, header.base_offset)
        done = apply_batch(psm, header, data if header.is_control else None)
        if done is not None:
            complete_txn(psm, done, segment)
        psm.map_end_offset = header.base_offset + header.last_offset_delta + 1

    return on_batch


def _rebuild_epoch_cache(segments: SegmentList, epoch_cache: LeaderEpochCache) -> None:
    epoch_cache.clear()
    for segment in segments.all():
        for _pos, header in scan_headers(segment.file(), 0, segment.size):
            epoch = header.partition_leader_epoch
            latest = epoch_cache.latest_epoch()
            if epoch >= 0 and (latest is None or epoch > latest):
                epoch_cache.assign(epoch, header.base_offset)


def sanity_check(segment: LogSegment) -> None:
    """Check a segment's indexes against its log; rebuild them when they do not fit."""
    try:
        segment.offset_index.sanity_check(segment.size)
        segment.time_index.sanity_check()
    except CorruptIndexError as exc:
        log.warning("%s: rebuilding indexes: %s", segment.log_path, exc)
        segment.recover(keep_txn_index=True)
