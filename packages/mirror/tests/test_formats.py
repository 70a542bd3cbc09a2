"""MM2's record formats, byte for byte: offset syncs, checkpoints and heartbeats.

The expected bytes come from MM2's schemas (OffsetSync, Checkpoint, Heartbeat in
connect/mirror) built with kafka-python's implementation of Kafka's protocol types, an
encoder that is not ours; and from hand-written hex for one case each.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.protocol.old.types import Int16, Int32, Int64, Schema, String

from gregor.client import TopicPartition
from gregor.mirror import Checkpoint, Heartbeat, OffsetSync
from gregor.mirror.schema import FormatError

STRING = String("utf-8")
SYNC_KEY = Schema(("topic", STRING), ("partition", Int32))
SYNC_VALUE = Schema(("upstreamOffset", Int64), ("offset", Int64))
CHECKPOINT_KEY = Schema(("group", STRING), ("topic", STRING), ("partition", Int32))
CHECKPOINT_VALUE = Schema(
    ("version", Int16), ("upstreamOffset", Int64), ("offset", Int64), ("metadata", STRING)
)
HEARTBEAT_KEY = Schema(("sourceClusterAlias", STRING), ("targetClusterAlias", STRING))
HEARTBEAT_VALUE = Schema(("version", Int16), ("timestamp", Int64))

names = st.text(min_size=0, max_size=40)
offsets = st.integers(min_value=0, max_value=2**63 - 1)
partitions = st.integers(min_value=0, max_value=2**31 - 1)


def test_offset_sync_bytes() -> None:
    sync = OffsetSync(TopicPartition("orders", 2), 17, 5)
    assert sync.key() == bytes.fromhex("00066f7264657273 00000002".replace(" ", ""))
    assert sync.value() == bytes.fromhex("00000000000000110000000000000005")
    assert OffsetSync.decode(sync.key(), sync.value()) == sync


@given(names, partitions, offsets, offsets)
def test_offset_sync_matches_mm2_schema(topic: str, partition: int, up: int, down: int) -> None:
    sync = OffsetSync(TopicPartition(topic, partition), up, down)
    assert sync.key() == SYNC_KEY.encode((topic, partition))
    assert sync.value() == SYNC_VALUE.encode((up, down))
    assert OffsetSync.decode(sync.key(), sync.value()) == sync


def test_checkpoint_bytes() -> None:
    checkpoint = Checkpoint("g", TopicPartition("A.t", 1), 10, 8, "m")
    assert checkpoint.key() == bytes.fromhex("0001670003412e7400000001")
    assert checkpoint.value() == bytes.fromhex("0000000000000000000a000000000000000800016d")


@given(names, names, partitions, offsets, offsets, names)
def test_checkpoint_matches_mm2_schema(
    group: str, topic: str, partition: int, up: int, down: int, metadata: str
) -> None:
    checkpoint = Checkpoint(group, TopicPartition(topic, partition), up, down, metadata)
    assert checkpoint.key() == CHECKPOINT_KEY.encode((group, topic, partition))
    assert checkpoint.value() == CHECKPOINT_VALUE.encode((0, up, down, metadata))
    assert Checkpoint.decode(checkpoint.key(), checkpoint.value()) == checkpoint


def test_heartbeat_bytes() -> None:
    beat = Heartbeat("A", "B", 1_700_000_000_000)
    assert beat.key() == bytes.fromhex("000141000142")
    assert beat.value() == bytes.fromhex("00000000018bcfe56800")


@given(names, names, offsets)
def test_heartbeat_matches_mm2_schema(source: str, target: str, timestamp: int) -> None:
    beat = Heartbeat(source, target, timestamp)
    assert beat.key() == HEARTBEAT_KEY.encode((source, target))
    assert beat.value() == HEARTBEAT_VALUE.encode((0, timestamp))
    assert Heartbeat.decode(beat.key(), beat.value()) == beat


@pytest.mark.parametrize(
    ("key", "value"),
    [(b"", b""), (b"\x00\x05ab", b""), (b"\x00\x01t\x00\x00\x00\x01", b"\x00" * 15)],
)
def test_short_records_are_format_errors(key: bytes, value: bytes) -> None:
    with pytest.raises(FormatError):
        OffsetSync.decode(key, value)
