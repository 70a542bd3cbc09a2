"""The key hashes Kafka producers partition by.

- `murmur2`: the Java client's `Utils.murmur2` (MurmurHash2, seed 0x9747b28c, 32-bit
  signed result), which its default partitioner applies to keyed records as
  `toPositive(murmur2(key)) % numPartitions`. librdkafka's `murmur2_random` partitioner
  computes the same, so keys land on the same partition from either client.
- `consistent_partition` / `consistent_random_partition`: librdkafka's `consistent` and
  default `consistent_random` partitioners, CRC-32 of the key modulo the partition count;
  the first maps missing and empty keys to one partition, the second to a random one.

The partitioner itself (sticky batching of keyless records, ...) belongs to the client.
"""

from __future__ import annotations

import random
import struct
import zlib
from collections.abc import Callable

from gregor.protocol.native import native_function

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF
_WORDS = struct.Struct("<I")


def _murmur2_py(data: bytes) -> int:
    length = len(data)
    h = (_SEED ^ length) & _MASK
    tail = length & ~3
    for (k,) in _WORDS.iter_unpack(data[:tail]) if tail else ():
        k = (k * _M) & _MASK
        k ^= k >> 24
        h = ((h * _M) & _MASK) ^ ((k * _M) & _MASK)
    rest = length & 3
    if rest:
        if rest == 3:
            h ^= data[tail + 2] << 16
        if rest >= 2:
            h ^= data[tail + 1] << 8
        h = ((h ^ data[tail]) * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - 0x100000000 if h & 0x80000000 else h


def _load_murmur2() -> Callable[[bytes], int]:
    native: Callable[[bytes], int] | None = native_function("murmur2")
    return native or _murmur2_py


# The Java client's murmur2 of a key, as a signed 32-bit int (C when it was built).
murmur2: Callable[[bytes], int] = _load_murmur2()


def to_positive(number: int) -> int:
    """Java's `Utils.toPositive`: clear the sign bit (not abs, which fails for MIN_VALUE)."""
    return number & 0x7FFFFFFF


def default_partition(key: bytes, num_partitions: int) -> int:
    """The partition the Java client (and librdkafka's murmur2 partitioners) give a key."""
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


def consistent_partition(key: bytes | None, num_partitions: int) -> int:
    """librdkafka's `consistent`: CRC-32 of the key (an absent key hashes as empty)."""
    return zlib.crc32(key or b"") % num_partitions


def consistent_random_partition(
    key: bytes | None, num_partitions: int, rng: random.Random | None = None
) -> int:
    """librdkafka's default, `consistent_random`: CRC-32 of the key; a random partition for
    a missing or empty key."""
    if not key:
        return (rng or random).randrange(num_partitions)
    return zlib.crc32(key) % num_partitions
