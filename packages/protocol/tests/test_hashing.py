"""murmur2 as the Java client computes it, and librdkafka's CRC-32 partitioners."""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.partitioner.default import DefaultPartitioner
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from gregor.protocol import hashing
from gregor.protocol.hashing import (
    consistent_partition,
    consistent_random_partition,
    default_partition,
    murmur2,
    to_positive,
)

IMPLEMENTATIONS = [hashing._murmur2_py]
if murmur2 is not hashing._murmur2_py:
    IMPLEMENTATIONS.append(murmur2)

# The values of Kafka's own UtilsTest.testMurmur2 (signed, as Java's int).
JAVA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, ids=lambda f: f.__module__ or "c")
@pytest.mark.parametrize(("key", "expected"), list(JAVA_VECTORS.items()))
def test_murmur2_matches_the_java_client(
    impl: Callable[[bytes], int], key: bytes, expected: int
) -> None:
    assert impl(key) == expected


@given(st.binary(max_size=64))
def test_murmur2_matches_kafka_python(key: bytes) -> None:
    # kafka-python returns the same 32 bits, unsigned.
    expected = kafka_python_murmur2(bytearray(key))
    for impl in IMPLEMENTATIONS:
        assert impl(key) & 0xFFFFFFFF == expected
        assert -(2**31) <= impl(key) < 2**31


class OnePartitionedTopic:
    """The cluster view kafka-python's partitioner reads: one topic and its partitions."""

    def __init__(self, partitions: int) -> None:
        self.partitions = set(range(partitions))

    def topics(self) -> set[str]:
        return {"t"}

    def partitions_for_topic(self, topic: str) -> set[int]:
        return self.partitions

    def available_partitions_for_topic(self, topic: str) -> set[int]:
        return self.partitions


@given(st.binary(max_size=40), st.integers(min_value=1, max_value=1000))
def test_default_partition_matches_kafka_python_partitioner(key: bytes, partitions: int) -> None:
    cluster = OnePartitionedTopic(partitions)
    expected = DefaultPartitioner().partition("t", key, key, None, None, cluster)
    assert default_partition(key, partitions) == expected


def test_to_positive_clears_the_sign_bit_like_java() -> None:
    assert to_positive(-(2**31)) == 0
    assert to_positive(-1) == 2**31 - 1
    assert to_positive(5) == 5
    assert default_partition(b"21", 7) == (-973932308 & 0x7FFFFFFF) % 7


def test_murmur2_accepts_any_bytes_like() -> None:
    for impl in IMPLEMENTATIONS:
        assert impl(bytearray(b"foobar")) == impl(b"foobar") == -790332482


def test_consistent_partitioners_use_crc32() -> None:
    assert zlib.crc32(b"123456789") == 0xCBF43926  # the CRC-32 check value
    assert consistent_partition(b"123456789", 1000) == 0xCBF43926 % 1000
    assert consistent_partition(None, 10) == consistent_partition(b"", 10) == 0
    assert consistent_random_partition(b"123456789", 1000) == 0xCBF43926 % 1000
    rng = random.Random(3)
    spread = {consistent_random_partition(None, 8, rng) for _ in range(200)}
    assert spread == set(range(8))
    assert {consistent_random_partition(b"", 8, rng) for _ in range(200)} == set(range(8))
