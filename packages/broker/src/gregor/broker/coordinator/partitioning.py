"""Which partition of an internal topic holds an id's state: Kafka's
`Utils.abs(id.hashCode()) % partitions`, with Java's String.hashCode, so a group (or a
transactional id) lands on the same partition, and so the same coordinator, as with Kafka."""

from __future__ import annotations

from typing import Final

_MASK: Final = 0xFFFFFFFF
_INT_MIN: Final = -(2**31)


def java_string_hash(text: str) -> int:
    """`String.hashCode()`: `31 * h + c` over the UTF-16 code units, in 32-bit two's
    complement arithmetic."""
    h = 0
    raw = text.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(raw), 2):
        h = (31 * h + (raw[i] << 8 | raw[i + 1])) & _MASK
    return h - (1 << 32) if h & 0x80000000 else h


def java_abs(value: int) -> int:
    """Kafka's `Utils.abs`: like Math.abs, except that Integer.MIN_VALUE (which has no
    positive counterpart in an int) maps to 0."""
    return 0 if value == _INT_MIN else abs(value)


def partition_for(key: str, partitions: int) -> int:
    return java_abs(java_string_hash(key)) % partitions
