"""CRC-32C, the checksum of record batches (and of the files Kafka's formats protect with it).

`crc32c(data, value=0)` continues from `value`, so `crc32c(b, crc32c(a)) == crc32c(a + b)`.
It is the C extension's (SSE4.2 in three interleaved streams where the CPU has it) when that
was built, else the `crc32c` package's, the reference. Other Gregor packages take CRC-32C
from here, not from the package.
"""

from __future__ import annotations

from typing import Protocol

import crc32c as _crc32c_package

from gregor.protocol.native import native_function


class Crc32c(Protocol):
    def __call__(self, data: bytes | bytearray | memoryview, value: int = 0, /) -> int: ...


crc32c_reference: Crc32c = _crc32c_package.crc32c
crc32c: Crc32c = native_function("crc32c") or crc32c_reference
