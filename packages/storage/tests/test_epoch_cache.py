"""The leader epoch cache: assignment rules, OffsetsForLeaderEpoch answers, persistence."""

from __future__ import annotations

from pathlib import Path

from gregor.storage.epoch_cache import LeaderEpochCache


def test_assign_and_end_offsets(tmp_path: Path) -> None:
    cache = LeaderEpochCache(tmp_path / "leader-epoch-checkpoint")
    cache.assign(0, 0)
    cache.assign(0, 5)  # same epoch, later offset: nothing new
    cache.assign(2, 10)
    cache.assign(4, 30)
    assert cache.entries() == [(0, 0), (2, 10), (4, 30)]
    assert cache.end_offset_for(4, 42) == (4, 42)  # the latest epoch ends at the log end
    assert cache.end_offset_for(2, 42) == (2, 30)
    assert cache.end_offset_for(3, 42) == (2, 30)  # unknown epoch: the one below it
    assert cache.end_offset_for(5, 42) == (-1, -1)
    assert cache.end_offset_for(-1, 42) == (-1, -1)
    assert cache.epoch_for_offset(29) == 2
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n3\n0 0\n2 10\n4 30\n"


def test_epoch_older_than_all_known(tmp_path: Path) -> None:
    cache = LeaderEpochCache(tmp_path / "c")
    cache.assign(5, 100)
    assert cache.end_offset_for(3, 200) == (3, 100)


def test_conflicting_entries_are_replaced(tmp_path: Path) -> None:
    cache = LeaderEpochCache(tmp_path / "c")
    cache.assign(1, 0)
    cache.assign(2, 10)
    cache.assign(3, 20)
    cache.assign(3, 15)  # an earlier start for the latest epoch
    assert cache.entries() == [(1, 0), (2, 10), (3, 15)]
    cache.assign(2, 12)  # an older epoch: later entries go
    assert cache.entries() == [(1, 0), (2, 12)]


def test_truncation_and_reload(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    cache = LeaderEpochCache(path)
    for epoch, offset in [(0, 0), (1, 10), (2, 20), (3, 30)]:
        cache.assign(epoch, offset)
    cache.truncate_from_end(20)
    assert cache.entries() == [(0, 0), (1, 10)]
    cache.truncate_from_start(15)
    assert cache.entries() == [(1, 15)]
    cache.flush()
    assert LeaderEpochCache(path).entries() == [(1, 15)]


def test_corrupt_file_is_flagged(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_text("0\n2\n1 0\n")
    cache = LeaderEpochCache(path)
    assert cache.corrupt_on_load and cache.entries() == []
