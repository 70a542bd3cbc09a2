"""dump-log on segments written here, byte for byte in Kafka's formats: batch and record
counts, the trailing partial batch, and index entries that do and do not match the log."""

from __future__ import annotations

import argparse
import struct
from pathlib import Path

import pytest

from gregor.protocol.checksums import crc32c
from gregor.protocol.records import BatchBuilder, Compression
from gregor.tools import dumplog
from gregor.tools.common import ToolError


def args(**flags: object) -> argparse.Namespace:
    defaults = {
        "print_data_log": False,
        "verify_index_only": False,
        "index_sanity_check": False,
        "max_bytes": None,
    }
    return argparse.Namespace(**{**defaults, **flags})


def segment(directory: Path, base: int, sizes: list[int]) -> tuple[Path, list[tuple[int, int]]]:
    """A .log of batches of these record counts from offset `base`; (last offset, position)
    of each batch."""
    data = bytearray()
    batches = []
    offset = base
    for n in sizes:
        builder = BatchBuilder(Compression.GZIP, base_offset=offset, base_timestamp=1000 + offset)
        for i in range(n):
            builder.append(b"v%d" % (offset + i), key=b"k", timestamp=1000 + offset + i)
        batches.append((offset + n - 1, len(data)))
        data += builder.build()
        offset += n
    log = directory / f"{base:020d}.log"
    log.write_bytes(bytes(data))
    return log, batches


def test_log_counts_and_records(tmp_path: Path) -> None:
    log, _ = segment(tmp_path, 40, [3, 5, 2])
    log.write_bytes(log.read_bytes() + b"\x00" * 30)  # a partial batch, as a crash leaves
    doc = dumplog.dump(log, args(print_data_log=True))
    assert (doc["batch_count"], doc["record_count"], doc["invalid_bytes"]) == (3, 10, 30)
    assert [b["base_offset"] for b in doc["batches"]] == [40, 43, 48]
    records = [r for b in doc["batches"] for r in b["records"]]
    assert [r["offset"] for r in records] == list(range(40, 50))
    assert records[0] == {
        "offset": 40,
        "timestamp": 1040,
        "key_size": 1,
        "value_size": 3,
        "header_keys": [],
        "key": "k",
        "payload": "v40",
    }
    assert {b["compression"] for b in doc["batches"]} == {"gzip"}


def test_index_verification(tmp_path: Path) -> None:
    log, batches = segment(tmp_path, 100, [4, 4, 4])
    index = log.with_suffix(".index")
    good = [(last - 100, pos) for last, pos in batches[1:]]
    # A preallocated index: zeros after its entries.
    index.write_bytes(b"".join(struct.pack(">ii", *e) for e in good) + b"\x00" * 80)
    doc = dumplog.dump(index, args(verify_index_only=True))
    assert doc["entries"] == [
        {"offset": 107, "position": batches[1][1]},
        {"offset": 111, "position": batches[2][1]},
    ]
    assert doc["mismatches"] == []
    # An entry naming the wrong offset for its batch.
    index.write_bytes(struct.pack(">ii", 5, batches[1][1]))
    assert dumplog.dump(index, args(verify_index_only=True))["mismatches"] == [
        "Index offset: 105, log offset: 107"
    ]
    times = log.with_suffix(".timeindex")
    times.write_bytes(struct.pack(">qi", 1107, 7) + struct.pack(">qi", 1111, 11))
    assert dumplog.dump(times, args(index_sanity_check=True))["mismatches"] == []
    times.write_bytes(struct.pack(">qi", 1111, 7))
    assert dumplog.dump(times, args(index_sanity_check=True))["mismatches"] == [
        "Index timestamp: 1111, log timestamp: 1107 (offset 107)"
    ]


def test_snapshot_and_txnindex(tmp_path: Path) -> None:
    entry = struct.pack(">qhiqiqiq", 7, 1, 9, 120, 4, 5000, 2, -1)
    body = struct.pack(">i", 1) + entry
    snapshot = tmp_path / "00000000000000000121.snapshot"
    snapshot.write_bytes(struct.pack(">hI", 1, crc32c(body)) + body)
    doc = dumplog.dump(snapshot, args())
    assert doc["crc_valid"] and doc["producers"] == [
        {
            "producer_id": 7,
            "producer_epoch": 1,
            "last_sequence": 9,
            "last_offset": 120,
            "offset_delta": 4,
            "timestamp": 5000,
            "coordinator_epoch": 2,
            "current_txn_first_offset": -1,
        }
    ]
    snapshot.write_bytes(struct.pack(">hI", 1, 0) + body)
    assert not dumplog.dump(snapshot, args())["crc_valid"]
    txn = tmp_path / "00000000000000000000.txnindex"
    txn.write_bytes(struct.pack(">hqqqq", 0, 7, 10, 14, 10))
    assert dumplog.dump(txn, args())["aborted"] == [
        {
            "version": 0,
            "producer_id": 7,
            "first_offset": 10,
            "last_offset": 14,
            "last_stable_offset": 10,
        }
    ]


def test_unknown_files(tmp_path: Path) -> None:
    with pytest.raises(ToolError, match=r"not a \.log"):
        dumplog.dump(tmp_path / "x.txt", args())
    with pytest.raises(ToolError, match="cannot read"):
        dumplog.dump(tmp_path / "00000000000000000000.log", args())
