"""The copy-on-write segment list."""

from __future__ import annotations

from pathlib import Path

from gregor.storage import LogConfig
from gregor.storage.segment import LogSegment
from gregor.storage.segments import SegmentList


def _segments(tmp_path: Path, bases: list[int]) -> list[LogSegment]:
    return [LogSegment(tmp_path, b, LogConfig(), created_ms=0, new=True) for b in bases]


def test_lookups(tmp_path: Path) -> None:
    a, b, c = _segments(tmp_path, [0, 100, 200])
    segments = SegmentList([c, a, b])
    assert segments.all() == [a, b, c] and segments.active is c and segments.first is a
    assert segments.floor(-1) is None
    assert segments.floor(0) is a and segments.floor(150) is b and segments.floor(10**9) is c
    assert segments.higher(100) is c and segments.higher(200) is None
    assert segments.get(100) is b and segments.get(101) is None
    assert segments.from_offset(150) == [b, c]
    assert segments.between(50, 200) == [a, b]
    assert segments.between(100, 201) == [b, c]


def test_readers_keep_their_snapshot(tmp_path: Path) -> None:
    a, b, c = _segments(tmp_path, [0, 100, 200])
    segments = SegmentList([a, b])
    bases, seen = segments.snapshot()
    segments.add(c)
    segments.remove([a])
    assert list(bases) == [0, 100] and list(seen) == [a, b]
    assert segments.all() == [b, c]
    (d,) = _segments(tmp_path, [150])
    segments.replace([d], [b])
    assert [s.base_offset for s in segments] == [150, 200]
