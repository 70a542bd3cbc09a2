"""Rolling, flushing, retention, DeleteRecords, truncation, reopening and I/O failures."""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path

import pytest
from storage_testing import FakeClock, LogOpener, make_batch, read_records

from gregor.protocol.errors import KafkaStorageError, OffsetOutOfRangeError
from gregor.storage import Log
from gregor.storage.files import FileHandle


def _append(
    log: Log, n: int, *, size: int = 100, timestamp: int | None = None, epoch: int = 0
) -> None:
    for _ in range(n):
        ts = timestamp if timestamp is not None else log.clock()
        log.append_as_leader(make_batch([b"x" * size], timestamp=ts), leader_epoch=epoch)


def _names(directory: Path, suffix: str) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(suffix))


def test_roll_on_segment_bytes(open_test_log: LogOpener, log_dir: Path) -> None:
    per_segment = 500 // len(make_batch([b"x" * 100]))
    log = open_test_log(segment_bytes=500)
    _append(log, 10)
    bases = [s.base_offset for s in log.segments]
    assert bases == list(range(0, 10, per_segment))
    assert _names(log_dir, ".log") == [f"{b:020d}.log" for b in bases]
    # rolled segments have trimmed indexes; the active one is preallocated
    assert (log_dir / "00000000000000000000.index").stat().st_size % 8 == 0
    assert (log_dir / "00000000000000000000.timeindex").stat().st_size == 12
    assert log.active_segment.index_path.stat().st_size == 10 * 1024 * 1024
    assert all(s.size <= 500 for s in log.segments)


def test_roll_on_segment_ms_by_batch_timestamps(open_test_log: LogOpener) -> None:
    log = open_test_log(segment_ms=1000)
    _append(log, 1, timestamp=10_000)
    _append(log, 1, timestamp=10_900)
    assert len(log.segments) == 1
    _append(log, 1, timestamp=11_001)
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_roll_on_segment_ms_without_timestamps(open_test_log: LogOpener, clock: FakeClock) -> None:
    log = open_test_log(segment_ms=1000)
    _append(log, 1, timestamp=-1)
    clock.advance(1001)
    _append(log, 1, timestamp=-1)
    assert len(log.segments) == 2


def test_roll_on_full_index(open_test_log: LogOpener) -> None:
    log = open_test_log(segment_index_bytes=32, index_interval_bytes=1)
    _append(log, 12, size=10)
    assert len(log.segments) > 1
    assert all(s.offset_index.entries <= 4 for s in log.segments)


def test_roll_snapshots_producer_state(open_test_log: LogOpener, log_dir: Path) -> None:
    log = open_test_log(segment_bytes=300)
    for seq in range(3):
        batch = make_batch([b"a" * 100], producer_id=5, producer_epoch=0, base_sequence=seq)
        log.append_as_leader(batch, 0)
    expected = [f"{s.base_offset:020d}.snapshot" for s in log.segments][1:]
    assert len(expected) == 2 and _names(log_dir, ".snapshot") == expected


def test_flush_moves_the_recovery_point(open_test_log: LogOpener) -> None:
    log = open_test_log()
    requests: list[Log] = []
    log.on_flush_needed = requests.append
    _append(log, 3)
    assert log.recovery_point == 0 and requests == []
    log.flush()
    assert log.recovery_point == 3
    log.config = log.config.__class__.from_properties({"flush.messages": "2"}, defaults=log.config)
    _append(log, 1)
    assert requests == []
    _append(log, 1)
    assert requests == [log]  # the manager then flushes it off the event loop


def test_retention_by_time(open_test_log: LogOpener, clock: FakeClock) -> None:
    log = open_test_log(segment_bytes=300, retention_ms=10_000, file_delete_delay_ms=5)
    for i in range(6):
        _append(log, 1, timestamp=clock.now - 20_000 + i * 2_000)
    log.update_high_watermark(log.log_end_offset)
    assert len(log.segments) == 6  # one batch each
    # segments whose largest timestamp is older than retention.ms go (ages 20 s .. 10 s)
    assert log.delete_old_segments() == 5
    assert log.log_start_offset == 5
    assert _names(log.dir, ".deleted") and len(log.deletions) == 1
    clock.advance(5)
    log.deletions.run_due(clock.now)
    assert not _names(log.dir, ".deleted")
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)


def test_retention_stops_at_the_high_watermark(open_test_log: LogOpener) -> None:
    log = open_test_log(segment_bytes=300, retention_ms=1)
    _append(log, 6, timestamp=0)
    assert log.delete_old_segments() == 0  # nothing is below the high watermark (0)
    log.update_high_watermark(2)
    assert log.delete_old_segments() == 2
    log.update_high_watermark(6)
    assert log.delete_old_segments() == 4  # all expired: the log rolls, keeps an empty segment
    assert log.log_start_offset == 6 and log.log_end_offset == 6 and len(log.segments) == 1


def test_retention_by_size(open_test_log: LogOpener) -> None:
    log = open_test_log(segment_bytes=300, retention_bytes=700)
    _append(log, 9)
    log.update_high_watermark(log.log_end_offset)
    size = log.segments.first.size
    assert log.size == 9 * size
    excess = 9 * size - 700
    assert log.delete_old_segments() == excess // size  # whole segments, oldest first
    assert log.size == (9 - excess // size) * size and log.size - size < 700


def test_retention_is_off_for_compacted_logs(open_test_log: LogOpener) -> None:
    log = open_test_log(segment_bytes=300, retention_bytes=1, cleanup_policy="compact")
    for i in range(6):
        log.append_as_leader(make_batch([b"x" * 100], keys=[b"%d" % i]), 0)
    log.update_high_watermark(log.log_end_offset)
    assert log.delete_old_segments() == 0


def test_delete_records(open_test_log: LogOpener) -> None:
    log = open_test_log(segment_bytes=300)
    _append(log, 6)
    log.update_high_watermark(5)
    with pytest.raises(OffsetOutOfRangeError, match="beyond the high watermark"):
        log.delete_records(6)
    assert log.delete_records(3) == 3
    assert log.read(3, 10**6).records.read()
    with pytest.raises(OffsetOutOfRangeError):
        log.read(2, 100)
    assert log.delete_old_segments() == 3  # the segments wholly below the start
    assert log.segments.first.base_offset == 3


def test_truncate_to(open_test_log: LogOpener) -> None:
    log = open_test_log(segment_bytes=300)
    _append(log, 4, epoch=1)
    _append(log, 4, epoch=2)
    log.update_high_watermark(8)
    assert log.truncate_to(3)
    assert log.log_end_offset == 3 and log.high_watermark == 3
    assert [s.base_offset for s in log.segments] == [0, 1, 2, 3]  # 3 is empty now
    assert log.epoch_cache.entries() == [(1, 0)]
    assert [r.offset for r in read_records(log)] == [0, 1, 2]
    assert not log.truncate_to(5)
    _append(log, 2, epoch=3)
    assert [r.offset for r in read_records(log)] == [0, 1, 2, 3, 4]


def test_truncate_fully_and_start_at(open_test_log: LogOpener) -> None:
    log = open_test_log(segment_bytes=300)
    _append(log, 5)
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.log_end_offset, len(log.segments)) == (100, 100, 1)
    _append(log, 1)
    assert [r.offset for r in read_records(log, 100)] == [100]


def test_clean_reopen_restores_everything(
    open_test_log: LogOpener, log_dir: Path, clock: FakeClock
) -> None:
    log = open_test_log(segment_bytes=400)
    produced = make_batch(
        [b"p"], producer_id=8, producer_epoch=0, base_sequence=0, timestamp=clock.now
    )
    log.append_as_leader(produced, 3)
    _append(log, 6, epoch=3)
    log.close()
    assert (log_dir / "00000000000000000007.snapshot").exists()
    reopened = open_test_log(segment_bytes=400, load_clean_shutdown=True, load_high_watermark=5)
    assert (reopened.log_end_offset, reopened.high_watermark) == (7, 5)
    assert reopened.recovery_point == 7
    assert reopened.epoch_cache.entries() == [(3, 0)]
    dup = reopened.append_as_leader(produced, 3)
    assert dup.duplicate and dup.first_offset == 0


def test_unclean_reopen_rebuilds_indexes_and_producer_state(
    open_test_log: LogOpener, log_dir: Path, clock: FakeClock
) -> None:
    log = open_test_log(segment_bytes=400, index_interval_bytes=50)
    for seq in range(8):
        batch = make_batch(
            [b"x" * 60], producer_id=8, producer_epoch=0, base_sequence=seq, timestamp=clock.now
        )
        log.append_as_leader(batch, 1)
    expected = [r.value for r in read_records(log)]
    log.closed = True  # a crash: nothing trimmed, no snapshot at the end
    for index in log_dir.glob("*.index"):
        index.unlink()
    reopened = open_test_log(segment_bytes=400, index_interval_bytes=50)
    assert reopened.log_end_offset == 8
    assert [r.value for r in read_records(reopened)] == expected
    assert reopened.active_segment.offset_index.entries > 0
    entry = reopened.producer_state.last_entry(8)
    assert entry is not None and entry.last_seq == 7


def test_recovery_cuts_garbage_and_flipped_bits(
    open_test_log: LogOpener, log_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = open_test_log()
    _append(log, 5)
    log.closed = True
    path = log_dir / "00000000000000000000.log"
    size = path.stat().st_size
    with path.open("ab") as f:
        f.write(os.urandom(500))
    caplog.set_level(logging.WARNING)
    reopened = open_test_log()
    assert reopened.log_end_offset == 5 and path.stat().st_size == size
    assert "truncating 500 bytes" in caplog.text
    reopened.closed = True
    data = bytearray(path.read_bytes())
    batch_size = size // 5
    data[3 * batch_size + 70] ^= 0x10  # a bit flip in the records of the fourth batch
    path.write_bytes(bytes(data))
    again = open_test_log()
    assert again.log_end_offset == 3 and path.stat().st_size == 3 * batch_size
    assert "stored CRC" in caplog.text


def test_leftovers_of_interrupted_work_are_cleaned(open_test_log: LogOpener, log_dir: Path) -> None:
    log = open_test_log()
    _append(log, 2)
    log.close()
    for name in ["00000000000000000000.log.deleted", "00000000000000000005.log.cleaned", "x.tmp"]:
        (log_dir / name).write_bytes(b"junk")
    (log_dir / "00000000000000000077.index").write_bytes(b"")  # an index without its log
    reopened = open_test_log()
    assert reopened.log_end_offset == 2
    assert sorted(p.name for p in log_dir.iterdir() if "junk" == "junk") == sorted(
        p.name for p in log_dir.iterdir()
    )
    leftovers = [
        p.name for p in log_dir.iterdir() if p.name.endswith((".deleted", ".cleaned", ".tmp"))
    ]
    assert leftovers == [] and not (log_dir / "00000000000000000077.index").exists()


def test_a_new_leader_epoch_is_written_or_takes_the_log_offline(
    open_test_log: LogOpener, log_dir: Path
) -> None:
    log = open_test_log()
    _append(log, 2)
    assert log.begin_epoch(3) == 2  # it starts at the log end
    assert log.epoch_cache.entries() == [(0, 0), (3, 2)]
    assert (log.dir / "leader-epoch-checkpoint").read_text().split("\n")[2:4] == ["0 0", "3 2"]
    failures: list[OSError] = []
    log.on_io_error = lambda _log, exc: failures.append(exc)
    # The disk goes from under the log: its checkpoint cannot be written.
    log.dir.rename(log_dir.parent / "gone")
    with pytest.raises(KafkaStorageError, match="leader epoch checkpoint"):
        log.begin_epoch(4)
    assert log.offline and len(failures) == 1 and failures[0].errno == errno.ENOENT


def test_io_errors_take_the_log_offline(open_test_log: LogOpener) -> None:
    log = open_test_log()
    _append(log, 1)
    failures: list[OSError] = []
    log.on_io_error = lambda _log, exc: failures.append(exc)
    # The disk fills up under the log: writes to /dev/full fail with ENOSPC.
    log.active_segment._log = FileHandle(Path("/dev/full"), os.O_WRONLY)
    with pytest.raises(KafkaStorageError, match="No space left"):
        _append(log, 1)
    assert log.offline and len(failures) == 1 and failures[0].errno == errno.ENOSPC
    with pytest.raises(KafkaStorageError, match="offline"):
        log.read(0, 100)
    with pytest.raises(KafkaStorageError, match="offline"):
        _append(log, 1)
