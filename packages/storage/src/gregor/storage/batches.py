"""Walking the batches of a segment file, on top of gregor-protocol's batch header reader.

Two walks: `scan_headers` reads headers only (position lookups, producer state rebuilds);
`read_batches` hands out each whole batch too (recovery checks CRCs, the cleaner filters
records). Both read the file in large chunks and stop before a partial batch at the end; a
malformed header raises `CorruptRecordError` (from gregor-protocol).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from gregor.protocol.records import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    read_batch_header,
)
from gregor.storage.files import FileHandle

HEADER_CHUNK: Final = 4096 + 512  # one index interval of small batches
DATA_CHUNK: Final = 1024 * 1024


def scan_headers(
    handle: FileHandle, start: int, end: int, chunk: int = HEADER_CHUNK
) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of each complete batch in the file between `start` and `end`."""
    for pos, header, _data in _walk(handle, start, end, chunk, whole=False):
        yield pos, header


def read_batches(
    handle: FileHandle, start: int, end: int, chunk: int = DATA_CHUNK
) -> Iterator[tuple[int, BatchHeader, memoryview]]:
    """(position, header, the whole batch's bytes) of each complete batch in [start, end)."""
    return _walk(handle, start, end, chunk, whole=True)


def _walk(
    handle: FileHandle, start: int, end: int, chunk: int, *, whole: bool
) -> Iterator[tuple[int, BatchHeader, memoryview]]:
    """Read `chunk` bytes at a time; with `whole`, re-read so each batch is in one buffer.
    Without, the yielded view may hold only the batch's start."""
    pos = start
    buf = memoryview(b"")
    buf_start = start
    chunk = max(chunk, BATCH_HEADER_SIZE)
    while end - pos >= BATCH_HEADER_SIZE:
        at = pos - buf_start
        if len(buf) - at < BATCH_HEADER_SIZE:
            buf = memoryview(handle.pread(min(chunk, end - pos), pos))
            buf_start, at = pos, 0
            if len(buf) < BATCH_HEADER_SIZE:
                return
        header = read_batch_header(buf, at)
        size = header.batch_length + 12
        if pos + size > end:
            return
        if whole and at + size > len(buf):
            buf = memoryview(handle.pread(max(size, min(chunk, end - pos)), pos))
            buf_start, at = pos, 0
            if len(buf) < size:
                return
        yield pos, header, buf[at : at + size]
        pos += size
