"""Log reads: whole batches, KIP-74, isolation levels, aborted transactions, offset lookups."""

from __future__ import annotations

import os

import pytest
from storage_testing import LogOpener, make_batch

from gregor.protocol.errors import OffsetOutOfRangeError
from gregor.protocol.records import ControlType, build_control_batch, iter_batches
from gregor.storage import AbortedTxn, AppendOrigin, FetchIsolation, Log
from gregor.storage.results import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP


def _offsets(data: bytes) -> list[tuple[int, int]]:
    return [(b.header.base_offset, b.header.last_offset) for b in iter_batches(data)]


def _fill(log: Log, batches: int, per_batch: int, size: int = 50) -> list[int]:
    sizes = []
    for i in range(batches):
        batch = make_batch([bytes([65 + i % 26]) * size] * per_batch, timestamp=1000 + 10 * i)
        sizes.append(len(batch))
        log.append_as_leader(batch, leader_epoch=0)
    log.update_high_watermark(log.log_end_offset)
    return sizes


def test_reads_return_whole_batches(open_test_log: LogOpener) -> None:
    log = open_test_log(index_interval_bytes=100)
    sizes = _fill(log, 10, 3)
    info = log.read(0, sizes[0] + sizes[1] + 10)
    assert _offsets(info.records.read()) == [(0, 2), (3, 5)]
    assert (info.high_watermark, info.log_end_offset, info.log_start_offset) == (30, 30, 0)
    # from the middle of a batch: the whole batch that holds the offset
    info = log.read(4, sizes[1])
    assert _offsets(info.records.read()) == [(3, 5)]
    assert info.fetch_offset == 4


def test_first_batch_is_returned_whole_kip_74(open_test_log: LogOpener) -> None:
    log = open_test_log()
    sizes = _fill(log, 3, 5)
    info = log.read(0, 10)
    assert _offsets(info.records.read()) == [(0, 4)] and len(info.records) == sizes[0]
    info = log.read(0, 10, min_one_batch=False)
    assert len(info.records) == 0 and info.first_entry_incomplete


def test_read_bounds(open_test_log: LogOpener) -> None:
    log = open_test_log()
    _fill(log, 4, 2)
    log.update_high_watermark(4)
    assert _offsets(log.read(0, 10**6).records.read()) == [(0, 1), (2, 3)]
    assert len(log.read(4, 10**6).records) == 0  # at the high watermark: nothing yet
    assert _offsets(log.read(4, 10**6, FetchIsolation.LOG_END).records.read()) == [(4, 5), (6, 7)]
    assert _offsets(log.read(0, 10**6, FetchIsolation.LOG_END, max_offset=2).records.read()) == [
        (0, 1)
    ]
    assert len(log.read(8, 10**6, FetchIsolation.LOG_END).records) == 0
    with pytest.raises(OffsetOutOfRangeError, match=r"\[0, 8\)"):
        log.read(9, 100)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 100)


def test_reads_stay_in_one_segment_and_cross_to_the_next(open_test_log: LogOpener) -> None:
    log = open_test_log(segment_bytes=300)
    _fill(log, 8, 1)
    assert len(log.segments) > 2
    second = log.segments.all()[1]
    info = log.read(0, 10**6)
    assert _offsets(info.records.read())[-1][1] == second.base_offset - 1
    info = log.read(second.base_offset, 10**6)
    assert _offsets(info.records.read())[0][0] == second.base_offset


def test_a_slice_outlives_its_deleted_segment(open_test_log: LogOpener) -> None:
    log = open_test_log(segment_bytes=300, retention_bytes=0, file_delete_delay_ms=0)
    _fill(log, 6, 1)
    info = log.read(0, 10**6)
    expected = info.records.read()
    assert log.delete_old_segments() > 0
    log.deletions.run_due()
    assert not (log.dir / "00000000000000000000.log").exists()
    assert info.records.read() == expected  # the open descriptor keeps the data readable
    out_r, out_w = os.pipe()
    try:
        sent = os.sendfile(out_w, info.records.fileno(), info.records.position, len(info.records))
        assert os.read(out_r, sent) == expected[:sent]
    finally:
        os.close(out_r)
        os.close(out_w)


def _txn(log: Log, pid: int, values: list[bytes], seq: int) -> None:
    log.append_as_leader(
        make_batch(
            values, producer_id=pid, producer_epoch=0, base_sequence=seq, transactional=True
        ),
        leader_epoch=0,
    )


def _end(log: Log, pid: int, kind: ControlType) -> None:
    marker = build_control_batch(
        kind, producer_id=pid, producer_epoch=0, coordinator_epoch=0, timestamp=2000
    )
    log.append_as_leader(marker, leader_epoch=0, origin=AppendOrigin.COORDINATOR)


def test_read_committed_stops_at_the_last_stable_offset(open_test_log: LogOpener) -> None:
    log = open_test_log()
    log.append_as_leader(make_batch([b"plain"]), 0)  # 0
    _txn(log, 1, [b"t1a"], 0)  # 1
    _txn(log, 2, [b"t2a"], 0)  # 2
    _txn(log, 1, [b"t1b"], 1)  # 3
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 1
    info = log.read(0, 10**6, FetchIsolation.TXN_COMMITTED)
    assert _offsets(info.records.read()) == [(0, 0)] and info.last_stable_offset == 1
    _end(log, 1, ControlType.ABORT)  # 4
    assert log.last_stable_offset == 1  # the marker is not below the high watermark yet
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 2  # producer 2's transaction is still open
    _end(log, 2, ControlType.COMMIT)  # 5
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 6
    info = log.read(0, 10**6, FetchIsolation.TXN_COMMITTED)
    assert _offsets(info.records.read())[-1] == (5, 5)
    assert info.aborted_transactions == [AbortedTxn(1, 1, 4, 2)]
    assert log.active_segment.txn_index.path.exists()
    assert log.read(0, 10**6).aborted_transactions is None


def test_offset_for_timestamp(open_test_log: LogOpener) -> None:
    log = open_test_log(segment_bytes=400, index_interval_bytes=50)
    _fill(log, 10, 3)  # batch i holds timestamps 1000+10i .. +2
    found = log.offset_for_timestamp(1041)
    assert found is not None and (found.timestamp, found.offset) == (1041, 13)
    found = log.offset_for_timestamp(1043)  # between batches: the next record
    assert found is not None and (found.timestamp, found.offset) == (1050, 15)
    assert log.offset_for_timestamp(5000) is None
    earliest = log.offset_for_timestamp(EARLIEST_TIMESTAMP)
    latest = log.offset_for_timestamp(LATEST_TIMESTAMP)
    assert earliest is not None and (earliest.offset, earliest.leader_epoch) == (0, 0)
    assert latest is not None and latest.offset == 30
    log.append_as_leader(make_batch([b"late", b"later"], timestamp=99_999), leader_epoch=0)
    log.append_as_leader(make_batch([b"early"], timestamp=5), leader_epoch=0)
    top = log.offset_for_timestamp(MAX_TIMESTAMP)
    assert top is not None and (top.timestamp, top.offset) == (100_000, 31)


def test_end_offset_for_epoch(open_test_log: LogOpener) -> None:
    log = open_test_log()
    log.append_as_leader(make_batch([b"a", b"b"]), leader_epoch=1)
    log.append_as_leader(make_batch([b"c"]), leader_epoch=3)
    assert log.end_offset_for_epoch(1) == (1, 2)
    assert log.end_offset_for_epoch(2) == (1, 2)
    assert log.end_offset_for_epoch(3) == (3, 3)
    assert log.end_offset_for_epoch(4) is None


def test_idle_segments_let_their_descriptors_go(open_test_log: LogOpener) -> None:
    from gregor.storage.segment import OPEN_SEGMENTS

    def open_files(directory: str) -> int:
        count = 0
        for fd in os.listdir("/proc/self/fd"):
            try:
                count += os.readlink(f"/proc/self/fd/{fd}").startswith(directory)
            except OSError:
                pass
        return count

    limit = OPEN_SEGMENTS.limit
    OPEN_SEGMENTS.limit = 4
    try:
        log = open_test_log(segment_bytes=150, index_interval_bytes=1)
        _fill(log, 1, 1)
        assert open_files(str(log.dir)) == 1  # the active segment's .log, not its indexes
        _fill(log, 39, 1)
        assert len(log.segments) == 40
        # every segment read once: at most 4 inactive ones (and the active one) stay open
        offsets = [s.base_offset for s in log.segments]
        for offset in offsets:
            assert log.read(offset, 10**6).records.read()
        assert open_files(str(log.dir)) <= 5  # one each: index mappings hold no descriptor
        # evicted segments reopen transparently, and are flushed by name
        assert _offsets(log.read(offsets[0], 10**6).records.read()) == [(0, 0)]
        log.flush()
        assert log.recovery_point == log.log_end_offset
    finally:
        OPEN_SEGMENTS.limit = limit


def test_the_open_files_limit_is_raised_to_the_hard_one() -> None:
    """A broker starts with as many descriptors as it may have (as the JVM gives Kafka)."""
    import resource

    from gregor.storage.segment import OPEN_SEGMENTS, use_all_open_files

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    limit = OPEN_SEGMENTS.limit
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, 1024), hard))
        raised = use_all_open_files()
        assert resource.getrlimit(resource.RLIMIT_NOFILE) == (hard, hard) == (raised, hard)
        infinite = hard == resource.RLIM_INFINITY
        assert OPEN_SEGMENTS.limit == (1000 if infinite else max(256, hard // 4))
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        OPEN_SEGMENTS.limit = limit


def test_reads_at_the_log_end_find_their_batch_without_a_scan(
    open_test_log: LogOpener, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A follower's fetch starts where the log ended at its last one: the read remembers
    that position, and the next read from there neither scans nor goes wrong when the log
    changed under the remembered position (truncated, then appended with other batches)."""
    log = open_test_log(index_interval_bytes=10**6)  # one index entry: a scan would be long
    _fill(log, 20, 1)
    assert len(log.read(20, 10**6, FetchIsolation.LOG_END).records) == 0  # parked at the end
    log.append_as_leader(make_batch([b"n" * 50]), leader_epoch=0)
    log.append_as_leader(make_batch([b"m" * 50]), leader_epoch=0)
    segment = log.segments.active
    scans: list[int] = []
    real = type(segment).translate_offset
    monkeypatch.setattr(
        type(segment),
        "translate_offset",
        lambda self, offset, start=0: scans.append(offset) or real(self, offset, start),
    )
    info = log.read(20, 10**6, FetchIsolation.LOG_END)
    assert _offsets(info.records.read()) == [(20, 20), (21, 21)]
    assert not scans
    # The log ends at 22 now; truncated to 21 and appended with a batch of two records, a
    # batch of offset 22 no longer starts where offset 22 was remembered: the read looks.
    log.read(22, 10**6, FetchIsolation.LOG_END)
    log.truncate_to(21)
    log.append_as_leader(make_batch([b"x" * 50, b"y" * 50]), leader_epoch=1)
    log.append_as_leader(make_batch([b"z" * 50]), leader_epoch=1)
    assert _offsets(log.read(22, 10**6, FetchIsolation.LOG_END).records.read()) == [
        (21, 22),
        (23, 23),
    ]
    assert scans == [21, 22]
