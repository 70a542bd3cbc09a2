"""Helpers of the gregor-storage tests: batches, a settable clock, reading a log back, and
what a log's transactions should be (a model built from its batches alone) and what a
read_committed consumer sees."""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence

import attrs

from gregor.protocol.records import (
    BatchBuilder,
    Compression,
    ControlType,
    Record,
    RecordBatch,
    iter_batches,
)
from gregor.storage import AbortedTxn, FetchIsolation, Log

LogOpener = Callable[..., Log]


class FakeClock:
    """Milliseconds that only move when a test moves them."""

    def __init__(self, now: int = 1_700_000_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


def make_batch(
    values: Sequence[bytes | None],
    *,
    keys: Sequence[bytes | None] | None = None,
    timestamp: int = 1_000,
    compression: Compression = Compression.NONE,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    base_offset: int = 0,
    leader_epoch: int = -1,
) -> bytes:
    """A v2 batch of `values` (one record each), timestamps counting up from `timestamp`."""
    builder = BatchBuilder(
        compression,
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=transactional,
        partition_leader_epoch=leader_epoch,
    )
    for i, value in enumerate(values):
        key = keys[i] if keys is not None else None
        builder.append(value, key=key, timestamp=timestamp + i)
    return builder.build()


def read_records(
    log: Log, start: int = 0, isolation: FetchIsolation = FetchIsolation.LOG_END
) -> list[Record]:
    """Every record from `start` on, reading segment after segment."""
    out: list[Record] = []
    offset = start
    while offset < log.log_end_offset:
        info = log.read(offset, 1 << 30, isolation)
        data = info.records.read()
        if not data:
            break
        batches = list(iter_batches(data))
        out.extend(r for b in batches for r in b if r.offset >= start)
        offset = batches[-1].header.last_offset + 1
    return out


def all_batches(log: Log) -> list[RecordBatch]:
    """Every batch of the log, control batches included (reads up to the log end)."""
    out: list[RecordBatch] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 30, FetchIsolation.LOG_END).records.read()
        if not data:
            break
        batches = list(iter_batches(data))
        out.extend(batches)
        offset = batches[-1].header.last_offset + 1
    return out


@attrs.define
class TxnModel:
    """A log's transactions worked out from its batches, as Kafka defines them, without
    gregor-storage's producer state: the open ones (producer id -> first offset), the
    aborted ones with the LSO their marker left (other producers' open transactions), and
    the offsets a read_committed consumer may see once they are stable."""

    ongoing: dict[int, int] = attrs.field(factory=dict)
    aborted: list[AbortedTxn] = attrs.field(factory=list)
    committed: list[int] = attrs.field(factory=list)
    _pending: dict[int, list[int]] = attrs.field(factory=dict)

    @classmethod
    def of(cls, log: Log) -> TxnModel:
        model = cls()
        for batch in all_batches(log):
            model.add(batch)
        return model

    def add(self, batch: RecordBatch) -> None:
        header = batch.header
        pid = header.producer_id
        offsets = [r.offset for r in batch]
        if header.is_control:
            first = self.ongoing.pop(pid, None)
            if first is None:
                return
            data = self._pending.pop(pid)
            if batch.control_record().type == ControlType.ABORT:
                lso = min(self.ongoing.values(), default=header.base_offset + 1)
                self.aborted.append(AbortedTxn(pid, first, header.base_offset, lso))
            else:
                self.committed.extend(data)
        elif header.is_transactional:
            self.ongoing.setdefault(pid, header.base_offset)
            self._pending.setdefault(pid, []).extend(offsets)
        else:
            self.committed.extend(offsets)

    def last_stable_offset(self, high_watermark: int) -> int:
        return min([high_watermark, *self.ongoing.values()])

    def visible(self, high_watermark: int) -> list[int]:
        lso = self.last_stable_offset(high_watermark)
        return sorted(o for o in self.committed if o < lso)


def read_committed(log: Log, max_bytes: int = 1 << 30) -> list[Record]:
    """What a read_committed consumer returns: fetches bounded by the LSO, control batches
    skipped, and a batch of an aborted transaction dropped as Kafka's consumer drops it (the
    fetch's aborted list, by first offset, then the producer's abort marker)."""
    out: list[Record] = []
    offset = log.log_start_offset
    aborted_pids: set[int] = set()
    while True:
        info = log.read(offset, max_bytes, FetchIsolation.TXN_COMMITTED)
        data = info.records.read()
        if not data:
            return out
        pending = sorted(info.aborted_transactions or [], key=lambda t: t.first_offset)
        for batch in iter_batches(data):
            header = batch.header
            while pending and pending[0].first_offset <= header.last_offset:
                aborted_pids.add(pending.pop(0).producer_id)
            offset = header.last_offset + 1
            if header.is_control:
                if batch.control_record().type == ControlType.ABORT:
                    aborted_pids.discard(header.producer_id)
            elif not (header.is_transactional and header.producer_id in aborted_pids):
                out.extend(r for r in batch if r.offset >= info.fetch_offset)


def check_transactions(log: Log) -> TxnModel:
    """Assert that the log's open transactions, LSO, `.txnindex` and read_committed view
    agree with the model worked out from its batches (the high watermark moved to the log
    end first); returns the model."""
    log.update_high_watermark(log.log_end_offset)
    model = TxnModel.of(log)
    assert log.ongoing_transactions() == model.ongoing
    assert log.last_stable_offset == model.last_stable_offset(log.log_end_offset)
    assert log.collect_aborted_transactions(0, log.log_end_offset) == model.aborted
    assert index_entries(log) == model.aborted
    assert [r.offset for r in read_committed(log)] == model.visible(log.log_end_offset)
    return model


def index_entries(log: Log) -> list[AbortedTxn]:
    """The `.txnindex` files decoded by hand from Kafka's layout (34 bytes: version 0,
    producer id, first offset, last offset, LSO), each entry checked to sit in the segment
    that holds its marker."""
    found: list[AbortedTxn] = []
    segments = log.segments.all()
    for i, segment in enumerate(segments):
        path = segment.txn_index.path
        data = path.read_bytes() if path.exists() else b""
        assert len(data) % 34 == 0
        upper = segments[i + 1].base_offset if i + 1 < len(segments) else log.log_end_offset
        for pos in range(0, len(data), 34):
            version, pid, first, last, lso = struct.unpack_from(">hqqqq", data, pos)
            assert version == 0 and segment.base_offset <= last < upper
            found.append(AbortedTxn(pid, first, last, lso))
    return found
