"""The offset and time indexes: format, lookups, truncation, preallocation and trimming."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from gregor.storage.index import CorruptIndexError, IndexOffsetOverflowError, OffsetIndex, TimeIndex


def test_offset_index_entries_are_relative_offset_and_position(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "00000000000000000100.index", 100, 1024, writable=True)
    assert (tmp_path / "00000000000000000100.index").stat().st_size == 1024  # preallocated
    index.append(105, 4000)
    index.append(110, 8100)
    index.close()
    data = (tmp_path / "00000000000000000100.index").read_bytes()
    assert data == struct.pack(">iiii", 5, 4000, 10, 8100)  # trimmed to its entries


def test_offset_index_lookups(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "a.index", 1000, 800, writable=True)
    assert index.lookup(1500) == (1000, 0)
    for i in range(1, 50):
        index.append(1000 + 10 * i, 100 * i)
    assert index.lookup(999) == (1000, 0)
    assert index.lookup(1000) == (1000, 0)
    assert index.lookup(1010) == (1010, 100)
    assert index.lookup(1019) == (1010, 100)
    assert index.lookup(10**9) == (1490, 4900)
    assert index.lookup_position(150) == (1020, 200)
    assert index.lookup_position(4901) is None
    assert index.position_before(250) == 100  # the entry before the last one at or below
    assert index.position_before(150) == 0


def test_offset_index_rejects_bad_appends(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "a.index", 0, 16, writable=True)
    index.append(5, 10)
    with pytest.raises(CorruptIndexError, match="not after"):
        index.append(5, 20)
    index.append(6, 20)
    assert index.is_full()
    with pytest.raises(CorruptIndexError, match="full"):
        index.append(7, 30)
    with pytest.raises(IndexOffsetOverflowError):
        OffsetIndex(tmp_path / "b.index", 0, 16, writable=True).append(2**31, 0)


def test_truncate_and_reopen_counts_entries(tmp_path: Path) -> None:
    path = tmp_path / "a.index"
    index = OffsetIndex(path, 0, 1024, writable=True)
    for i in range(1, 11):
        index.append(i * 10, i * 100)
    index.truncate_to(50)
    assert index.entries == 4 and index.last_entry() == (40, 400)
    index.truncate_to(41)
    assert index.entries == 4
    # A crash leaves the preallocated file untrimmed: the zero tail is not counted.
    del index
    reopened = OffsetIndex(path, 0, 1024, writable=True)
    assert path.stat().st_size == 1024
    assert reopened.entries == 4 and reopened.last_entry() == (40, 400)
    reopened.close()
    read_only = OffsetIndex(path, 0, 1024, writable=False)
    assert read_only.entries == 4 and read_only.lookup(35) == (30, 300)
    read_only.sanity_check(log_size=500)
    with pytest.raises(CorruptIndexError, match="past the log size"):
        read_only.sanity_check(log_size=400)


def test_make_read_only_trims_and_make_writable_grows(tmp_path: Path) -> None:
    path = tmp_path / "a.index"
    index = OffsetIndex(path, 0, 800, writable=True)
    index.append(3, 30)
    index.make_read_only()
    assert path.stat().st_size == 8 and not index.writable
    assert index.lookup(4) == (3, 30)
    index.make_writable()
    assert path.stat().st_size == 800
    index.append(9, 90)
    assert index.entries == 2


def test_time_index_format_and_lookup(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000050.timeindex"
    index = TimeIndex(path, 50, 120, writable=True)
    assert index.last_entry() == (-1, 50)
    index.maybe_append(1000, 55)
    index.maybe_append(900, 60)  # not larger than the last: ignored
    index.maybe_append(2000, 70)
    assert index.entries == 2
    assert index.lookup(999) == (-1, 50)
    assert index.lookup(1500) == (1000, 55)
    assert index.lookup(5000) == (2000, 70)
    index.truncate_to(70)
    assert index.last_entry() == (1000, 55)
    index.close()
    assert path.read_bytes() == struct.pack(">qi", 1000, 5)


def test_time_index_keeps_a_slot_for_the_roll_entry(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path / "a.timeindex", 0, 36, writable=True)  # 3 slots
    index.maybe_append(1, 1)
    index.maybe_append(2, 2)
    assert index.is_full()
    index.maybe_append(3, 3, skip_full_check=True)
    assert index.entries == 3
    with pytest.raises(CorruptIndexError):
        index.maybe_append(4, 4)
    with pytest.raises(CorruptIndexError, match="before the last"):
        other = TimeIndex(tmp_path / "b.timeindex", 0, 120, writable=True)
        other.maybe_append(5, 10)
        other.maybe_append(6, 9)
