"""Transactions in the log: markers written by the leader, the last stable offset, the
`.txnindex` in Kafka's bytes, read_committed reads, producer snapshots across restarts,
truncation, torn tails in the middle of a transaction, and compaction.

Each test checks gregor-storage against `TxnModel`, which works the transactions out from
the log's batches alone, and reads as a read_committed consumer does (`read_committed`)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from storage_testing import (
    FakeClock,
    LogOpener,
    all_batches,
    check_transactions,
    index_entries,
    make_batch,
    read_committed,
)

from gregor.protocol.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    TransactionCoordinatorFencedError,
)
from gregor.protocol.records import ControlType, scan_batches
from gregor.storage import AbortedTxn, FetchIsolation, Log
from gregor.storage.cleaner import Cleaner, cleanable_range

COMMIT, ABORT = ControlType.COMMIT, ControlType.ABORT


def _data(log: Log, pid: int, values: list[bytes], *, epoch: int = 0) -> int:
    """A transactional batch of `pid`; returns its first offset."""
    entry = log.producer_state.last_entry(pid)
    sequence = entry.last_seq + 1 if entry is not None and entry.producer_epoch == epoch else 0
    batch = make_batch(
        values,
        keys=[b"k%d" % pid] * len(values),
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=sequence,
        transactional=True,
        timestamp=log.clock(),
    )
    return log.append_as_leader(batch, leader_epoch=0).first_offset


def _plain(log: Log, value: bytes = b"plain") -> int:
    batch = make_batch([value], keys=[b"p"], timestamp=log.clock())
    return log.append_as_leader(batch, leader_epoch=0).first_offset


def _end(log: Log, pid: int, kind: ControlType, *, epoch: int = 0, coordinator: int = 0) -> int:
    info = log.append_txn_marker(pid, epoch, kind, coordinator_epoch=coordinator, leader_epoch=0)
    return info.first_offset


def _stable(log: Log) -> Log:
    log.update_high_watermark(log.log_end_offset)
    return log


def test_markers_complete_transactions_and_move_the_lso(open_test_log: LogOpener) -> None:
    log = open_test_log()
    _plain(log)  # 0
    a = _data(log, 1, [b"a1", b"a2"])  # 1-2
    b = _data(log, 2, [b"b1"])  # 3
    _data(log, 1, [b"a3"])  # 4
    assert (a, b) == (1, 3)
    assert log.ongoing_transactions() == {1: 1, 2: 3}
    assert _stable(log).last_stable_offset == 1
    abort = _end(log, 1, ABORT)  # 5
    assert abort == 5 and log.ongoing_transactions() == {2: 3}
    entry = log.producer_state.last_entry(1)
    assert entry is not None and entry.current_txn_first_offset is None
    # Decided, but the marker is not below the high watermark: the LSO waits for it.
    assert log.last_stable_offset == 1
    assert _stable(log).last_stable_offset == 3
    _end(log, 2, COMMIT)  # 6
    assert _stable(log).last_stable_offset == log.log_end_offset == 7
    assert index_entries(log) == [AbortedTxn(1, 1, 5, 3)]
    model = check_transactions(log)
    assert model.visible(7) == [0, 3]
    # a marker of a producer with no open transaction is written, and completes nothing
    assert _end(log, 3, COMMIT) == 7 and log.ongoing_transactions() == {}


def test_markers_are_fenced_as_kafka_fences_them(open_test_log: LogOpener) -> None:
    log = open_test_log()
    _data(log, 1, [b"x"], epoch=3)
    with pytest.raises(InvalidProducerEpochError):
        _end(log, 1, COMMIT, epoch=2)
    _end(log, 1, ABORT, epoch=3, coordinator=5)
    _data(log, 1, [b"y"], epoch=4)
    with pytest.raises(TransactionCoordinatorFencedError):
        _end(log, 1, COMMIT, epoch=4, coordinator=4)
    assert log.ongoing_transactions() == {1: 2}  # nothing half-applied
    # inside a transaction a producer may not write outside it
    with pytest.raises(InvalidTxnStateError):
        log.append_as_leader(
            make_batch([b"z"], producer_id=1, producer_epoch=4, base_sequence=1), 0
        )
    _end(log, 1, COMMIT, epoch=4, coordinator=5)
    check_transactions(log)


def test_txnindex_is_kafkas_format_in_the_segment_of_each_marker(
    open_test_log: LogOpener,
) -> None:
    log = open_test_log(segment_bytes=600)
    _data(log, 7, [b"x" * 100])
    while len(log.segments) < 3:  # the abort marker lands two segments later
        _plain(log, b"y" * 100)
    _data(log, 8, [b"z"])
    _end(log, 7, ABORT)
    last = log.log_end_offset - 1
    index = log.active_segment.txn_index.path
    assert index.name == f"{log.active_segment.base_offset:020d}.txnindex"
    # version 0, producer id, first offset, last offset (the marker), LSO (8's start)
    assert index.read_bytes() == struct.pack(">hqqqq", 0, 7, 0, last, last - 1)
    _end(log, 8, ABORT)
    assert len(index.read_bytes()) == 68
    assert index_entries(log) == [
        AbortedTxn(7, 0, last, last - 1),
        AbortedTxn(8, last - 1, last + 1, last + 2),
    ]
    check_transactions(log)


def test_read_committed_stops_at_the_lso_and_lists_overlapping_aborts(
    open_test_log: LogOpener,
) -> None:
    log = open_test_log(segment_bytes=700, index_interval_bytes=100)
    for round_ in range(12):
        pid = 1 + round_ % 3
        _data(log, pid, [b"d%d" % round_] * 3)
        _plain(log)
        if round_ % 3 == 2:
            for other in (1, 2, 3):
                if other in log.ongoing_transactions():
                    _end(log, other, ABORT if (round_ + other) % 2 else COMMIT)
    _data(log, 9, [b"open"])  # stays open: the LSO stops there
    _plain(log)
    model = check_transactions(log)
    assert len(log.segments) > 3 and model.aborted and 9 in model.ongoing
    # one batch at a time, each fetch with its own aborted list
    assert [r.offset for r in read_committed(log, max_bytes=1)] == model.visible(log.log_end_offset)
    info = log.read(0, 1 << 20, FetchIsolation.TXN_COMMITTED)
    end = max(h.last_offset for _p, h in scan_batches(info.records.read())) + 1
    assert end <= log.last_stable_offset == model.ongoing[9]
    assert info.aborted_transactions == [
        t for t in model.aborted if t.last_offset >= 0 and t.first_offset < end
    ]
    # a fetch from the middle lists only the aborts that reach it
    middle = model.aborted[-1].first_offset + 1
    info = log.read(middle, 1, FetchIsolation.TXN_COMMITTED)
    assert info.aborted_transactions
    assert all(t.last_offset >= middle for t in info.aborted_transactions)
    assert model.aborted[-1] in info.aborted_transactions
    # read_uncommitted reads to the high watermark and lists nothing
    assert log.read(0, 1 << 20).aborted_transactions is None


def test_open_transactions_survive_a_clean_restart(open_test_log: LogOpener, log_dir: Path) -> None:
    log = open_test_log(segment_bytes=500)
    _data(log, 1, [b"a"] * 5)
    _data(log, 2, [b"b"] * 5)
    _end(log, 2, ABORT)
    _data(log, 3, [b"c"])
    _plain(log)
    before = check_transactions(log)
    end = log.log_end_offset
    log.close()
    snapshot = log_dir / f"{end:020d}.snapshot"
    assert snapshot.exists()
    # Kafka's ProducerSnapshot v1: 32-bit count at 6, then 46-byte entries whose last field
    # is the current transaction's first offset.
    data = snapshot.read_bytes()
    (count,) = struct.unpack_from(">i", data, 6)
    txn_starts = {
        struct.unpack_from(">q", data, 10 + 46 * i)[0]: struct.unpack_from(
            ">q", data, 10 + 46 * i + 38
        )[0]
        for i in range(count)
    }
    assert txn_starts == {1: 0, 2: -1, 3: before.ongoing[3]}
    reopened = open_test_log(segment_bytes=500, load_recovery_point=end, load_clean_shutdown=True)
    assert check_transactions(reopened) == before
    _end(reopened, 1, COMMIT)
    _end(reopened, 3, ABORT)
    after = check_transactions(reopened)
    assert not after.ongoing and reopened.last_stable_offset == reopened.log_end_offset


@pytest.mark.parametrize("recovery_point", ["none", "at a snapshot"])
def test_recovery_rebuilds_the_txnindex_and_producer_state(
    open_test_log: LogOpener, log_dir: Path, recovery_point: str
) -> None:
    log = open_test_log(segment_bytes=400)
    for round_ in range(10):
        _data(log, 1 + round_ % 2, [b"v%d" % round_] * 2)
        if round_ % 2:
            _end(log, 1, ABORT)
            _end(log, 2, COMMIT if round_ % 4 == 1 else ABORT)
    _data(log, 1, [b"open"])
    before = check_transactions(log)
    point = 0 if recovery_point == "none" else log.segments.all()[2].base_offset
    log.flush()
    log.close()
    for path in log_dir.glob("*.txnindex"):
        if int(path.name.split(".")[0]) >= point:
            path.unlink()  # what recovery must rebuild
    # a crash: no clean shutdown, so the snapshots at the log end go
    (log_dir / f"{log.log_end_offset:020d}.snapshot").unlink()
    end = log.log_end_offset
    reopened = open_test_log(segment_bytes=400, load_recovery_point=point, load_high_watermark=end)
    # The markers recovery replayed are below the checkpointed high watermark: only the
    # open transaction holds the LSO back, before anything moves the high watermark.
    assert reopened.high_watermark == end
    assert reopened.last_stable_offset == before.last_stable_offset(end)
    assert check_transactions(reopened) == before


def test_a_torn_tail_in_the_middle_of_a_transaction(
    open_test_log: LogOpener, log_dir: Path
) -> None:
    log = open_test_log()
    _data(log, 1, [b"a"])
    _end(log, 1, COMMIT)
    first = _data(log, 2, [b"b1", b"b2"])
    _data(log, 3, [b"c"])
    _data(log, 2, [b"b3"])
    abort = _end(log, 2, ABORT)
    _plain(log)
    check_transactions(log)
    assert log.active_segment.txn_index.entries == [AbortedTxn(2, first, abort, first + 2)]
    log.close()
    # The crash tore the abort marker: recovery cuts the log there, and producer 2's
    # transaction is open again, with no aborted entry.
    segment = log_dir / "00000000000000000000.log"
    data = segment.read_bytes()
    marker_pos = next(pos for pos, h in scan_batches(data) if h.base_offset == abort)
    segment.write_bytes(data[: marker_pos + 40])
    for snapshot in log_dir.glob("*.snapshot"):
        snapshot.unlink()
    reopened = open_test_log()
    assert reopened.log_end_offset == abort
    model = check_transactions(reopened)
    assert model.ongoing == {2: first, 3: first + 2} and not model.aborted
    assert reopened.last_stable_offset == first
    # The coordinator finishes it again; everything after it stays readable.
    _end(reopened, 2, ABORT)
    _end(reopened, 3, COMMIT)
    model = check_transactions(reopened)
    assert model.aborted == [AbortedTxn(2, first, abort, first + 2)]
    assert [r.value for r in read_committed(reopened)] == [b"a", b"c"]


def test_truncation_rebuilds_transactions_from_a_snapshot(open_test_log: LogOpener) -> None:
    log = open_test_log()
    _data(log, 1, [b"a"])  # begins before the snapshot
    log.roll()  # a snapshot at 1
    _plain(log)
    _end(log, 1, COMMIT)  # ends after it
    _data(log, 2, [b"b"])
    keep = log.log_end_offset
    _end(log, 2, ABORT)
    _data(log, 3, [b"c"])
    check_transactions(log)
    assert list(log.producer_state.snapshots) == [1]
    # A follower truncated to `keep` reloads the snapshot and replays the rest: producer
    # 1's transaction, begun before the snapshot and ended after it, must be closed.
    log.truncate_to(keep)
    assert log.log_end_offset == keep
    model = check_transactions(log)
    assert model.ongoing == {2: keep - 1} and log.last_stable_offset == keep - 1
    assert log.active_segment.txn_index.entries == []


def test_compaction_removes_aborted_data_and_keeps_markers_while_their_data_lives(
    open_test_log: LogOpener, clock: FakeClock
) -> None:
    log = open_test_log(
        cleanup_policy="compact", segment_bytes=400, file_delete_delay_ms=0, delete_retention_ms=0
    )
    _data(log, 1, [b"kept"])  # key k1
    _end(log, 1, COMMIT)
    _data(log, 2, [b"gone"])  # key k2, aborted
    _end(log, 2, ABORT)
    for i in range(20):
        log.append_as_leader(make_batch([b"f"], keys=[b"f%d" % i]), 0)
    _stable(log)
    before = [(r.offset, r.value) for r in read_committed(log)]
    end, _stats = Cleaner().clean(cleanable_range(log, None, clock.now), clock.now)
    assert end > 3
    values = [r.value for b in all_batches(log) if not b.header.is_control for r in b]
    assert b"gone" not in values and b"kept" in values
    assert [(r.offset, r.value) for r in read_committed(log)] == before

    def markers() -> dict[int, int]:
        return {
            b.header.producer_id: len(b)
            for b in all_batches(log)
            if b.header.is_control and b.header.producer_id in (1, 2)
        }

    # The commit marker stays while its record does; the producers are still active.
    assert markers() == {1: 1, 2: 1}
    # k1 overwritten outside the transaction, the producers expired: the data goes, then
    # the markers (with their delete horizon, here 0 ms).
    log.append_as_leader(make_batch([b"new"], keys=[b"k1"]), 0)
    for i in range(20):
        log.append_as_leader(make_batch([b"g"], keys=[b"g%d" % i]), 0)
    _stable(log)
    log.producer_state.remove_expired_producers(clock.now + 10**10)
    for _ in range(3):
        clock.advance(1)
        Cleaner().clean(cleanable_range(log, None, clock.now), clock.now)
    values = [r.value for b in all_batches(log) if not b.header.is_control for r in b]
    assert b"kept" not in values and b"new" in values
    assert markers() == {}
    assert [r.value for r in read_committed(log)].count(b"new") == 1


def test_a_follower_builds_the_same_transactions_from_the_leaders_batches(
    open_test_log: LogOpener, tmp_path: Path
) -> None:
    leader = open_test_log(segment_bytes=500)
    follower = open_test_log(tmp_path / "follower-0", segment_bytes=500)
    for round_ in range(8):
        _data(leader, 1 + round_ % 3, [b"v%d" % round_] * 2)
        _plain(leader)
        if round_ % 3 == 2:
            _end(leader, 1, ABORT)
            _end(leader, 2, COMMIT)
            _end(leader, 3, ABORT)
    _data(leader, 2, [b"open"])
    while follower.log_end_offset < leader.log_end_offset:  # fetches of a few batches
        data = leader.read(follower.log_end_offset, 300, FetchIsolation.LOG_END).records.read()
        follower.append_as_follower(data)
    model = check_transactions(leader)
    assert check_transactions(follower) == model and model.aborted and model.ongoing
    assert index_entries(follower) == index_entries(leader)
