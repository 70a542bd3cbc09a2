"""The append fast path's one call: `append_produced(segment, records, base_offset,
leader_epoch, max_size, log_start_offset) -> AppendInfo | None`.

It is the C extension's (`_fast_append`: check, stamp, pwritev, index and the segment's
bookkeeping in one call, no copy of the batch) when it was built, else
`LogSegment.append_produced`, the reference, which says what it does.
`GREGOR_NO_EXTENSIONS=1` forces the reference.
"""

from __future__ import annotations

from collections.abc import Callable

from gregor.protocol.native import native_function
from gregor.storage.files import FileHandle
from gregor.storage.index import OffsetIndex
from gregor.storage.results import AppendInfo
from gregor.storage.segment import LogSegment

AppendProduced = Callable[
    [LogSegment, bytes | bytearray | memoryview, int, int, int, int], AppendInfo | None
]


def _native() -> AppendProduced | None:
    bind = native_function("bind", "gregor.storage._fast_append")
    if bind is None:
        return None
    # The classes whose slots it reads and writes (by offset: they must have __slots__).
    function: AppendProduced = bind(AppendInfo, LogSegment, OffsetIndex, FileHandle)
    return function


append_produced: AppendProduced = _native() or LogSegment.append_produced
