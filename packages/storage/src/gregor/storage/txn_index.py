"""The `.txnindex` of a segment: the aborted transactions whose abort marker is in it.

Each entry is 34 bytes, big-endian, as Kafka's: version (int16, 0), producer id (int64), first
offset (int64), last offset (int64, the offset of the abort marker) and the last stable offset
(int64) when the marker was written. A read_committed fetch collects the entries that overlap
the fetched range so the consumer can drop the aborted records.

The entries are few; they are kept in memory and appended to the file as they come.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import Final

import attrs

from gregor.storage.files import FileHandle
from gregor.storage.index import CorruptIndexError

_ENTRY: Final = struct.Struct(">hqqqq")
ENTRY_SIZE: Final = _ENTRY.size


@attrs.frozen(slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return _ENTRY.pack(
            0, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset
        )


class TransactionIndex:
    def __init__(self, path: Path, start_offset: int) -> None:
        self.path = path
        self.start_offset = start_offset
        self._entries: list[AbortedTxn] | None = None
        self._handle: FileHandle | None = None

    def _load(self) -> list[AbortedTxn]:
        if self._entries is not None:
            return self._entries
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            data = b""
        whole = len(data) // ENTRY_SIZE * ENTRY_SIZE
        entries: list[AbortedTxn] = []
        for pos in range(0, whole, ENTRY_SIZE):
            version, pid, first, last, lso = _ENTRY.unpack_from(data, pos)
            if version != 0:
                raise CorruptIndexError(
                    f"unknown aborted transaction version {version} in {self.path}"
                )
            entries.append(AbortedTxn(pid, first, last, lso))
        if whole != len(data):  # a torn last entry from a crash
            os.truncate(self.path, whole)
        self._entries = entries
        return entries

    def _file(self) -> FileHandle:
        if self._handle is None:
            self._handle = FileHandle(self.path)
        return self._handle

    @property
    def entries(self) -> list[AbortedTxn]:
        return list(self._load())

    def append(self, txn: AbortedTxn) -> None:
        entries = self._load()
        if entries and entries[-1].last_offset >= txn.last_offset:
            raise CorruptIndexError(
                f"aborted transaction at {txn.last_offset} is not after {entries[-1].last_offset}"
            )
        handle = self._file()
        handle.pwrite(txn.encode(), len(entries) * ENTRY_SIZE)
        entries.append(txn)

    def extend(self, txns: Iterable[AbortedTxn]) -> None:
        for txn in txns:
            self.append(txn)

    def collect(self, fetch_offset: int, upper_bound: int) -> tuple[list[AbortedTxn], bool]:
        """The aborted transactions overlapping [fetch_offset, upper_bound), and whether the
        search is complete (a later segment cannot hold more that overlap)."""
        found: list[AbortedTxn] = []
        for txn in self._load():
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound:
                return found, True
        return found, False

    def truncate_to(self, offset: int) -> None:
        """Remove the entries whose marker is at or after `offset`."""
        entries = self._load()
        keep = len(entries)
        while keep > 0 and entries[keep - 1].last_offset >= offset:
            keep -= 1
        if keep < len(entries):
            del entries[keep:]
            if self.path.exists():
                os.truncate(self.path, keep * ENTRY_SIZE)

    def reset(self) -> None:
        self._entries = []
        if self.path.exists():
            os.truncate(self.path, 0)

    def sanity_check(self) -> None:
        for txn in self._load():
            if txn.last_offset < self.start_offset:
                raise CorruptIndexError(
                    f"aborted transaction ending at {txn.last_offset} in {self.path} is before "
                    f"the segment's base offset {self.start_offset}"
                )

    def flush(self) -> None:
        handle = self._handle
        if handle is not None and not handle.closed:
            handle.fsync()

    def close(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None:
            handle.close()

    def release(self) -> None:
        self._handle = None

    def rename(self, path: Path) -> None:
        if self.path.exists():
            os.replace(self.path, path)
        self.path = path

    def delete(self) -> None:
        self.release()
        self.path.unlink(missing_ok=True)
