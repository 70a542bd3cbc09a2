"""The sparse, memory-mapped indexes of a segment: `.index` (offsets) and `.timeindex`.

Formats, as Kafka's (big-endian):

- `.index`: 8-byte entries, a 4-byte offset relative to the segment's base offset and the
  4-byte position in the `.log` file of the batch holding that offset.
- `.timeindex`: 12-byte entries, an 8-byte timestamp and the 4-byte relative offset of the
  batch where the segment's largest timestamp so far was seen.

Entries are sorted by offset (and time entries by timestamp too). An index of the active
segment is preallocated to `segment.index.bytes` and mapped read-write; when the segment rolls
or closes it is trimmed to its entries. Indexes of older segments are mapped read-only and
opened only when first used. A mapping holds no descriptor (see `mapped`), so an index holds
none: a partition's active segment costs one, its `.log`.

A preallocated index left by a crash ends with zero entries; no valid entry is all zeros (the
first batch of a segment is never indexed), so the entry count is found by a binary search for
the first zero entry.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import ClassVar, Final

from gregor.storage.files import FileHandle, fsync_path
from gregor.storage.mapped import Mapping, map_file

OFFSET_ENTRY: Final = struct.Struct(">ii")  # relative offset, position
_OFFSET_ENTRY: Final = OFFSET_ENTRY
SMALL_INDEX_BYTES: Final = 64 * 1024
_TIME_ENTRY: Final = struct.Struct(">qi")


class IndexOffsetOverflowError(Exception):
    """An offset that does not fit in 32 bits relative to the segment's base offset."""


class CorruptIndexError(Exception):
    """An index whose entries do not make sense; it is rebuilt from the log."""


class _MappedIndex:
    entry_size: ClassVar[int]
    _struct: ClassVar[struct.Struct]
    # Slots: the fast append's C twin reaches `mapping`, `entries` and `max_entries`
    # through their offsets (see the fast_append module).
    __slots__ = (
        "_data",
        "_last_n",
        "_length",
        "base_offset",
        "entries",
        "mapping",
        "max_entries",
        "max_index_size",
        "path",
        "writable",
    )

    def __init__(
        self, path: Path, base_offset: int, max_index_size: int, *, writable: bool
    ) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_index_size = max_index_size
        self.writable = writable
        # The mapping of the file (None when empty, or small and read instead): public for the
        # fast append, which writes offset index entries into it from C.
        self.mapping: Mapping | None = None
        self._data: bytes | None = None  # a small read-only index, read instead of mapped
        self._length = 0
        self.max_entries = 0
        self.entries = 0
        self._last_n = -1  # TimeIndex caches its last entry for this entry count
        self._open()

    # -- opening, sizing, closing ------------------------------------------------------------

    def _open(self) -> None:
        size = self.entry_size
        exists = self.path.exists()
        if self.writable and not exists and self.max_index_size < size:
            raise ValueError(f"invalid max index size {self.max_index_size}")
        handle = FileHandle(self.path, os.O_RDWR | os.O_CREAT if self.writable else os.O_RDONLY)
        try:
            if self.writable and not exists:
                handle.truncate(self.max_index_size // size * size)
            self._length = handle.size()
            self._map(handle.fileno())
        finally:
            handle.close()  # the mapping holds no descriptor
        self.entries = 0 if self.writable and not exists else self._count_entries()

    def _map(self, fd: int) -> None:
        self.max_entries = self._length // self.entry_size
        self._data = None
        self.mapping = None
        if self._length == 0:
            return
        if not self.writable and self._length <= SMALL_INDEX_BYTES:
            self._data = _read_all(fd, self._length)  # cheaper than a mapping
            return
        # Read-ahead off: entries are written in order and found by binary search. With it,
        # the first fault in a preallocated hole zeroed megabytes of page cache around it
        # (~2.5 ms per index, on a new segment's first entry).
        self.mapping = map_file(fd, self._length, writable=self.writable, random_access=True)

    def _count_entries(self) -> int:
        size = self.entry_size
        total = self._length // size
        buf = self.mapping if self.mapping is not None else self._data
        if buf is None or total == 0:
            return 0
        zero = bytes(size)
        if buf[(total - 1) * size : total * size] != zero:
            return total
        low, high = 0, total - 1  # the first zero entry is in [low, high]
        while low < high:
            mid = (low + high) // 2
            if buf[mid * size : (mid + 1) * size] == zero:
                high = mid
            else:
                low = mid + 1
        return low

    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    def size_in_bytes(self) -> int:
        return self.entries * self.entry_size

    def resize(self, new_size: int) -> None:
        """Set the file length (rounded down to whole entries) and map it again."""
        if not self.writable:
            raise ValueError(f"{self.path} is not writable")
        rounded = max(new_size // self.entry_size * self.entry_size, 0)
        if rounded == self._length:
            return
        self.mapping = None  # unmapped before the file shrinks under it
        handle = FileHandle(self.path, os.O_RDWR)
        try:
            handle.truncate(rounded)
            self._length = rounded
            self._map(handle.fileno())
        finally:
            handle.close()

    def trim(self) -> None:
        """Cut the preallocated tail, leaving exactly the entries."""
        if self.writable:
            self.resize(self.entries * self.entry_size)

    def make_read_only(self) -> None:
        """Trim, then map the index read-only (the segment rolled)."""
        if not self.writable:
            return
        self.trim()  # no msync here: this runs on the event loop; the log's flush syncs it
        self.writable = False
        self.mapping = None
        handle = FileHandle(self.path, os.O_RDONLY)
        try:
            self._map(handle.fileno())
        finally:
            handle.close()

    def make_writable(self) -> None:
        """Map the index read-write and grow it to the max size (segment became active again)."""
        if self.writable:
            return
        self.writable = True
        self.mapping = None
        handle = FileHandle(self.path, os.O_RDWR)
        try:
            self._length = handle.size()
            self._map(handle.fileno())
        finally:
            handle.close()
        self.resize(self.max_index_size)

    def flush(self) -> None:
        """Make the entries durable (an fsync of the file writes its mapped pages too)."""
        if self.path.exists():
            fsync_path(self.path)

    def close(self) -> None:
        if self.writable:
            self.trim()
        self.mapping = None  # unmapped once no reader holds it

    def release(self) -> None:
        """Drop the mapping without trimming (the files are being deleted)."""
        self.mapping = None

    def rename(self, path: Path) -> None:
        os.replace(self.path, path)
        self.path = path

    def delete(self) -> None:
        self.release()
        self.path.unlink(missing_ok=True)

    def reset(self) -> None:
        """Remove every entry and grow back to the max size (before a rebuild)."""
        self.entries = 0
        self._last_n = -1
        if self.writable:
            self.resize(0)
            self.resize(self.max_index_size)

    # -- helpers -------------------------------------------------------------------------------

    def relative(self, offset: int) -> int:
        relative = offset - self.base_offset
        if relative < 0 or relative > 0x7FFFFFFF:
            raise IndexOffsetOverflowError(
                f"offset {offset} does not fit in index {self.path} (base {self.base_offset})"
            )
        return relative

    def can_append_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= 0x7FFFFFFF

    def _set_entries(self, keep: int) -> None:
        """Keep the first `keep` entries; zero the rest so a reopen does not count them."""
        if keep < self.entries and self.writable and self.mapping is not None:
            start = keep * self.entry_size
            self.mapping[start : self.entries * self.entry_size] = bytes(
                (self.entries - keep) * self.entry_size
            )
        self.entries = keep
        self._last_n = -1

    def _count_at_or_below(self, field: int, value: int) -> int:
        """How many entries have `field` (0 or 1 of the entry) at or below `value`: entries are
        sorted on both fields, so this is a binary search."""
        n = self.entries
        if n == 0:
            return 0
        buf = self._buffer()
        unpack = self._struct.unpack_from
        size = self.entry_size
        low, high = 0, n
        while low < high:
            mid = (low + high) // 2
            if unpack(buf, mid * size)[field] <= value:
                low = mid + 1
            else:
                high = mid
        return low

    def _buffer(self) -> Mapping | bytes:
        buf = self.mapping if self.mapping is not None else self._data
        if buf is None:
            raise CorruptIndexError(f"{self.path} has no room for entries")
        return buf


class OffsetIndex(_MappedIndex):
    """Offset -> position in the `.log` file, one entry per `index.interval.bytes`."""

    __slots__ = ()
    entry_size = 8
    _struct = _OFFSET_ENTRY

    def entry(self, n: int) -> tuple[int, int]:
        relative, position = _OFFSET_ENTRY.unpack_from(self._buffer(), n * 8)
        return self.base_offset + relative, position

    def last_entry(self) -> tuple[int, int]:
        return self.entry(self.entries - 1) if self.entries else (self.base_offset, 0)

    @property
    def last_offset(self) -> int:
        return self.last_entry()[0]

    def append(self, offset: int, position: int) -> None:
        relative = offset - self.base_offset
        n = self.entries
        if not 0 <= relative <= 0x7FFFFFFF:
            raise IndexOffsetOverflowError(
                f"offset {offset} does not fit in index {self.path} (base {self.base_offset})"
            )
        buf = self._buffer()
        if n and relative <= _OFFSET_ENTRY.unpack_from(buf, (n - 1) * 8)[0]:
            raise CorruptIndexError(
                f"offset {offset} is not after the last entry {self.last_offset} of {self.path}"
            )
        if n >= self.max_entries:
            raise CorruptIndexError(f"{self.path} is full")
        _OFFSET_ENTRY.pack_into(buf, n * 8, relative, position)
        self.entries = n + 1

    def _slot_at_or_below(self, offset: int) -> int:
        """The last entry with offset <= `offset`, or -1."""
        return self._count_at_or_below(0, offset - self.base_offset) - 1

    def lookup(self, offset: int) -> tuple[int, int]:
        """The (offset, position) of the last entry at or before `offset`, else (base, 0)."""
        slot = self._slot_at_or_below(offset)
        return self.entry(slot) if slot >= 0 else (self.base_offset, 0)

    def lookup_position(self, position: int) -> tuple[int, int] | None:
        """The first entry whose position is at or after `position`, if any."""
        slot = self._count_at_or_below(1, position - 1)
        return self.entry(slot) if slot < self.entries else None

    def position_before(self, position: int) -> int:
        """The position of the entry before the last one at or below `position`, else 0.

        The batch there ends at or before `position`, so a scan from it reads at least one
        whole batch: the one that ends where the next read will start.
        """
        count = self._count_at_or_below(1, position)
        return self.entry(count - 2)[1] if count >= 2 else 0

    def truncate_to(self, offset: int) -> None:
        """Remove the entries for offsets at or after `offset`."""
        slot = self._slot_at_or_below(offset)
        keep = 0 if slot < 0 else slot if self.entry(slot)[0] == offset else slot + 1
        self._set_entries(keep)

    def sanity_check(self, log_size: int) -> None:
        if self.entries == 0:
            return
        first_offset, first_position = self.entry(0)
        last_offset, last_position = self.last_entry()
        if last_offset < first_offset or last_position < first_position:
            raise CorruptIndexError(f"{self.path} entries are out of order")
        if last_position >= log_size:
            raise CorruptIndexError(
                f"{self.path} points at position {last_position}, past the log size {log_size}"
            )


class TimeIndex(_MappedIndex):
    """Timestamp -> offset: where the segment's largest timestamp so far was reached."""

    __slots__ = ("_last",)
    entry_size = 12
    _struct = _TIME_ENTRY

    def is_full(self) -> bool:
        # One slot stays free for the entry written when the segment rolls or closes.
        return self.entries >= self.max_entries - 1

    def entry(self, n: int) -> tuple[int, int]:
        timestamp, relative = _TIME_ENTRY.unpack_from(self._buffer(), n * 12)
        return timestamp, self.base_offset + relative

    _last: tuple[int, int]  # valid while _last_n is the entry count

    def last_entry(self) -> tuple[int, int]:
        n = self.entries
        if n == 0:
            return -1, self.base_offset
        if self._last_n != n:
            self._last, self._last_n = self.entry(n - 1), n
        return self._last

    def maybe_append(self, timestamp: int, offset: int, *, skip_full_check: bool = False) -> None:
        """Add an entry when `timestamp` is larger than the last one."""
        if not skip_full_check and self.is_full():
            raise CorruptIndexError(f"{self.path} is full")
        last_ts, last_offset = self.last_entry()  # (-1, base) when empty: -1 is never added
        if timestamp <= last_ts:
            return
        if self.entries and offset < last_offset:
            raise CorruptIndexError(
                f"offset {offset} is before the last time index entry {last_offset}"
            )
        if self.entries >= self.max_entries:
            return  # no room at all: a trimmed index that was never grown again
        _TIME_ENTRY.pack_into(self._buffer(), self.entries * 12, timestamp, self.relative(offset))
        self.entries += 1
        self._last, self._last_n = (timestamp, offset), self.entries

    def append_in_order(self, timestamp: int, offset: int) -> bool:
        """`maybe_append` for a caller that knows `timestamp` is above the last entry's,
        `offset` not below it, and that there is room. Returns whether the index can still
        take an entry and keep the one left for the roll."""
        n = self.entries
        _TIME_ENTRY.pack_into(self._buffer(), n * 12, timestamp, offset - self.base_offset)
        self.entries = n = n + 1
        self._last, self._last_n = (timestamp, offset), n
        return n < self.max_entries - 1

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """The last entry with a timestamp at or before `timestamp`, else (-1, base)."""
        count = self._count_at_or_below(0, timestamp)
        return self.entry(count - 1) if count else (-1, self.base_offset)

    def truncate_to(self, offset: int) -> None:
        """Remove the entries for offsets at or after `offset`."""
        keep = self.entries
        while keep > 0 and self.entry(keep - 1)[1] >= offset:
            keep -= 1
        self._set_entries(keep)

    def sanity_check(self) -> None:
        if self.entries == 0:
            return
        first_ts, first_offset = self.entry(0)
        last_ts, last_offset = self.last_entry()
        if last_ts < first_ts or last_offset < first_offset:
            raise CorruptIndexError(f"{self.path} entries are out of order")


def _read_all(fd: int, length: int) -> bytes:
    parts = []
    got = 0
    while got < length:
        chunk = os.pread(fd, length - got, got)
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)
