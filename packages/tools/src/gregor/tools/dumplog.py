"""`gregor dump-log`: the files of a Kafka log directory, read directly (kafka-dump-log.sh).

- `.log`: each batch (offsets, producer, sequence, timestamps, codec, CRC checked), and with
  --print-data-log each record; trailing bytes that hold no whole batch are reported.
- `.index` / `.timeindex`: each entry, and with --verify-index-only or --index-sanity-check
  the entries checked against the segment's `.log` (an offset entry names the last offset of
  the batch at its position; a time entry the largest timestamp up to its offset).
- `.snapshot`: a producer snapshot (Kafka's v1 format, CRC-32C checked).
- `.txnindex`: the aborted transactions of a segment.

Formats are Kafka's, big-endian; record batches are decoded by gregor-protocol.
"""

from __future__ import annotations

import argparse
import mmap
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gregor.protocol.checksums import crc32c
from gregor.protocol.errors import CorruptRecordError, ProtocolError
from gregor.protocol.records import RecordBatch, read_batch_header, verify_crc
from gregor.tools.common import Output, ToolError, add_output, names

OFFSET_ENTRY = struct.Struct(">ii")  # relative offset, position
TIME_ENTRY = struct.Struct(">qi")  # timestamp, relative offset
TXN_ENTRY = struct.Struct(">hqqqq")  # version, producer id, first, last, last stable offset
SNAPSHOT_HEAD = struct.Struct(">hIi")  # version, CRC-32C of what follows, entry count
SNAPSHOT_ENTRY = struct.Struct(">qhiqiqiq")
LOG_OVERHEAD = 12  # base offset and batch length, before what the batch length counts


def register(commands: argparse._SubParsersAction[Any]) -> None:
    dump = commands.add_parser("dump-log", help="log, index, snapshot and txnindex files")
    dump.add_argument("--files", action="append", required=True, metavar="FILE[,FILE]")
    dump.add_argument("--print-data-log", action="store_true", help="each record too")
    dump.add_argument(
        "--verify-index-only", action="store_true", help="check indexes, print only mismatches"
    )
    dump.add_argument(
        "--index-sanity-check", action="store_true", help="check indexes' entries are in order"
    )
    dump.add_argument("--max-bytes", type=int, default=None, help="of a .log file, from its start")
    add_output(dump)
    dump.set_defaults(run=run)


def base_offset(path: Path) -> int:
    try:
        return int(path.name.split(".")[0])
    except ValueError:
        raise ToolError(f"{path}: not a segment file name (<20-digit offset>.<suffix>)") from None


@contextmanager
def mapped(path: Path) -> Iterator[memoryview]:
    """The file's bytes (mapped: log segments can be large)."""
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise ToolError(f"cannot read {path}: {exc.strerror}") from None
    with handle:
        size = path.stat().st_size
        if size == 0:
            yield memoryview(b"")
            return
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            view = memoryview(data)
            try:
                yield view
            finally:
                view.release()


def read_log(path: Path, print_records: bool, max_bytes: int | None) -> dict[str, Any]:
    batches: list[dict[str, Any]] = []
    records = 0
    invalid = 0
    with mapped(path) as data:
        limit = len(data) if max_bytes is None else min(max_bytes, len(data))
        pos = 0
        while pos < limit:
            try:
                header = read_batch_header(data, pos)
            except CorruptRecordError:
                invalid = limit - pos  # a partial batch, as a crash leaves one, or garbage
                break
            if pos + header.size > limit:
                invalid = limit - pos
                break
            try:
                verify_crc(data, pos, header)
                valid = True
            except CorruptRecordError:
                valid = False
            batch: dict[str, Any] = {
                "base_offset": header.base_offset,
                "last_offset": header.last_offset,
                "count": header.records_count,
                "base_sequence": header.base_sequence,
                "last_sequence": header.last_sequence,
                "producer_id": header.producer_id,
                "producer_epoch": header.producer_epoch,
                "partition_leader_epoch": header.partition_leader_epoch,
                "is_transactional": header.is_transactional,
                "is_control": header.is_control,
                "delete_horizon_ms": header.delete_horizon_ms,
                "position": pos,
                "timestamp_type": header.timestamp_type.name,
                "max_timestamp": header.max_timestamp,
                "size": header.size,
                "magic": header.magic,
                "compression": header.compression.name.lower(),
                "crc": header.crc,
                "is_valid": valid,
            }
            if print_records and valid:
                batch["records"] = _records(RecordBatch.from_bytes(data, pos), header.is_control)
            records += header.records_count
            batches.append(batch)
            pos += header.size
    return {
        "file": str(path),
        "kind": "log",
        "batch_count": len(batches),
        "record_count": records,
        "invalid_bytes": invalid,
        "batches": batches,
    }


def _records(batch: RecordBatch, control: bool) -> list[dict[str, Any]]:
    out = []
    try:
        decoded = batch.records()
    except ProtocolError as exc:
        return [{"error": str(exc)}]
    for record in decoded:
        entry: dict[str, Any] = {
            "offset": record.offset,
            "timestamp": record.timestamp,
            "key_size": -1 if record.key is None else len(record.key),
            "value_size": -1 if record.value is None else len(record.value),
            "header_keys": [k for k, _ in record.headers],
        }
        if control:
            marker = batch.control_record()
            entry["control"] = f"{marker.type.name} coordinatorEpoch: {marker.coordinator_epoch}"
        else:
            entry["key"] = _text(record.key)
            entry["payload"] = _text(record.value)
        out.append(entry)
    return out


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="backslashreplace")


def _entries(data: memoryview, entry: struct.Struct) -> Iterator[tuple[int, ...]]:
    """An index's entries, up to the zeros of a preallocated (active) index (no entry is
    all zeros: a segment's first batch is never indexed)."""
    for i in range(len(data) // entry.size):
        fields = entry.unpack_from(data, i * entry.size)
        if not any(fields):
            return
        yield fields


def _log_batches(log: Path) -> dict[int, tuple[int, int, int]]:
    """Each batch of the segment's .log by position: (base offset, last offset, max
    timestamp)."""
    out: dict[int, tuple[int, int, int]] = {}
    if not log.exists():
        raise ToolError(f"{log} is missing: indexes are checked against their segment")
    with mapped(log) as data:
        pos = 0
        while len(data) - pos >= 61:
            header = read_batch_header(data, pos)
            out[pos] = (header.base_offset, header.last_offset, header.max_timestamp)
            pos += header.size
    return out


def read_index(path: Path, verify: bool) -> dict[str, Any]:
    base = base_offset(path)
    with mapped(path) as data:
        entries = [
            {"offset": base + rel, "position": pos} for rel, pos in _entries(data, OFFSET_ENTRY)
        ]
    problems: list[str] = []
    if verify:
        batches = _log_batches(path.with_suffix(".log"))
        last = -1
        for e in entries:
            if e["offset"] <= last:
                problems.append(f"Index offset {e['offset']} is not above the previous {last}")
            last = e["offset"]
            found = batches.get(e["position"])
            if found is None:
                problems.append(
                    f"Index offset: {e['offset']}: no batch at position {e['position']}"
                )
            elif found[1] != e["offset"]:
                problems.append(f"Index offset: {e['offset']}, log offset: {found[1]}")
    return {"file": str(path), "kind": "index", "entries": entries, "mismatches": problems}


def read_time_index(path: Path, verify: bool) -> dict[str, Any]:
    base = base_offset(path)
    with mapped(path) as data:
        entries = [
            {"timestamp": ts, "offset": base + rel} for ts, rel in _entries(data, TIME_ENTRY)
        ]
    problems: list[str] = []
    if verify:
        batches = sorted(_log_batches(path.with_suffix(".log")).values())
        previous = -1
        for e in entries:
            if e["timestamp"] < previous:
                problems.append(f"Found out of order timestamp {e['timestamp']} after {previous}")
            previous = e["timestamp"]
            # The largest timestamp of the batches up to the one holding its offset.
            largest = max((ts for first, _, ts in batches if first <= e["offset"]), default=None)
            if largest is None:
                problems.append(f"Time index offset {e['offset']} is beyond the log")
            elif largest != e["timestamp"]:
                problems.append(
                    f"Index timestamp: {e['timestamp']}, log timestamp: {largest} "
                    f"(offset {e['offset']})"
                )
    return {"file": str(path), "kind": "timeindex", "entries": entries, "mismatches": problems}


def read_snapshot(path: Path) -> dict[str, Any]:
    with mapped(path) as data:
        if len(data) < SNAPSHOT_HEAD.size:
            raise ToolError(f"{path}: a snapshot of {len(data)} bytes has no header")
        version, crc, count = SNAPSHOT_HEAD.unpack_from(data)
        actual = crc32c(data[6:])
        entries = [
            dict(
                zip(
                    (
                        "producer_id",
                        "producer_epoch",
                        "last_sequence",
                        "last_offset",
                        "offset_delta",
                        "timestamp",
                        "coordinator_epoch",
                        "current_txn_first_offset",
                    ),
                    SNAPSHOT_ENTRY.unpack_from(data, SNAPSHOT_HEAD.size + i * SNAPSHOT_ENTRY.size),
                    strict=True,
                )
            )
            for i in range(min(count, (len(data) - SNAPSHOT_HEAD.size) // SNAPSHOT_ENTRY.size))
        ]
    return {
        "file": str(path),
        "kind": "snapshot",
        "version": version,
        "crc_valid": actual == crc,
        "producers": entries,
    }


def read_txn_index(path: Path) -> dict[str, Any]:
    with mapped(path) as data:
        fields = ("version", "producer_id", "first_offset", "last_offset", "last_stable_offset")
        aborted = [
            dict(zip(fields, TXN_ENTRY.unpack_from(data, i * TXN_ENTRY.size), strict=True))
            for i in range(len(data) // TXN_ENTRY.size)
        ]
    return {"file": str(path), "kind": "txnindex", "aborted": aborted}


def dump(path: Path, args: argparse.Namespace) -> dict[str, Any]:
    verify = args.verify_index_only or args.index_sanity_check
    match path.suffix:
        case ".log":
            return read_log(path, args.print_data_log, args.max_bytes)
        case ".index":
            return read_index(path, verify)
        case ".timeindex":
            return read_time_index(path, verify)
        case ".snapshot":
            return read_snapshot(path)
        case ".txnindex":
            return read_txn_index(path)
    raise ToolError(f"{path}: not a .log, .index, .timeindex, .snapshot or .txnindex file")


def run(args: argparse.Namespace) -> int:
    documents = [dump(Path(name), args) for name in names(args.files)]
    out = Output(args)
    if out.json:
        out.emit(documents)
    else:
        for doc in documents:
            out.line(f"Dumping {doc['file']}")
            for line in _lines(doc, args):
                out.line(line)
    bad = [d for d in documents if d.get("mismatches") or d.get("crc_valid") is False]
    bad += [d for d in documents if any(not b["is_valid"] for b in d.get("batches", ()))]
    return 1 if bad else 0


def _flag(value: bool) -> str:
    return "true" if value else "false"


def _lines(doc: dict[str, Any], args: argparse.Namespace) -> Iterator[str]:
    """Kafka's wording, one line per batch, record or entry."""
    kind = doc["kind"]
    if kind == "log":
        for b in doc["batches"]:
            horizon = b["delete_horizon_ms"]
            yield (
                f"baseOffset: {b['base_offset']} lastOffset: {b['last_offset']} "
                f"count: {b['count']} baseSequence: {b['base_sequence']} "
                f"lastSequence: {b['last_sequence']} producerId: {b['producer_id']} "
                f"producerEpoch: {b['producer_epoch']} "
                f"partitionLeaderEpoch: {b['partition_leader_epoch']} "
                f"isTransactional: {_flag(b['is_transactional'])} "
                f"isControl: {_flag(b['is_control'])} "
                f"deleteHorizonMs: {'OptionalLong.empty' if horizon is None else horizon} "
                f"position: {b['position']} "
                f"{'LogAppendTime' if b['timestamp_type'] == 'LOG_APPEND_TIME' else 'CreateTime'}: "
                f"{b['max_timestamp']} size: {b['size']} magic: {b['magic']} "
                f"compresscodec: {b['compression']} crc: {b['crc']} isvalid: {_flag(b['is_valid'])}"
            )
            for r in b.get("records", ()):
                detail = (
                    f"endTxnMarker: {r['control']}"
                    if "control" in r
                    else f"key: {r.get('key')} payload: {r.get('payload')}"
                )
                yield (
                    f"| offset: {r['offset']} timestamp: {r['timestamp']} "
                    f"keySize: {r['key_size']} valueSize: {r['value_size']} "
                    f"headerKeys: [{','.join(r['header_keys'])}] {detail}"
                )
        if doc["invalid_bytes"]:
            name = Path(doc["file"]).name
            yield f"Found {doc['invalid_bytes']} invalid bytes at the end of {name}"
        yield f"Batches: {doc['batch_count']} records: {doc['record_count']}"
    elif kind in ("index", "timeindex"):
        if not args.verify_index_only:
            for e in doc["entries"]:
                yield (
                    f"offset: {e['offset']} position: {e['position']}"
                    if kind == "index"
                    else f"timestamp: {e['timestamp']} offset: {e['offset']}"
                )
        yield from doc["mismatches"]
        if args.verify_index_only or args.index_sanity_check:
            verdict = "mismatches found" if doc["mismatches"] else "passed sanity check"
            yield f"{Path(doc['file']).name} {verdict} ({len(doc['entries'])} entries)"
    elif kind == "snapshot":
        for p in doc["producers"]:
            yield (
                f"producerId: {p['producer_id']} producerEpoch: {p['producer_epoch']} "
                f"coordinatorEpoch: {p['coordinator_epoch']} "
                f"currentTxnFirstOffset: {p['current_txn_first_offset']} "
                f"lastTimestamp: {p['timestamp']} lastSequence: {p['last_sequence']} "
                f"lastOffset: {p['last_offset']} offsetDelta: {p['offset_delta']}"
            )
        if not doc["crc_valid"]:
            yield "CRC mismatch: the snapshot is corrupt"
    else:
        for a in doc["aborted"]:
            yield (
                f"version: {a['version']} producerId: {a['producer_id']} "
                f"firstOffset: {a['first_offset']} lastOffset: {a['last_offset']} "
                f"lastStableOffset: {a['last_stable_offset']}"
            )
