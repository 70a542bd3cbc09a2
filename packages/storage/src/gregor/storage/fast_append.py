"""The append fast path's one call: `append_produced(segment, records, base_offset,
leader_epoch, max_size, log_start_offset) -> AppendInfo | None`, and the log's twin around
it (`native_leader_append`: `Log._append_fast` in C, the lock and the log's bookkeeping
included).

It is the C extension's (`_fast_append`: check, stamp, pwritev, index and the segment's
bookkeeping in one call, no copy of the batch) when it was built, else
`LogSegment.append_produced`, the reference, which says what it does.
`GREGOR_NO_EXTENSIONS=1` forces the reference.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from gregor.protocol.native import native_function
from gregor.storage.config import LogConfig
from gregor.storage.epoch_cache import LeaderEpochCache
from gregor.storage.files import FileHandle
from gregor.storage.index import OffsetIndex
from gregor.storage.producer_state import ProducerStateManager
from gregor.storage.results import AppendInfo
from gregor.storage.segment import LogSegment
from gregor.storage.segments import SegmentList

Records = bytes | bytearray | memoryview
LogT = TypeVar("LogT")
AppendProduced = Callable[[LogSegment, Records, int, int, int, int], AppendInfo | None]


def _native() -> AppendProduced | None:
    bind = native_function("bind", "gregor.storage._fast_append")
    if bind is None:
        return None
    # The classes whose slots it reads and writes (by offset: they must have __slots__).
    function: AppendProduced = bind(AppendInfo, LogSegment, OffsetIndex, FileHandle)
    return function


append_produced: AppendProduced = _native() or LogSegment.append_produced


def native_leader_append(
    log_type: type[LogT],
) -> Callable[[LogT, Records, int], AppendInfo | None] | None:
    """The C twin of `Log._append_fast`, reading `log_type`'s slots (log.py passes Log: this
    module cannot import it), or None when the extension is not there or not used."""
    bind = native_function("bind_leader", "gregor.storage._fast_append")
    if bind is None or append_produced is LogSegment.append_produced:
        return None
    function: Callable[[LogT, Records, int], AppendInfo | None] = bind(
        AppendInfo, log_type, SegmentList, LogConfig, ProducerStateManager, LeaderEpochCache
    )
    return function
