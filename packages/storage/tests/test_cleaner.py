"""Log compaction: the four guarantees of seed 000 section 4.8, tombstones, transactions,
producer state across cleaning, the throttle, and the atomic swap."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest
from storage_testing import FakeClock, LogOpener, make_batch, read_records

from gregor.protocol.records import ControlType, build_control_batch, iter_batches
from gregor.storage import AppendOrigin, FetchIsolation, Log
from gregor.storage.cleaner import Cleaner, Throttler, cleanable_range, grab_filthiest
from gregor.storage.names import CLEANED_SUFFIX, SWAP_SUFFIX

COMPACTED = {"cleanup_policy": "compact", "segment_bytes": 400, "file_delete_delay_ms": 0}


def _put(log: Log, key: bytes, value: bytes | None, ts: int) -> int:
    info = log.append_as_leader(make_batch([value], keys=[key], timestamp=ts), leader_epoch=0)
    return info.first_offset


def _clean(log: Log, now: int, checkpoint: int | None = None) -> int:
    target = cleanable_range(log, checkpoint, now)
    end, _stats = Cleaner().clean(target, now)
    return end


def _history(
    log: Log, clock: FakeClock, n: int, keys: int, seed: int = 1
) -> list[tuple[int, bytes, bytes]]:
    rng = random.Random(seed)
    written = []
    for i in range(n):
        key = b"k%d" % rng.randrange(keys)
        value = b"v%d" % i
        written.append((_put(log, key, value, clock.now), key, value))
        clock.advance(10)
    log.update_high_watermark(log.log_end_offset)
    return written


def test_guarantees_2_3_4_order_offsets_and_final_state(
    open_test_log: LogOpener, clock: FakeClock
) -> None:
    log = open_test_log(**COMPACTED)
    written = _history(log, clock, 200, keys=12)
    before = {off: (k, v) for off, k, v in written}
    end = _clean(log, clock.now)
    assert end == log.active_segment.base_offset
    after = read_records(log)
    offsets = [r.offset for r in after]
    # 2: order is kept (offsets only increase)
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    # 3: every surviving record has the offset it was written at
    assert all(before[r.offset] == (r.key, r.value) for r in after)
    # 4: reading from the start gives the final value of every key
    final = {k: v for _off, k, v in written}
    seen: dict[bytes, bytes] = {}
    for r in after:
        assert r.key is not None and r.value is not None
        seen[r.key] = r.value
    assert seen == final
    assert len(after) < len(written)
    # the cleaned part keeps only the last record per key
    cleaned_keys = [r.key for r in after if r.offset < end]
    assert len(cleaned_keys) == len(set(cleaned_keys))


def test_guarantee_1_the_head_is_untouched(open_test_log: LogOpener, clock: FakeClock) -> None:
    log = open_test_log(**COMPACTED)
    written = _history(log, clock, 120, keys=3)
    head_start = log.active_segment.base_offset
    _clean(log, clock.now)
    head = [r for r in read_records(log) if r.offset >= head_start]
    # a consumer caught up with the head sees every message, with sequential offsets
    assert [r.offset for r in head] == list(range(head_start, log.log_end_offset))
    assert [(r.offset, r.key, r.value) for r in head] == [w for w in written if w[0] >= head_start]


def test_guarantee_1_min_compaction_lag(open_test_log: LogOpener, clock: FakeClock) -> None:
    log = open_test_log(**COMPACTED, min_compaction_lag_ms=60_000)
    _history(log, clock, 60, keys=2)
    target = cleanable_range(log, None, clock.now)
    assert target.first_uncleanable_offset == 0  # every segment is younger than the lag
    assert grab_filthiest([(log, None)], clock.now) is None
    clock.advance(60_000)
    assert grab_filthiest([(log, None)], clock.now) is not None
    before = len(read_records(log))
    _clean(log, clock.now)
    assert len(read_records(log)) < before


def test_guarantee_1_max_compaction_lag(open_test_log: LogOpener, clock: FakeClock) -> None:
    log = open_test_log(**COMPACTED, min_cleanable_dirty_ratio=0.99, max_compaction_lag_ms=5_000)
    _history(log, clock, 40, keys=40)  # no duplicate keys: never dirty enough by ratio
    first = cleanable_range(log, None, clock.now)
    assert first.dirty_ratio > 0.9 and not first.needs_compaction_now
    end = _clean(log, clock.now)
    assert grab_filthiest([(log, end)], clock.now) is None
    _put(log, b"k1", b"late", clock.now)  # a new dirty record, below the ratio
    clock.advance(5_001)
    _put(log, b"k2", b"roll", clock.now)  # max.compaction.lag.ms also rolls the active segment
    log.update_high_watermark(log.log_end_offset)
    target = grab_filthiest([(log, end)], clock.now)
    assert target is not None and target.needs_compaction_now


def test_tombstones_stay_for_delete_retention_ms(
    open_test_log: LogOpener, clock: FakeClock
) -> None:
    log = open_test_log(**COMPACTED, delete_retention_ms=10_000)
    for i in range(10):
        _put(log, b"a", b"a%d" % i, clock.now)
        _put(log, b"b", b"b%d" % i, clock.now)
    _put(log, b"a", None, clock.now)  # delete a
    for i in range(10):
        _put(log, b"c", b"c%d" % i, clock.now)  # push the tombstone out of the active segment
    log.update_high_watermark(log.log_end_offset)
    end = _clean(log, clock.now)
    records = read_records(log)
    assert [(r.key, r.value) for r in records if r.key == b"a"] == [(b"a", None)]
    # the tombstone's batch now carries its delete horizon
    tomb = next(b for b in iter_batches(_all_bytes(log)) if any(r.key == b"a" for r in b))
    assert tomb.header.delete_horizon_ms == clock.now + 10_000
    clock.advance(5_000)
    _clean(log, clock.now, None)
    assert any(r.key == b"a" for r in read_records(log))  # a consumer within 10 s still sees it
    clock.advance(5_001)
    _clean(log, clock.now, None)
    assert not any(r.key == b"a" for r in read_records(log))
    assert {r.key for r in read_records(log)} == {b"b", b"c"}
    assert end > 0


def _all_bytes(log: Log) -> bytes:
    return b"".join(s.log_path.read_bytes() for s in log.segments)


def _txn(log: Log, pid: int, seq: int, key: bytes, ts: int) -> None:
    batch = make_batch(
        [b"txn"],
        keys=[key],
        producer_id=pid,
        producer_epoch=0,
        base_sequence=seq,
        transactional=True,
        timestamp=ts,
    )
    log.append_as_leader(batch, 0)


def _marker(log: Log, pid: int, kind: ControlType, ts: int) -> None:
    marker = build_control_batch(
        kind, producer_id=pid, producer_epoch=0, coordinator_epoch=0, timestamp=ts
    )
    log.append_as_leader(marker, 0, origin=AppendOrigin.COORDINATOR)


def test_aborted_transactions_and_their_markers_go(
    open_test_log: LogOpener, clock: FakeClock
) -> None:
    log = open_test_log(**COMPACTED, delete_retention_ms=0)
    _txn(log, 7, 0, b"x", clock.now)
    _txn(log, 7, 1, b"y", clock.now)
    _marker(log, 7, ControlType.ABORT, clock.now)
    _txn(log, 8, 0, b"z", clock.now)
    _marker(log, 8, ControlType.COMMIT, clock.now)
    for i in range(12):
        _put(log, b"filler%d" % i, b"f", clock.now)
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == log.log_end_offset
    _clean(log, clock.now)
    keys = [r.key for r in read_records(log)]
    assert b"x" not in keys and b"y" not in keys and b"z" in keys

    def markers_of_7() -> list[int]:
        batches = iter_batches(_all_bytes(log))
        return [len(b) for b in batches if b.header.is_control and b.header.producer_id == 7]

    # While producer 7 is active its last batch stays (empty), and with it the abort marker.
    clock.advance(1)
    _clean(log, clock.now)
    assert markers_of_7() == [1]
    info = log.read(0, 10**6, FetchIsolation.TXN_COMMITTED)
    assert [t.producer_id for t in info.aborted_transactions or []] == [7]
    # Once it expired: its empty batch goes, then the marker gets its delete horizon, then
    # (delete.retention.ms later) the marker goes too.
    log.producer_state.remove_expired_producers(clock.now + 10**10)
    for _ in range(3):
        clock.advance(1)
        _clean(log, clock.now)
    assert markers_of_7() == []
    assert b"z" in [r.key for r in read_records(log)]


def test_producer_state_survives_cleaning(open_test_log: LogOpener, clock: FakeClock) -> None:
    log = open_test_log(**COMPACTED)
    pid = 99
    for seq in range(5):
        batch = make_batch(
            [b"v%d" % seq],
            keys=[b"same"],
            producer_id=pid,
            producer_epoch=2,
            base_sequence=seq,
            timestamp=clock.now,
        )
        log.append_as_leader(batch, 0)
    for i in range(15):
        _put(log, b"same", b"plain%d" % i, clock.now)
    log.update_high_watermark(log.log_end_offset)
    _clean(log, clock.now)
    batches = [b for b in iter_batches(_all_bytes(log)) if b.header.producer_id == pid]
    # the producer's last batch stays, emptied, with its sequence and last offset
    last = batches[-1].header
    assert (last.base_sequence, last.last_offset, last.producer_epoch) == (4, 4, 2)
    assert len(batches[-1]) == 0
    reopened_check = log.producer_state.last_entry(pid)
    assert reopened_check is not None and reopened_check.last_seq == 4
    log.append_as_leader(
        make_batch(
            [b"next"],
            keys=[b"k"],
            producer_id=pid,
            producer_epoch=2,
            base_sequence=5,
            timestamp=clock.now,
        ),
        0,
    )


def test_partly_cleaned_batches_keep_base_and_last_offsets(
    open_test_log: LogOpener, clock: FakeClock
) -> None:
    log = open_test_log(**COMPACTED)
    log.append_as_leader(
        make_batch([b"1", b"2", b"3"], keys=[b"a", b"b", b"c"], timestamp=clock.now), 0
    )
    for i in range(12):
        _put(log, b"c", b"again%d" % i, clock.now)
    log.update_high_watermark(log.log_end_offset)
    _clean(log, clock.now)
    first = next(iter_batches(log.segments.first.log_path.read_bytes()))
    first.verify_crc()
    assert (first.header.base_offset, first.header.last_offset) == (0, 2)
    assert [(r.offset, r.key) for r in first] == [(0, b"a"), (1, b"b")]


def test_reopen_after_cleaning_and_swap_recovery(
    open_test_log: LogOpener, clock: FakeClock, log_dir: Path
) -> None:
    log = open_test_log(**COMPACTED)
    _history(log, clock, 100, keys=5)
    _clean(log, clock.now)
    expected = [(r.offset, r.key, r.value) for r in read_records(log)]
    log.close()
    reopened = open_test_log(**COMPACTED, load_clean_shutdown=True)
    assert [(r.offset, r.key, r.value) for r in read_records(reopened)] == expected
    reopened.close()
    # a crash between the renames: the cleaned copy of the first segment is a .swap file
    first = log_dir / "00000000000000000000.log"
    first.rename(log_dir / f"00000000000000000000.log{SWAP_SUFFIX}")
    first.write_bytes((log_dir / f"00000000000000000000.log{SWAP_SUFFIX}").read_bytes())
    (log_dir / f"00000000000000000000.log{CLEANED_SUFFIX}").write_bytes(b"partial")
    again = open_test_log(**COMPACTED)
    assert [(r.offset, r.key, r.value) for r in read_records(again)] == expected
    assert not list(log_dir.glob("*.swap")) and not list(log_dir.glob("*.cleaned"))


def test_cleaning_does_not_block_appends(open_test_log: LogOpener, clock: FakeClock) -> None:
    log = open_test_log(**COMPACTED)
    _history(log, clock, 100, keys=4)
    target = cleanable_range(log, None, clock.now)
    cleaner = Cleaner()
    # appends between building the map and the swap are kept (they are in the head)
    import threading

    done = threading.Event()

    def clean() -> None:
        cleaner.clean(target, clock.now)
        done.set()

    thread = threading.Thread(target=clean)
    thread.start()
    for i in range(20):
        _put(log, b"new%d" % i, b"n", clock.now)
    thread.join(30)
    assert done.is_set()
    keys = {r.key for r in read_records(log)}
    assert all(b"new%d" % i in keys for i in range(20))


def test_truncation_during_cleaning_aborts_the_swap(
    open_test_log: LogOpener, clock: FakeClock
) -> None:
    log = open_test_log(**COMPACTED)
    _history(log, clock, 60, keys=4)
    cleanable_range(log, None, clock.now)  # a round that would start now
    version = log.structure_version
    log.truncate_to(log.log_end_offset - 1)
    assert log.structure_version != version
    segment = log.segments.first
    assert not log.replace_segments(segment, [segment], expected_version=version)


def test_throttler_limits_the_rate() -> None:
    fake = [0.0]
    throttler = Throttler(1000.0, clock=lambda: fake[0])
    slept: list[float] = []
    original = time.sleep
    try:
        time.sleep = slept.append  # type: ignore[assignment]
        throttler.throttle(500)
    finally:
        time.sleep = original
    assert slept == [pytest.approx(0.5)]
