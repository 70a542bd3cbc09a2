"""File mappings that hold no file descriptor, as Java's `MappedByteBuffer` does.

CPython's `mmap.mmap` (before 3.13's `trackfd=False`) keeps a duplicate of the descriptor
it maps, so every mapped index of an active segment cost one more open file: with the
`.log` and the indexes' own handles, five per partition, and a broker with the usual
limit of 20,000 descriptors stopped at about 4,000 partitions. A mapping made here holds
none: the descriptor is needed only to make it.

A mapping is a ctypes `c_char` array over the mapped pages: a writable buffer for `struct`
and the fast append's C code, sliced into bytes, sized by `len()`. The pages are unmapped
when the array is garbage, that is once nothing (no memoryview, no C call holding its
buffer) refers to it; so a mapping is never unmapped under a reader. Dropping the last
reference is the way to close one.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import weakref
from typing import Any, Final

_libc: Final = ctypes.CDLL(None, use_errno=True)
_mmap: Final = _libc.mmap
_mmap.restype = ctypes.c_void_p
_mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                  ctypes.c_long]  # fmt: skip
_munmap: Final = _libc.munmap
_munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_madvise: Final = _libc.madvise
_madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_MAP_FAILED: Final = ctypes.c_void_p(-1).value

# The type of a mapping (a `c_char` array of some length); `Any` for mypy's sake.
Mapping = Any


def map_file(fd: int, length: int, *, writable: bool, random_access: bool = False) -> Mapping:
    """Map the first `length` bytes of the file open on `fd` (shared: writes reach the
    file). The caller may close `fd` at once. `random_access` turns read-ahead off."""
    if length <= 0:
        raise ValueError(f"cannot map {length} bytes")
    prot = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
    address = _mmap(None, length, prot, mmap.MAP_SHARED, fd, 0)
    if address is None or address == _MAP_FAILED:
        error = ctypes.get_errno()
        raise OSError(error, f"mmap of {length} bytes failed: {os.strerror(error)}")
    if random_access:
        _madvise(address, length, mmap.MADV_RANDOM)
    pages = (ctypes.c_char * length).from_address(address)
    # Not at exit: a thread may still read it then, and the process's end unmaps it anyway.
    weakref.finalize(pages, _munmap, address, length).atexit = False
    return pages
