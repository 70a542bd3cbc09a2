"""The format proof: `.log` files read by independent decoders (kafka-python's and aiokafka's
record readers over the raw file bytes), and index files checked against their definition."""

from __future__ import annotations

import itertools
import struct
import uuid
from pathlib import Path

import pytest
from aiokafka.record.memory_records import MemoryRecords as AioMemoryRecords
from kafka.record.memory_records import MemoryRecords as KafkaPythonMemoryRecords
from storage_testing import FakeClock, LogOpener

from gregor.protocol.records import (
    BatchBuilder,
    Compression,
    ControlType,
    build_control_batch,
    scan_batches,
)
from gregor.storage import AppendOrigin, Log
from gregor.storage.checkpoints import decode_topic_id
from gregor.storage.producer_state import decode_snapshot

Written = tuple[int, bytes | None, bytes | None, int, tuple[tuple[str, bytes | None], ...]]


def _write_everything(log: Log, clock: FakeClock) -> list[Written]:
    """Plain, compressed, idempotent, transactional and tombstone batches; returns the data
    records as (offset, key, value, timestamp, headers)."""
    written: list[Written] = []
    codecs = [
        Compression.NONE,
        Compression.GZIP,
        Compression.SNAPPY,
        Compression.LZ4,
        Compression.ZSTD,
    ]
    seq = txn_seq = 0
    for i in range(40):
        codec = codecs[i % len(codecs)]
        transactional = i % 10 == 7
        idempotent = i % 3 == 0 and not transactional
        builder = BatchBuilder(
            codec,
            producer_id=500 if idempotent else (600 if transactional else -1),
            producer_epoch=0 if (idempotent or transactional) else -1,
            base_sequence=seq if idempotent else (txn_seq if transactional else -1),
            is_transactional=transactional,
        )
        rows = []
        for j in range(1 + i % 4):
            key = None if j == 2 else b"key-%d-%d" % (i, j)
            value = None if (i, j) == (5, 1) else (b"value-%d-%d " % (i, j)) * (1 + i)
            headers = (("h", b"%d" % j), ("empty", None)) if j == 1 else ()
            ts = clock.now + i * 10 + j
            builder.append(value, key=key, headers=headers, timestamp=ts)
            rows.append((key, value, ts, headers))
        if idempotent:
            seq += len(rows)
        if transactional:
            txn_seq += len(rows)
        info = log.append_as_leader(builder.build(), leader_epoch=2 + i // 20)
        for k, (key, value, ts, headers) in enumerate(rows):
            written.append((info.first_offset + k, key, value, ts, headers))
        if transactional:
            marker = build_control_batch(
                ControlType.ABORT if i == 7 else ControlType.COMMIT,
                producer_id=600,
                producer_epoch=0,
                coordinator_epoch=1,
                timestamp=clock.now + i * 10,
            )
            log.append_as_leader(marker, leader_epoch=2 + i // 20, origin=AppendOrigin.COORDINATOR)
    return written


@pytest.mark.parametrize(
    "reader", [KafkaPythonMemoryRecords, AioMemoryRecords], ids=["kafka-python", "aiokafka"]
)
def test_log_files_read_by_independent_decoders(
    open_test_log: LogOpener, clock: FakeClock, log_dir: Path, reader: type
) -> None:
    log = open_test_log(segment_bytes=2000, index_interval_bytes=300)
    written = _write_everything(log, clock)
    log.close()
    files = sorted(log_dir.glob("*.log"))
    assert len(files) > 3
    seen: list[Written] = []
    control_offsets = []
    expected_next = 0
    for path in files:
        records = reader(path.read_bytes())
        first = True
        while records.has_next():
            batch = records.next_batch()
            assert batch.validate_crc()
            if first:
                assert batch.base_offset == int(path.name[:20])  # files are named by their base
                first = False
            assert batch.base_offset == expected_next
            expected_next = batch.base_offset + batch.last_offset_delta + 1
            for record in batch:
                if batch.is_control_batch:
                    control_offsets.append(record.offset)
                    continue
                headers = tuple((k, v) for k, v in record.headers)
                seen.append((record.offset, record.key, record.value, record.timestamp, headers))
    assert seen == written
    assert len(control_offsets) == 4 and expected_next == log.log_end_offset


def test_index_entries_match_their_definition(
    open_test_log: LogOpener, clock: FakeClock, log_dir: Path
) -> None:
    interval = 300
    log = open_test_log(segment_bytes=2000, index_interval_bytes=interval)
    _write_everything(log, clock)
    log.close()
    for path in sorted(log_dir.glob("*.log")):
        base = int(path.name[:20])
        data = path.read_bytes()
        batches = list(scan_batches(data))
        # .index: (relative offset, position) entries, added when more than index.interval.bytes
        # were appended since the previous entry; the entry names the appended batch's last
        # offset and the position where it starts. Every append here was one batch.
        expected = []
        since = 0
        for pos, header in batches:
            if since > interval:
                expected.append((header.last_offset - base, pos))
                since = 0
            since += header.size
        raw = (log_dir / f"{base:020d}.index").read_bytes()
        entries = [struct.unpack_from(">ii", raw, i) for i in range(0, len(raw), 8)]
        assert entries == expected
        starts = {pos: h for pos, h in batches}
        for relative, pos in entries:
            assert pos in starts and starts[pos].last_offset == base + relative
        # .timeindex: (timestamp, relative offset) of the largest timestamp so far, strictly
        # increasing; its last entry is the segment's largest timestamp.
        raw = (log_dir / f"{base:020d}.timeindex").read_bytes()
        times = [struct.unpack_from(">qi", raw, i) for i in range(0, len(raw), 12)]
        assert times and all(a[0] < b[0] for a, b in itertools.pairwise(times))
        by_last = {h.last_offset: h for _pos, h in batches}
        running = -1
        for _pos, header in batches:
            running = max(running, header.max_timestamp)
        assert times[-1][0] == running
        for ts, relative in times:
            assert by_last[base + relative].max_timestamp == ts


def test_small_files_of_the_partition(
    open_test_log: LogOpener, clock: FakeClock, log_dir: Path
) -> None:
    log = open_test_log(segment_bytes=2000)
    _write_everything(log, clock)
    topic_id = uuid.uuid4()
    log.write_topic_id(topic_id)
    log.close()
    lines = (log_dir / "leader-epoch-checkpoint").read_text().splitlines()
    assert lines == ["0", "2", "2 0", f"3 {_first_offset_of_epoch(log_dir, 3)}"]
    meta = (log_dir / "partition.metadata").read_text().splitlines()
    assert meta[0] == "version: 0" and decode_topic_id(meta[1].split(": ")[1]) == topic_id
    snapshot = max(log_dir.glob("*.snapshot"))
    assert int(snapshot.name[:20]) == log.log_end_offset
    producers = {e.producer_id: e for e in decode_snapshot(snapshot.read_bytes())}
    assert set(producers) == {500, 600} and producers[600].coordinator_epoch == 1
    txn = list(log_dir.glob("*.txnindex"))
    assert len(txn) == 1 and len(txn[0].read_bytes()) == 34  # the one aborted transaction


def _first_offset_of_epoch(log_dir: Path, epoch: int) -> int:
    for path in sorted(log_dir.glob("*.log")):
        for _pos, header in scan_batches(path.read_bytes()):
            if header.partition_leader_epoch == epoch:
                return header.base_offset
    raise AssertionError(epoch)
