"""Helpers of the gregor-storage tests: batches, a settable clock, reading a log back."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gregor.protocol.records import BatchBuilder, Compression, Record, iter_batches
from gregor.storage import FetchIsolation, Log

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
