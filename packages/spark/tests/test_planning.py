"""Planning on the driver: partitions of a subscription, offsets, ranges, splits, limits."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from gregor.protocol.errors import UnknownTopicOrPartitionError
from gregor.spark.options import Assign, Bound, OptionError, Subscribe, SubscribePattern
from gregor.spark.planning import (
    TP,
    DataLossError,
    OffsetRange,
    from_json_offsets,
    offset_ranges,
    rate_limit,
    resolve,
    split,
    to_json_offsets,
    topic_partitions,
)

TOPICS = {"a": [0, 1], "b": [0], "__consumer_offsets": [0], "ab": [0]}


class Log:
    """A cluster's answers: each partition's log from `earliest` to `latest`, a record per
    offset stamped 1000 * offset."""

    def __init__(self, earliest: Mapping[TP, int], latest: Mapping[TP, int]) -> None:
        self._earliest, self._latest = dict(earliest), dict(latest)

    def topics(self) -> dict[str, list[int]]:
        return TOPICS

    def earliest(self, tps: Sequence[TP]) -> dict[TP, int]:
        return {tp: self._earliest[tp] for tp in tps}

    def latest(self, tps: Sequence[TP]) -> dict[TP, int]:
        return {tp: self._latest[tp] for tp in tps}

    def for_times(self, timestamps: Mapping[TP, int]) -> dict[TP, int | None]:
        out: dict[TP, int | None] = {}
        for tp, ts in timestamps.items():
            offset = max(-(-ts // 1000), self._earliest[tp])
            out[tp] = offset if offset < self._latest[tp] else None
        return out


LOG = Log({("a", 0): 5, ("a", 1): 0}, {("a", 0): 100, ("a", 1): 10})
A = [("a", 0), ("a", 1)]


def test_topic_partitions() -> None:
    assert topic_partitions(Subscribe(("a", "b")), TOPICS) == [("a", 0), ("a", 1), ("b", 0)]
    # A pattern matches whole names and never an internal topic.
    assert topic_partitions(SubscribePattern("a|__.*"), TOPICS) == A
    assert topic_partitions(Assign((("a", 1),)), TOPICS) == [("a", 1)]
    with pytest.raises(UnknownTopicOrPartitionError, match="nope"):
        topic_partitions(Subscribe(("a", "nope")), TOPICS)
    with pytest.raises(UnknownTopicOrPartitionError, match="a-7"):
        topic_partitions(Assign((("a", 7),)), TOPICS)


def test_resolve_offsets() -> None:
    def at(bound: Bound, latest: bool = False) -> dict[TP, int]:
        return resolve(bound, A, LOG, name="startingOffsets", no_match_latest=latest)

    assert at(Bound("earliest")) == {("a", 0): 5, ("a", 1): 0}
    assert at(Bound("latest")) == {("a", 0): 100, ("a", 1): 10}
    assert at(Bound("offsets", {("a", 0): -2, ("a", 1): -1})) == {("a", 0): 5, ("a", 1): 10}
    assert at(Bound("offsets", {("a", 0): 42, ("a", 1): 3})) == {("a", 0): 42, ("a", 1): 3}
    assert at(Bound("timestamp", timestamp=7500)) == {("a", 0): 8, ("a", 1): 8}
    assert at(Bound("timestamps", {("a", 0): 1, ("a", 1): 2000})) == {("a", 0): 5, ("a", 1): 2}
    # No record that recent: an error by default, the latest offset when asked.
    with pytest.raises(OptionError, match=r"a-1 \(50000\)"):
        at(Bound("timestamp", timestamp=50_000))
    assert at(Bound("timestamp", timestamp=50_000), latest=True) == {("a", 0): 50, ("a", 1): 10}
    with pytest.raises(OptionError, match="must name every partition"):
        at(Bound("offsets", {("a", 0): 1}))


def test_offset_ranges_and_data_loss() -> None:
    start = {("a", 0): 5, ("a", 1): 8, ("b", 0): 0}
    end = {("a", 0): 100, ("a", 1): 3}
    with pytest.raises(DataLossError, match="went back from 8 to 3"):
        offset_ranges(start, end, fail_on_data_loss=True)
    assert offset_ranges(start, end, fail_on_data_loss=False) == [OffsetRange("a", 0, 5, 100)]
    with pytest.raises(DataLossError, match="b-0 is gone"):
        offset_ranges({("b", 0): 0}, {}, fail_on_data_loss=True)


def covered(parts: Sequence[OffsetRange]) -> dict[TP, list[int]]:
    """Every offset each partition's pieces cover, in order (no gap, no overlap)."""
    out: dict[TP, list[int]] = {}
    for p in parts:
        out.setdefault((p.topic, p.partition), []).extend(range(p.start, p.end))
    return out


def test_split() -> None:
    ranges = [OffsetRange("a", 0, 0, 1000), OffsetRange("a", 1, 0, 10), OffsetRange("b", 0, 5, 5)]
    whole = {("a", 0): list(range(1000)), ("a", 1): list(range(10))}
    # Empty ranges go; nothing else changes without options.
    assert split(ranges) == ranges[:2]
    # minPartitions: the large range takes the extra tasks, the small one stays whole.
    parts = split(ranges, min_partitions=5)
    assert len(parts) == 5 and covered(parts) == whole
    assert [p for p in parts if p.partition == 1] == [ranges[1]]
    assert split(ranges, min_partitions=2) == ranges[:2]
    # maxRecordsPerPartition: no piece above it.
    parts = split(ranges, max_records_per_partition=300)
    assert [p.size for p in parts] == [250, 250, 250, 250, 10]
    assert covered(parts) == whole
    parts = split(ranges, min_partitions=8, max_records_per_partition=600)
    assert len(parts) >= 7 and max(p.size for p in parts) <= 600 and covered(parts) == whole


def test_rate_limit_shares_in_proportion_to_backlog() -> None:
    start = {("a", 0): 0, ("a", 1): 0, ("b", 0): 10}
    latest = {("a", 0): 900, ("a", 1): 100, ("b", 0): 10}
    assert rate_limit(start, latest, 100) == {("a", 0): 90, ("a", 1): 10, ("b", 0): 10}
    assert rate_limit(start, latest, 5000) == latest
    # A tiny share still moves by one offset.
    assert rate_limit(start, latest, 1)[("a", 1)] == 1


def test_json_offsets_round_trip() -> None:
    offsets = {("a", 0): 5, ("a", 10): 7, ("b", 2): 0}
    as_json = to_json_offsets(offsets)
    assert as_json == {"a": {"0": 5, "10": 7}, "b": {"2": 0}}
    assert from_json_offsets(as_json) == offsets
