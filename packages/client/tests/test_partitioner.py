"""Partitioners: murmur2 exactly as the Java client (and kafka-python) place keys, CRC-32 as
librdkafka does, and sticky partitions for records without a key (KIP-794)."""

from __future__ import annotations

import random
import zlib
from collections import Counter

import pytest
from kafka.partitioner.default import murmur2

from gregor.client.partitioner import StickyPartitions, key_partitioner


@pytest.mark.parametrize("partitions", [1, 3, 12, 100])
def test_keys_land_where_kafka_python_puts_them(partitions: int) -> None:
    ours = key_partitioner("murmur2_random")
    rng = random.Random(partitions)
    keys = [f"key-{i}".encode() for i in range(500)]
    keys += [rng.randbytes(rng.randrange(0, 40)) for _ in range(500)]
    for key in keys:
        # kafka-python's DefaultPartitioner: murmur2 & 0x7fffffff over all partitions.
        assert ours("t", key, partitions) == (murmur2(key) & 0x7FFFFFFF) % partitions, key


def test_java_reference_values() -> None:
    # Kafka's own test vectors for Utils.murmur2 put these keys on these partitions.
    partition = key_partitioner("murmur2_random")
    assert partition("t", b"21", 2**31 - 1) == (-973932308 & 0x7FFFFFFF) % (2**31 - 1)
    assert partition("t", b"", 10) == (275646681 & 0x7FFFFFFF) % 10


def test_librdkafka_partitioners() -> None:
    assert key_partitioner("consistent_random")("t", b"abc", 7) == zlib.crc32(b"abc") % 7
    assert key_partitioner("consistent_random")("t", b"", 7) is None  # empty: sticky/random
    assert key_partitioner("consistent")("t", None, 7) == 0  # crc32(b"") == 0
    assert key_partitioner("murmur2")("t", None, 7) == key_partitioner("murmur2")("t", b"", 7)
    assert key_partitioner("murmur2_random")("t", None, 7) is None
    assert key_partitioner("random")("t", b"abc", 7) is None
    assert key_partitioner("murmur2_random", ignore_keys=True)("t", b"abc", 7) is None


def test_custom_partitioner_is_checked() -> None:
    partition = key_partitioner(lambda topic, key, n: len(key or b"") % n)
    assert partition("t", b"abcd", 3) == 1
    with pytest.raises(ValueError, match="returned 9 for topic 't' with 3 partitions"):
        key_partitioner(lambda topic, key, n: 9)("t", b"", 3)


def test_sticky_partition_switches_after_a_batch_worth_of_bytes() -> None:
    sticky = StickyPartitions(batch_size=1000, adaptive=False, rng=random.Random(1))
    available = list(range(6))
    chosen = []
    for _ in range(600):
        chosen.append(sticky.partition("t", 6, available))
        sticky.appended("t", 100, 6, available)
    # Ten records (1000 bytes) to one partition, then a new random choice.
    for start in range(0, 600, 10):
        assert len(set(chosen[start : start + 10])) == 1
    counts = Counter(chosen)
    assert set(counts) == set(available)  # uniform random over the available partitions


def test_sticky_partition_only_picks_partitions_with_a_leader() -> None:
    sticky = StickyPartitions(batch_size=1, adaptive=False, rng=random.Random(2))
    seen = set()
    for _ in range(200):
        seen.add(sticky.partition("t", 10, [3, 7]))
        sticky.appended("t", 1, 10, [3, 7])
    assert seen == {3, 7}
    assert StickyPartitions(1).partition("u", 4, []) in range(4)  # none available: any


def test_adaptive_stickiness_prefers_shorter_queues() -> None:
    sticky = StickyPartitions(batch_size=1, adaptive=True, rng=random.Random(3))
    queues = {0: 10, 1: 0, 2: 10}
    counts: Counter[int] = Counter()
    for _ in range(3000):
        counts[sticky.partition("t", 3, [0, 1, 2], queues.__getitem__)] += 1
        sticky.appended("t", 1, 3, [0, 1, 2], queues.__getitem__)
    # Weights are 1, 11, 1 (longest + 1 - size).
    assert counts[1] > 8 * counts[0] and counts[1] > 8 * counts[2]
