"""Which partition a record goes to.

Two parts, as in the Java client since KIP-794:

- A key partitioner maps a record's key to a partition, or says "no key-based choice"
  (None). The built-ins, named as librdkafka names them:
  - `murmur2_random` (the default): murmur2 of the key as the Java client computes it;
    records without a key go to the sticky partition. This is the Java default partitioner.
  - `murmur2`: the same hash, and a missing key hashes as empty (one fixed partition).
  - `consistent_random`: librdkafka's default, CRC-32 of the key; missing or empty keys go
    to the sticky partition.
  - `consistent`: CRC-32, missing and empty keys to one fixed partition.
  - `random`: every record to the sticky partition.
  A custom partitioner is a callable `(topic, key_bytes, num_partitions) -> partition`.
- `StickyPartitions` picks the partition of records without a key-based choice: one partition
  per topic until about `batch.size` bytes went to it, then another one at random among the
  partitions that have a leader — weighted towards shorter queues when adaptive
  partitioning is on — so that keyless records fill whole batches instead of scattering.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Callable, Sequence
from typing import Any

from gregor.client.config import ConfigError
from gregor.protocol.hashing import consistent_partition, default_partition

# (topic, key, partition count) -> partition, or None to use the sticky partition.
KeyPartitioner = Callable[[str, bytes | None, int], int | None]


def _murmur2_random(topic: str, key: bytes | None, n: int) -> int | None:
    return None if key is None else default_partition(key, n)


def _murmur2(topic: str, key: bytes | None, n: int) -> int | None:
    return default_partition(key or b"", n)


def _consistent_random(topic: str, key: bytes | None, n: int) -> int | None:
    return consistent_partition(key, n) if key else None


def _consistent(topic: str, key: bytes | None, n: int) -> int | None:
    return consistent_partition(key, n)


def _random(topic: str, key: bytes | None, n: int) -> int | None:
    return None


_BUILT_IN: dict[str, KeyPartitioner] = {
    "murmur2_random": _murmur2_random,
    "murmur2": _murmur2,
    "consistent_random": _consistent_random,
    "consistent": _consistent,
    "random": _random,
}


def key_partitioner(spec: Any, ignore_keys: bool = False) -> KeyPartitioner:
    """The key partitioner a `partitioner` config value names."""
    if ignore_keys:  # partitioner.ignore.keys: keys do not choose partitions
        return _random
    if isinstance(spec, str):
        return _BUILT_IN[spec]
    if not callable(spec):
        raise ConfigError(f"partitioner={spec!r}: must be a built-in name or a callable")
    custom: Callable[[str, bytes | None, int], int] = spec

    def checked(topic: str, key: bytes | None, n: int) -> int:
        partition = custom(topic, key, n)
        if not isinstance(partition, int) or not 0 <= partition < n:
            raise ValueError(
                f"partitioner returned {partition!r} for topic {topic!r} with {n} partitions"
            )
        return partition

    return checked


class StickyChoice:
    """A topic's current sticky partition and the bytes sent to it so far."""

    __slots__ = ("partition", "produced")

    def __init__(self, partition: int) -> None:
        self.partition = partition
        self.produced = 0


class StickyPartitions:
    """The current sticky partition of each topic (callers serialize access).

    The hot path is `lookup` plus counting `produced` on the choice; `choose` runs once per
    switch.
    """

    def __init__(
        self, batch_size: int, adaptive: bool = True, rng: random.Random | None = None
    ) -> None:
        self.switch_after = max(batch_size, 1)
        self.adaptive = adaptive
        self._rng = rng or random.Random()
        # The current choice of each topic; readers on a hot path may look it up directly.
        self.current: dict[str, StickyChoice] = {}

    def lookup(self, topic: str) -> StickyChoice | None:
        return self.current.get(topic)

    def choose(
        self,
        topic: str,
        num_partitions: int,
        available: Sequence[int],
        queue_sizes: Callable[[int], int] | None = None,
    ) -> StickyChoice:
        """Switch `topic` to a new sticky partition."""
        choice = self.current[topic] = StickyChoice(
            self._next(num_partitions, available, queue_sizes)
        )
        return choice

    def partition(
        self,
        topic: str,
        num_partitions: int,
        available: Sequence[int],
        queue_sizes: Callable[[int], int] | None = None,
    ) -> int:
        """The sticky partition of `topic` now."""
        choice = self.current.get(topic)
        if choice is None or choice.partition >= num_partitions:
            choice = self.choose(topic, num_partitions, available, queue_sizes)
        return choice.partition

    def appended(
        self,
        topic: str,
        nbytes: int,
        num_partitions: int,
        available: Sequence[int],
        queue_sizes: Callable[[int], int] | None = None,
    ) -> None:
        """Count bytes appended to the sticky partition; switch once it has had its batch."""
        choice = self.current.get(topic)
        if choice is None:
            return
        choice.produced += nbytes
        if choice.produced >= self.switch_after:
            self.choose(topic, num_partitions, available, queue_sizes)

    def _next(
        self,
        num_partitions: int,
        available: Sequence[int],
        queue_sizes: Callable[[int], int] | None,
    ) -> int:
        if not available:
            return self._rng.randrange(num_partitions)
        if self.adaptive and queue_sizes is not None and len(available) > 1:
            return self._weighted(available, queue_sizes)
        return available[self._rng.randrange(len(available))]

    def _weighted(self, available: Sequence[int], queue_sizes: Callable[[int], int]) -> int:
        """A partition with probability growing as its queue is shorter than the longest."""
        sizes = [queue_sizes(p) for p in available]
        longest = max(sizes)
        if longest == min(sizes):
            return available[self._rng.randrange(len(available))]
        cumulative = []
        total = 0
        for size in sizes:
            total += longest + 1 - size
            cumulative.append(total)
        return available[bisect.bisect_right(cumulative, self._rng.randrange(total))]
