"""Open files, slices of them for zero-copy sends, and durable small-file writes.

A `FileHandle` owns one file descriptor and closes it when the last reference to it goes away
(or on an explicit `close()`). Segments, in-flight `FileSlice`s and the flush thread each hold
a reference, so a segment that is deleted while a fetch is being sent stays readable through
the open descriptor until the send is done, and a descriptor number is never closed (and
reused) under a thread that is still using it.
"""

from __future__ import annotations

import os
from pathlib import Path

import attrs

from gregor.protocol.errors import KafkaStorageError


class FileHandle:
    """An open file descriptor, closed when the handle is garbage or closed explicitly.

    `fd` is the descriptor, -1 once closed (a system call on -1 fails with EBADF; it never
    reaches another file). Hot paths read it directly; others call `fileno()`.
    """

    __slots__ = ("__weakref__", "fd", "path")

    def __init__(self, path: Path, flags: int = os.O_RDWR | os.O_CREAT, mode: int = 0o644) -> None:
        self.path = path
        self.fd = -1  # so that __del__ of a failed open has nothing to close
        self.fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0), mode)

    def fileno(self) -> int:
        if self.fd < 0:
            raise KafkaStorageError(f"{self.path} is closed")
        return self.fd

    @property
    def closed(self) -> bool:
        return self.fd < 0

    def size(self) -> int:
        return os.fstat(self.fileno()).st_size

    def pread(self, length: int, position: int) -> bytes:
        """Exactly `length` bytes from `position`, or fewer only at the end of the file."""
        fd = self.fileno()
        data = os.pread(fd, length, position)
        if len(data) == length or not data:
            return data
        parts = [data]
        got = len(data)
        while got < length:
            more = os.pread(fd, length - got, position + got)
            if not more:
                break
            parts.append(more)
            got += len(more)
        return b"".join(parts)

    def pwrite(self, data: bytes | bytearray | memoryview, position: int) -> None:
        fd = self.fileno()
        written = os.pwrite(fd, data, position)
        while written < len(data):
            written += os.pwrite(fd, memoryview(data)[written:], position + written)

    def pwritev(
        self, parts: list[bytes | bytearray | memoryview], position: int, size: int
    ) -> None:
        """Write `parts` (`size` bytes in all) one after the other from `position`."""
        written = os.pwritev(self.fileno(), parts, position)
        if written < size:  # a short write, rare: finish it
            self.pwrite(b"".join(parts)[written:], position + written)

    def truncate(self, size: int) -> None:
        os.ftruncate(self.fileno(), size)

    def fsync(self) -> None:
        os.fsync(self.fileno())

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    def __del__(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass

    def __repr__(self) -> str:
        return f"FileHandle({str(self.path)!r}, fd={self.fd})"


@attrs.frozen(slots=True)
class FileSlice:
    """`length` bytes of a file from `position`: what a fetch sends with `os.sendfile`.

    It implements `__len__`, so gregor-protocol's encoder takes it as a `FileRegion` in a
    records field. It keeps its file open while it exists, even if the segment is deleted.
    """

    handle: FileHandle | None
    position: int
    length: int

    def __len__(self) -> int:
        return self.length

    def fileno(self) -> int:
        if self.handle is None:
            raise KafkaStorageError("an empty slice has no file")
        return self.handle.fileno()

    def read(self) -> bytes:
        """The bytes of the slice (for tests and for senders that cannot use sendfile)."""
        if self.handle is None or self.length == 0:
            return b""
        return self.handle.pread(self.length, self.position)


EMPTY_SLICE = FileSlice(None, 0, 0)


def fsync_path(path: Path) -> None:
    """fsync a file by name: its dirty pages, whichever descriptor or mapping wrote them."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    """Make a rename or a new file in `path` durable."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, *, sync: bool = True) -> None:
    """Replace `path` with `data` through a temporary file and a rename.

    Readers see the old or the new content, never a mix. With `sync`, the data and the rename
    are on disk when this returns.
    """
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if sync:
        fsync_dir(path.parent)
