"""Producer state: Kafka's sequence and epoch rules, transactions, snapshots, expiration."""

from __future__ import annotations

from pathlib import Path

import pytest
from storage_testing import make_batch

from gregor.protocol.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceNumberError,
    TransactionCoordinatorFencedError,
)
from gregor.protocol.records import BatchHeader, ControlType, build_control_batch, read_batch_header
from gregor.storage.producer_state import (
    AppendOrigin,
    CompletedTxn,
    CorruptSnapshotError,
    ProducerStateManager,
    decode_snapshot,
    encode_snapshot,
)

PID = 4000


def header(
    seq: int, count: int = 1, *, epoch: int = 0, offset: int = 0, txn: bool = False, pid: int = PID
) -> BatchHeader:
    data = make_batch(
        [b"v"] * count,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        transactional=txn,
        base_offset=offset,
    )
    return read_batch_header(data)


def append(
    psm: ProducerStateManager, h: BatchHeader, origin: AppendOrigin = AppendOrigin.CLIENT
) -> CompletedTxn | None:
    info = psm.prepare_update(h.producer_id, origin)
    done = info.append(h, None)
    psm.update(info)
    psm.map_end_offset = h.base_offset + h.last_offset_delta + 1
    return done


def marker(
    psm: ProducerStateManager,
    kind: ControlType,
    offset: int,
    *,
    epoch: int = 0,
    coordinator_epoch: int = 0,
) -> CompletedTxn | None:
    data = build_control_batch(
        kind,
        producer_id=PID,
        producer_epoch=epoch,
        coordinator_epoch=coordinator_epoch,
        base_offset=offset,
        timestamp=5,
    )
    info = psm.prepare_update(PID, AppendOrigin.COORDINATOR)
    done = info.append(read_batch_header(data), memoryview(data))
    psm.update(info)
    return done


@pytest.fixture
def psm(tmp_path: Path) -> ProducerStateManager:
    return ProducerStateManager(tmp_path, producer_id_expiration_ms=60_000)


def test_sequences_must_continue(psm: ProducerStateManager) -> None:
    append(psm, header(0, 3, offset=0))
    append(psm, header(3, 2, offset=3))
    entry = psm.last_entry(PID)
    assert entry is not None and entry.last_seq == 4 and entry.last_data_offset == 4
    with pytest.raises(OutOfOrderSequenceNumberError, match="7 \\(incoming\\), 4"):
        append(psm, header(7, 1, offset=5))
    # a duplicate of one of the last five batches is found with its offsets
    duplicate = entry.find_duplicate(header(3, 2, offset=99))
    assert duplicate is not None and (duplicate.first_offset, duplicate.last_offset) == (3, 4)


def test_only_five_batches_are_remembered(psm: ProducerStateManager) -> None:
    for i in range(7):
        append(psm, header(i, 1, offset=i))
    entry = psm.last_entry(PID)
    assert entry is not None and len(entry.batches) == 5
    assert entry.find_duplicate(header(1, 1)) is None
    assert entry.find_duplicate(header(2, 1)) is not None


def test_epochs(psm: ProducerStateManager) -> None:
    append(psm, header(0, 2, epoch=1))
    with pytest.raises(InvalidProducerEpochError, match="older"):
        append(psm, header(2, 1, epoch=0, offset=2))
    with pytest.raises(OutOfOrderSequenceNumberError, match="new epoch starts at 0"):
        append(psm, header(5, 1, epoch=2, offset=2))
    append(psm, header(0, 1, epoch=2, offset=2))
    entry = psm.last_entry(PID)
    assert entry is not None and entry.producer_epoch == 2 and len(entry.batches) == 1
    # replication records whatever the leader wrote
    append(psm, header(9, 1, epoch=1, offset=3), AppendOrigin.REPLICATION)


def test_unknown_producer_accepts_any_sequence(psm: ProducerStateManager) -> None:
    append(psm, header(57, 1))  # its earlier state was deleted with old segments
    entry = psm.last_entry(PID)
    assert entry is not None and entry.last_seq == 57


def test_sequence_wraps(psm: ProducerStateManager) -> None:
    # As in Kafka, the sequence after 2**31 - 1 is 0, not 2**31.
    append(psm, header(2**31 - 1, 1), AppendOrigin.REPLICATION)
    with pytest.raises(OutOfOrderSequenceNumberError, match="1 \\(incoming\\), 2147483647"):
        append(psm, header(1, 1, offset=1))
    append(psm, header(0, 1, offset=1))
    entry = psm.last_entry(PID)
    assert entry is not None and entry.last_seq == 0 and entry.last_data_offset == 1
    # A batch may straddle the wrap: 2**31 - 2, 2**31 - 1, 0. It ends at 0, the next starts at 1,
    # and a retry of it is still found as a duplicate.
    other = PID + 1
    append(psm, header(2**31 - 3, 1, offset=2, pid=other), AppendOrigin.REPLICATION)
    straddling = header(2**31 - 2, 3, offset=3, pid=other)
    append(psm, straddling)
    entry = psm.last_entry(other)
    assert entry is not None and entry.last_seq == 0 and entry.first_seq == 2**31 - 3
    duplicate = entry.find_duplicate(straddling)
    assert duplicate is not None and (duplicate.first_offset, duplicate.last_offset) == (3, 5)
    append(psm, header(1, 1, offset=6, pid=other))
    entry = psm.last_entry(other)
    assert entry is not None and entry.last_seq == 1


def test_transactions_and_markers(psm: ProducerStateManager) -> None:
    append(psm, header(0, 1, offset=10, txn=True))
    assert psm.first_undecided_offset() == 10 and psm.first_unstable_offset() == 10
    with pytest.raises(InvalidTxnStateError):
        append(psm, header(1, 1, offset=11))
    append(psm, header(1, 1, offset=11, txn=True))
    done = marker(psm, ControlType.ABORT, 12, coordinator_epoch=3)
    assert done == CompletedTxn(PID, 10, 12, True)
    assert psm.last_stable_offset_after(done) == 13
    psm.complete_txn(done)
    assert psm.first_undecided_offset() is None
    assert psm.first_unstable_offset() == 10  # until the marker is below the high watermark
    psm.on_high_watermark_updated(13)
    assert psm.first_unstable_offset() is None
    with pytest.raises(TransactionCoordinatorFencedError):
        marker(psm, ControlType.COMMIT, 14, coordinator_epoch=2)
    # a marker with nothing in the transaction completes nothing
    assert marker(psm, ControlType.COMMIT, 15, coordinator_epoch=3) is None


def test_snapshot_round_trip_and_reload(tmp_path: Path, psm: ProducerStateManager) -> None:
    append(psm, header(0, 3, offset=0))
    append(psm, header(0, 1, offset=3, txn=True, pid=77))
    path = psm.take_snapshot()
    assert path is not None and path.name == "00000000000000000004.snapshot"
    entries = {e.producer_id: e for e in decode_snapshot(path.read_bytes())}
    assert entries[PID].last_seq == 2 and entries[PID].last_data_offset == 2
    assert entries[77].current_txn_first_offset == 3
    other = ProducerStateManager(tmp_path, producer_id_expiration_ms=10**12)
    other.truncate_and_reload(0, 4, now_ms=0)
    assert other.map_end_offset == 4 and set(other.producers) == {PID, 77}
    assert other.first_undecided_offset() == 3


def test_corrupt_snapshot_is_dropped(tmp_path: Path, psm: ProducerStateManager) -> None:
    append(psm, header(0, 1))
    path = psm.take_snapshot()
    assert path is not None
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptSnapshotError, match="CRC"):
        decode_snapshot(bytes(data))
    with pytest.raises(CorruptSnapshotError, match="truncated"):
        decode_snapshot(b"\x00")
    other = ProducerStateManager(tmp_path, producer_id_expiration_ms=10**12)
    other.truncate_and_reload(0, 1, now_ms=0)
    assert other.producers == {} and not path.exists()


def test_snapshot_layout_is_kafkas() -> None:
    data = encode_snapshot([])
    assert data[:2] == b"\x00\x01" and data[6:] == b"\x00\x00\x00\x00" and len(data) == 10


def test_expiration(psm: ProducerStateManager) -> None:
    append(psm, header(0, 1))  # max timestamp 1000
    append(psm, header(0, 1, pid=9, txn=True, offset=1))
    psm.remove_expired_producers(now_ms=1000 + 59_999)
    assert set(psm.producers) == {PID, 9}
    psm.remove_expired_producers(now_ms=1000 + 60_000)
    assert set(psm.producers) == {9}  # a producer inside a transaction never expires
