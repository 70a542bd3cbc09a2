"""The ordered segments of a log, copy-on-write.

Every change builds new lists and publishes them with one attribute assignment, so a reader
(a fetch on the event loop, the cleaner in its thread) binary-searches an immutable snapshot
and never waits for a roll, a deletion or a cleaner swap. Writers hold the log's lock.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Sequence

from gregor.storage.segment import LogSegment


class SegmentList:
    __slots__ = ("_view", "last")

    def __init__(self, segments: Iterable[LogSegment] = ()) -> None:
        ordered = sorted(segments, key=lambda s: s.base_offset)
        self._view: tuple[list[int], list[LogSegment]]
        # The active segment, or None when there is none: a plain attribute, for the
        # fast append (writers change it under the log's lock, with the view).
        self.last: LogSegment | None
        self._publish([s.base_offset for s in ordered], ordered)

    def _publish(self, bases: list[int], segments: list[LogSegment]) -> None:
        self._view = (bases, segments)
        self.last = segments[-1] if segments else None

    # -- reads (lock-free, on a snapshot) --------------------------------------------------

    def snapshot(self) -> tuple[Sequence[int], Sequence[LogSegment]]:
        return self._view

    def __len__(self) -> int:
        return len(self._view[1])

    def __iter__(self) -> Iterator[LogSegment]:
        return iter(self._view[1])

    def all(self) -> list[LogSegment]:
        return list(self._view[1])

    @property
    def active(self) -> LogSegment:
        return self._view[1][-1]

    @property
    def first(self) -> LogSegment:
        return self._view[1][0]

    def floor(self, offset: int) -> LogSegment | None:
        """The segment whose base offset is the largest at or below `offset`."""
        bases, segments = self._view
        i = bisect_right(bases, offset) - 1
        return segments[i] if i >= 0 else None

    def higher(self, offset: int) -> LogSegment | None:
        """The first segment whose base offset is above `offset`."""
        bases, segments = self._view
        i = bisect_right(bases, offset)
        return segments[i] if i < len(segments) else None

    def get(self, base_offset: int) -> LogSegment | None:
        bases, segments = self._view
        i = bisect_left(bases, base_offset)
        return segments[i] if i < len(bases) and bases[i] == base_offset else None

    def from_offset(self, offset: int) -> list[LogSegment]:
        """The segment holding `offset` and every later one."""
        bases, segments = self._view
        return segments[max(bisect_right(bases, offset) - 1, 0) :]

    def between(self, start: int, end: int) -> list[LogSegment]:
        """Segments that may hold offsets in [start, end)."""
        bases, segments = self._view
        lo = max(bisect_right(bases, start) - 1, 0)
        hi = bisect_left(bases, end)
        return segments[lo:hi]

    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._view[1])

    # -- writes (under the log's lock) -----------------------------------------------------

    def add(self, segment: LogSegment) -> None:
        bases, segments = self._view
        i = bisect_left(bases, segment.base_offset)
        if i < len(bases) and bases[i] == segment.base_offset:
            self._publish(bases[:], [*segments[:i], segment, *segments[i + 1 :]])
        else:
            self._publish(
                [*bases[:i], segment.base_offset, *bases[i:]],
                [*segments[:i], segment, *segments[i:]],
            )

    def remove(self, removed: Iterable[LogSegment]) -> None:
        gone = {id(s) for s in removed}
        kept = [s for s in self._view[1] if id(s) not in gone]
        self._publish([s.base_offset for s in kept], kept)

    def replace(self, new: Iterable[LogSegment], old: Iterable[LogSegment]) -> None:
        gone = {id(s) for s in old}
        kept = [s for s in self._view[1] if id(s) not in gone]
        kept.extend(new)
        kept.sort(key=lambda s: s.base_offset)
        self._publish([s.base_offset for s in kept], kept)

    def clear(self) -> None:
        self._publish([], [])
