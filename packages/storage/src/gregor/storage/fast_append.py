"""The fast append: one produced batch written in one call, the common case of
`Log.append_as_leader`.

Two levels, each a reference in Python with a C twin (`_fast_append`) that does the same in
one call, no copy of the batch:

- `segment_fast_append(segment, records, base_offset, leader_epoch, max_size,
  log_start_offset) -> AppendInfo | None`: check, stamp, pwritev, index and the segment's
  bookkeeping (reference: `LogSegment.fast_append`);
- `log_fast_append(Log)`: the log's level around it, the lock and the log's bookkeeping
  included (reference: `Log._fast_append`; log.py binds it, as this module cannot import
  `Log`).

The C twins are used when the extension was built; `GREGOR_NO_EXTENSIONS=1` forces the
references.
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
SegmentFastAppend = Callable[[LogSegment, Records, int, int, int, int], AppendInfo | None]


def _native() -> SegmentFastAppend | None:
    bind = native_function("bind_segment", "gregor.storage._fast_append")
    if bind is None:
        return None
    # The classes whose slots it reads and writes (by offset: they must have __slots__).
    function: SegmentFastAppend = bind(AppendInfo, LogSegment, OffsetIndex, FileHandle)
    return function


segment_fast_append: SegmentFastAppend = _native() or LogSegment.fast_append


def log_fast_append(
    log_type: type[LogT],
) -> Callable[[LogT, Records, int], AppendInfo | None] | None:
    """The C twin of `Log._fast_append`, reading `log_type`'s slots, or None when the
    extension is not there or not used."""
    bind = native_function("bind_log", "gregor.storage._fast_append")
    if bind is None or segment_fast_append is LogSegment.fast_append:
        return None
    function: Callable[[LogT, Records, int], AppendInfo | None] = bind(
        AppendInfo, log_type, SegmentList, LogConfig, ProducerStateManager, LeaderEpochCache
    )
    return function
