"""Log appends: offsets, leader epochs, validation errors, producer state, followers."""

from __future__ import annotations

import struct

import pytest
from storage_testing import FakeClock, LogOpener, make_batch, read_records

from gregor.protocol.errors import (
    CorruptMessageError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTimestampError,
    MessageTooLargeError,
    OutOfOrderSequenceNumberError,
    RecordListTooLargeError,
)
from gregor.protocol.records import Compression, TimestampType, iter_batches, read_batch_header
from gregor.storage import AppendOrigin, OffsetsOutOfOrderError, UnexpectedAppendOffsetError


def test_offsets_and_epochs_are_stamped_in_the_file(open_test_log: LogOpener) -> None:
    log = open_test_log()
    first = log.append_as_leader(make_batch([b"a", b"b", b"c"], timestamp=500), leader_epoch=3)
    second = log.append_as_leader(
        make_batch([b"d", b"e"], timestamp=400) + make_batch([b"f"], timestamp=900), leader_epoch=4
    )
    assert (first.first_offset, first.last_offset, first.records_count) == (0, 2, 3)
    assert (first.max_timestamp, first.offset_of_max_timestamp) == (502, 2)
    assert (second.first_offset, second.last_offset, second.records_count) == (3, 5, 3)
    assert (second.max_timestamp, second.offset_of_max_timestamp) == (900, 5)
    assert second.last_leader_epoch == 4 and not second.duplicate
    assert log.log_end_offset == 6
    data = log.active_segment.log_path.read_bytes()
    headers = [b.header for b in iter_batches(data)]
    assert [(h.base_offset, h.last_offset, h.partition_leader_epoch) for h in headers] == [
        (0, 2, 3),
        (3, 4, 4),
        (5, 5, 4),
    ]
    for batch in iter_batches(data):
        batch.verify_crc()  # patching the offset and the epoch leaves the CRC valid
    assert [r.value for r in read_records(log)] == [b"a", b"b", b"c", b"d", b"e", b"f"]
    assert log.epoch_cache.entries() == [(3, 0), (4, 3)]


def test_compressed_batches_keep_their_bytes(open_test_log: LogOpener) -> None:
    log = open_test_log()
    batch = make_batch([b"x" * 100] * 10, compression=Compression.GZIP)
    info = log.append_as_leader(batch, leader_epoch=0)
    assert (info.first_offset, info.last_offset) == (0, 9)
    stored = log.active_segment.log_path.read_bytes()
    assert stored[61:] == batch[61:]  # the compressed records were not touched
    assert [r.offset for r in read_records(log)] == list(range(10))


@pytest.mark.parametrize("where", [30, 70, -1])
def test_corrupt_batches_are_rejected_and_nothing_written(
    open_test_log: LogOpener, where: int
) -> None:
    log = open_test_log()
    log.append_as_leader(make_batch([b"ok"]), leader_epoch=0)
    size = log.size
    batch = bytearray(make_batch([b"first", b"second"]))
    batch[where] ^= 0x01
    with pytest.raises(CorruptMessageError):
        log.append_as_leader(batch, leader_epoch=0)
    assert log.log_end_offset == 1 and log.size == size


def test_partial_batch_is_rejected(open_test_log: LogOpener) -> None:
    log = open_test_log()
    batch = make_batch([b"a", b"b"])
    with pytest.raises(CorruptMessageError, match="declares"):
        log.append_as_leader(batch[:-3], leader_epoch=0)
    with pytest.raises(CorruptMessageError, match="partial batch"):
        log.append_as_leader(batch + batch[:20], leader_epoch=0)
    with pytest.raises(CorruptMessageError, match="magic"):
        log.append_as_leader(batch[:16] + b"\x01" + batch[17:], leader_epoch=0)
    assert log.log_end_offset == 0


def test_size_limits(open_test_log: LogOpener) -> None:
    log = open_test_log(max_message_bytes=200, segment_bytes=1000)
    with pytest.raises(
        MessageTooLargeError, match=r"over the maximum of 200 \(max\.message\.bytes\)"
    ):
        log.append_as_leader(make_batch([b"x" * 300]), leader_epoch=0)
    small = make_batch([b"x" * 100])
    with pytest.raises(RecordListTooLargeError, match=r"segment\.bytes"):
        log.append_as_leader(small * 7, leader_epoch=0)
    assert log.log_end_offset == 0


def test_client_batches_must_be_well_formed(open_test_log: LogOpener) -> None:
    log = open_test_log()
    with pytest.raises(InvalidRecordError, match="base offset of a produced batch must be 0"):
        log.append_as_leader(make_batch([b"a"], base_offset=5), leader_epoch=0)
    header = read_batch_header(make_batch([b"a", b"b"]))
    assert header.records_count == 2
    # a batch that says it holds one record more than its offsets span
    forged = bytearray(make_batch([b"a", b"b"]))
    struct.pack_into(">i", forged, 57, 3)
    import crc32c

    struct.pack_into(">I", forged, 17, crc32c.crc32c(bytes(forged[21:])))
    with pytest.raises(InvalidRecordError, match="last offset delta"):
        log.append_as_leader(forged, leader_epoch=0)


def test_empty_append(open_test_log: LogOpener) -> None:
    info = open_test_log().append_as_leader(b"", leader_epoch=0)
    assert (info.first_offset, info.last_offset, info.valid_bytes) == (-1, -1, 0)


def test_log_append_time(open_test_log: LogOpener, clock: FakeClock) -> None:
    log = open_test_log(message_timestamp_type="LogAppendTime")
    info = log.append_as_leader(make_batch([b"a", b"b"], timestamp=5), leader_epoch=0)
    assert info.log_append_time == clock.now and info.max_timestamp == clock.now
    (batch,) = iter_batches(log.active_segment.log_path.read_bytes())
    batch.verify_crc()
    assert batch.header.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert [r.timestamp for r in batch] == [clock.now, clock.now]


def test_timestamp_bounds(open_test_log: LogOpener, clock: FakeClock) -> None:
    log = open_test_log(message_timestamp_before_max_ms=1000, message_timestamp_after_max_ms=1000)
    log.append_as_leader(make_batch([b"a"], timestamp=clock.now - 999), leader_epoch=0)
    with pytest.raises(InvalidTimestampError, match="out of range"):
        log.append_as_leader(make_batch([b"a"], timestamp=clock.now - 1001), leader_epoch=0)
    with pytest.raises(InvalidTimestampError):
        log.append_as_leader(make_batch([b"a"], timestamp=clock.now + 1001), leader_epoch=0)


def test_compacted_topics_need_keys(open_test_log: LogOpener) -> None:
    log = open_test_log(cleanup_policy="compact")
    log.append_as_leader(make_batch([b"v"], keys=[b"k"]), leader_epoch=0)
    end = log.log_end_offset
    keys = [b"k", None, b"", None, b"k2", None, None]  # an empty key is a key
    with pytest.raises(InvalidRecordError) as raised:
        log.append_as_leader(make_batch([b"v"] * len(keys), keys=keys), leader_epoch=0)
    # KIP-467: every bad record by its index in the batch, as Kafka names it.
    why = f"Compacted topic cannot accept message without key in topic partition {log.name}."
    assert raised.value.record_errors == ((1, why), (3, why), (5, why), (6, why))
    assert str(raised.value) == (
        "One or more records have been rejected due to 4 record errors in total, and only "
        f"showing the first three errors at most: [RecordError(batchIndex=1, message='{why}'), "
        f"RecordError(batchIndex=3, message='{why}'), RecordError(batchIndex=5, message='{why}')]"
    )
    assert log.log_end_offset == end  # nothing of the batch was appended


def test_idempotent_producer(open_test_log: LogOpener) -> None:
    log = open_test_log()
    pid = 1234
    first = log.append_as_leader(
        make_batch([b"a", b"b"], producer_id=pid, producer_epoch=0, base_sequence=0), 0
    )
    log.append_as_leader(make_batch([b"other"]), 0)
    again = log.append_as_leader(
        make_batch([b"a", b"b"], producer_id=pid, producer_epoch=0, base_sequence=0), 0
    )
    assert again.duplicate and (again.first_offset, again.last_offset) == (0, 1)
    assert first.first_offset == 0 and log.log_end_offset == 3

    def produce(value: bytes, epoch: int, seq: int) -> None:
        log.append_as_leader(
            make_batch([value], producer_id=pid, producer_epoch=epoch, base_sequence=seq), 0
        )

    with pytest.raises(OutOfOrderSequenceNumberError):
        produce(b"c", 0, 5)
    produce(b"c", 0, 2)
    produce(b"d", 1, 0)
    with pytest.raises(InvalidProducerEpochError):
        produce(b"e", 0, 3)
    assert [r.value for r in read_records(log)] == [b"a", b"b", b"other", b"c", b"d"]


def test_follower_appends_keep_offsets_and_epochs(open_test_log: LogOpener) -> None:
    log = open_test_log()
    batches = make_batch([b"a", b"b"], base_offset=0, leader_epoch=1) + make_batch(
        [b"c"], base_offset=2, leader_epoch=2
    )
    info = log.append_as_follower(batches)
    assert (info.first_offset, info.last_offset) == (0, 2)
    assert log.epoch_cache.entries() == [(1, 0), (2, 2)]
    # a compacted leader may skip offsets
    log.append_as_follower(make_batch([b"d"], base_offset=10, leader_epoch=2))
    assert log.log_end_offset == 11
    with pytest.raises(UnexpectedAppendOffsetError, match="below the log end offset 11"):
        log.append_as_follower(make_batch([b"x"], base_offset=5, leader_epoch=2))
    with pytest.raises(OffsetsOutOfOrderError):
        log.append_as_follower(
            make_batch([b"y"], base_offset=20) + make_batch([b"z"], base_offset=15)
        )
    # a fetch response cut in the middle of its last batch
    tail = make_batch([b"e"], base_offset=11, leader_epoch=2)
    log.append_as_follower(tail + make_batch([b"f"], base_offset=12)[:30])
    assert log.log_end_offset == 12
    assert [r.offset for r in read_records(log)] == [0, 1, 2, 10, 11]


def test_coordinator_appends_transaction_markers(open_test_log: LogOpener) -> None:
    from gregor.protocol.records import ControlType, build_control_batch

    log = open_test_log()
    log.append_as_leader(
        make_batch([b"t"], producer_id=9, producer_epoch=0, base_sequence=0, transactional=True), 0
    )
    commit = build_control_batch(
        ControlType.COMMIT, producer_id=9, producer_epoch=0, coordinator_epoch=0
    )
    with pytest.raises(InvalidRecordError, match="control"):
        log.append_as_leader(commit, 0)
    info = log.append_as_leader(commit, 0, origin=AppendOrigin.COORDINATOR)
    assert info.first_offset == 1 and not log.has_ongoing_transaction(9)
