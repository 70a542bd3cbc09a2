"""Which segments retention deletes, and how a segment leaves a log.

Retention walks the segments oldest first and stops at the first one that must stay
(Kafka's deletableSegments): below the log start offset always; over `retention.bytes` or
older than `retention.ms` for `cleanup.policy` delete. Nothing at or above the high
watermark goes, so the log start offset never passes it. A segment that goes is renamed
`.deleted` at once and unlinked `file.delete.delay.ms` later (`DeletionQueue`), so a read
that found it just before keeps working.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from gregor.storage.names import DELETED_SUFFIX
from gregor.storage.segment import LogSegment
from gregor.storage.segments import SegmentList

# (segment, the one after it or None) -> whether it may go
Deletable = Callable[[LogSegment, LogSegment | None], bool]


def deletable_segments(
    segments: SegmentList, log_end_offset: int, high_watermark: int, predicate: Deletable
) -> list[LogSegment]:
    """The oldest segments, in order, up to the first that `predicate` keeps."""
    found: list[LogSegment] = []
    all_segments = segments.all()
    for i, segment in enumerate(all_segments):
        following = all_segments[i + 1] if i + 1 < len(all_segments) else None
        upper = following.base_offset if following is not None else log_end_offset
        if following is None and segment.size == 0:
            break
        if high_watermark < upper or not predicate(segment, following):
            break
        found.append(segment)
    return found


def below_log_start(log_start_offset: int) -> Deletable:
    """Segments wholly below the log start offset (DeleteRecords, or an earlier pass)."""
    return lambda _segment, following: (
        following is not None and following.base_offset <= log_start_offset
    )


def over_size(total_bytes: int, retention_bytes: int) -> Deletable | None:
    """The oldest segments while the log stays over `retention.bytes` without them."""
    if retention_bytes < 0 or total_bytes <= retention_bytes:
        return None
    excess = total_bytes - retention_bytes

    def over(segment: LogSegment, _following: LogSegment | None) -> bool:
        nonlocal excess
        if excess - segment.size < 0:
            return False
        excess -= segment.size
        return True

    return over


def expired(now_ms: int, retention_ms: int) -> Deletable | None:
    """Segments whose newest record is older than `retention.ms`."""
    if retention_ms < 0:
        return None
    return lambda segment, _following: now_ms - segment.largest_timestamp() > retention_ms


def retire(segments: list[LogSegment]) -> list[Path]:
    """Rename segments `.deleted` (open descriptors keep in-flight reads working); returns
    their files, to unlink later."""
    paths: list[Path] = []
    for segment in segments:
        segment.deleted = True
        segment.change_suffix(DELETED_SUFFIX)
        paths.extend(segment.paths())
    return paths
