"""Offsets to offset ranges, and offset ranges to input partitions: the driver's side.

Everything here is decided once, on the driver, from what the cluster answers through an
`OffsetLookup` (gregor-client's consumer in `source.py`). Executors only read the ranges they
are handed. The rules are spark-sql-kafka's: which partitions a subscription means, how the
starting and ending options resolve, when a range is data loss, how `minPartitions` and
`maxRecordsPerPartition` split ranges, and how `maxOffsetsPerTrigger` is shared out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from gregor.protocol.errors import UnknownTopicOrPartitionError
from gregor.spark.options import (
    EARLIEST,
    LATEST,
    Assign,
    Bound,
    OptionError,
    Strategy,
    Subscribe,
    SubscribePattern,
)

TP = tuple[str, int]
# Topics that only the cluster writes; a pattern never matches them (exclude.internal.topics).
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})

DATA_LOSS_HINT = (
    "Some data may have been lost because they are not available in the cluster any more: "
    "aged out by retention, or the topic was deleted. If you want your query to go on in "
    "such cases, set the source option 'failOnDataLoss' to 'false'."
)


class DataLossError(RuntimeError):
    """Offsets the read was to cover are gone (failOnDataLoss=true)."""


@dataclass(frozen=True, order=True)
class OffsetRange:
    """Offsets [start, end) of one topic-partition: what one Spark task reads."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


class TopicPartitionLike(Protocol):
    """gregor-client's TopicPartition, as far as planning cares."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...


_TopicPartition = TypeVar("_TopicPartition", bound=TopicPartitionLike)


class OffsetLookup(Protocol):
    """What planning asks the cluster (gregor-client's Consumer answers it)."""

    def topics(self) -> dict[str, list[int]]: ...
    def earliest(self, tps: Sequence[TP]) -> dict[TP, int]: ...
    def latest(self, tps: Sequence[TP]) -> dict[TP, int]: ...
    def for_times(self, timestamps: Mapping[TP, int]) -> dict[TP, int | None]: ...


def topic_partitions(strategy: Strategy, topics: Mapping[str, Sequence[int]]) -> list[TP]:
    """The partitions a subscription means now, given every topic of the cluster."""
    if isinstance(strategy, SubscribePattern):
        return sorted(
            (t, p)
            for t, ps in topics.items()
            if t not in INTERNAL_TOPICS and strategy.matches(t)
            for p in ps
        )
    if isinstance(strategy, Subscribe):
        missing = [t for t in strategy.topics if t not in topics]
        if missing:
            raise UnknownTopicOrPartitionError(
                f"subscribed topics do not exist: {', '.join(missing)}"
            )
        return sorted((t, p) for t in set(strategy.topics) for p in topics[t])
    assert isinstance(strategy, Assign)
    unknown = [f"{t}-{p}" for t, p in strategy.partitions if p not in topics.get(t, ())]
    if unknown:
        raise UnknownTopicOrPartitionError(f"assigned partitions do not exist: {unknown}")
    return sorted(set(strategy.partitions))


def resolve(
    bound: Bound,
    tps: Sequence[TP],
    lookup: OffsetLookup,
    *,
    name: str,
    no_match_latest: bool,
) -> dict[TP, int]:
    """The offset of each partition that `bound` (the starting or ending option) means.

    A timestamp resolves to the first offset at or after it; a partition with no record
    that recent resolves to its latest offset when `no_match_latest`, else is an error.
    """
    if bound.kind == "earliest":
        return lookup.earliest(tps)
    if bound.kind == "latest":
        return lookup.latest(tps)
    if bound.kind == "offsets":
        _check_covers(bound.offsets, tps, name)
        wanted = {tp: bound.offsets[tp] for tp in tps}
        to_earliest = [tp for tp, o in wanted.items() if o == EARLIEST]
        to_latest = [tp for tp, o in wanted.items() if o == LATEST]
        wanted.update(lookup.earliest(to_earliest) if to_earliest else {})
        wanted.update(lookup.latest(to_latest) if to_latest else {})
        return wanted
    if bound.kind == "timestamp":
        times = dict.fromkeys(tps, bound.timestamp)
    else:
        _check_covers(bound.offsets, tps, name)
        times = {tp: bound.offsets[tp] for tp in tps}
    found = lookup.for_times(times) if times else {}
    unmatched = [tp for tp in tps if found.get(tp) is None]
    if unmatched and not no_match_latest:
        raise OptionError(
            f"no offset matched the timestamp of {name} for "
            + ", ".join(f"{t}-{p} ({times[(t, p)]})" for t, p in unmatched)
            + "; set 'startingOffsetsByTimestampStrategy' to 'latest' to start at the "
            "latest offset instead"
        )
    latest = lookup.latest(unmatched) if unmatched else {}
    out = {}
    for tp in tps:
        offset = found.get(tp)
        out[tp] = latest[tp] if offset is None else offset
    return out


def _check_covers(given: Mapping[TP, int], tps: Sequence[TP], name: str) -> None:
    if set(given) != set(tps):
        raise OptionError(
            f"option '{name}' must name every partition read, with -2 for earliest and -1 "
            f"for latest. Named: {_names(given)}; read: {_names(tps)}"
        )


def _names(tps: Iterable[TP]) -> str:
    return ", ".join(f"{t}-{p}" for t, p in sorted(tps)) or "none"


def offset_ranges(
    start: Mapping[TP, int], end: Mapping[TP, int], *, fail_on_data_loss: bool
) -> list[OffsetRange]:
    """A range per partition from `start` to `end`. A partition whose end comes before its
    start (the log was truncated or recreated), or that is gone from `end`, is data loss."""
    ranges = []
    for tp in sorted(start):
        if tp not in end:
            data_loss(f"partition {tp[0]}-{tp[1]} is gone", fail_on_data_loss)
            continue
        s, e = start[tp], end[tp]
        if e < s:
            data_loss(
                f"partition {tp[0]}-{tp[1]}'s offset went back from {s} to {e}",
                fail_on_data_loss,
            )
            continue
        ranges.append(OffsetRange(tp[0], tp[1], s, e))
    return ranges


def data_loss(message: str, fail: bool) -> None:
    if fail:
        raise DataLossError(f"{message}. {DATA_LOSS_HINT}")


def split(
    ranges: Sequence[OffsetRange],
    min_partitions: int | None = None,
    max_records_per_partition: int | None = None,
) -> list[OffsetRange]:
    """Input partitions: one per non-empty range, split further so that none holds more than
    `max_records_per_partition` offsets, and then, while there are fewer than
    `min_partitions`, the large ranges in proportion to their share of the data."""
    parts = [r for r in ranges if r.size > 0]
    if max_records_per_partition is not None:
        parts = [
            piece for r in parts for piece in _pieces(r, -(-r.size // max_records_per_partition))
        ]
    if min_partitions is None or len(parts) >= min_partitions:
        return parts
    total = sum(r.size for r in parts)

    def share(r: OffsetRange, of: int, among: int) -> int:
        return max(round(r.size / of * among), 1)

    # Ranges too small to split keep one task each and leave the rest of the budget to
    # the large ones, whose shares are then computed among themselves.
    small = [r for r in parts if share(r, total, min_partitions) == 1]
    large_total = total - sum(r.size for r in small)
    budget = max(min_partitions - len(small), 1)
    out = []
    for r in parts:
        count = 1 if r in small else share(r, large_total, budget)
        out += _pieces(r, count)
    return out


def _pieces(r: OffsetRange, count: int) -> list[OffsetRange]:
    """`r` cut into `count` consecutive ranges of nearly equal size (the last ones take
    the remainder)."""
    out = []
    start, remaining = r.start, r.size
    for i in range(count):
        size = remaining // (count - i)
        out.append(OffsetRange(r.topic, r.partition, start, start + size))
        start += size
        remaining -= size
    return [piece for piece in out if piece.size > 0]


def rate_limit(start: Mapping[TP, int], latest: Mapping[TP, int], limit: int) -> dict[TP, int]:
    """End offsets that admit at most about `limit` records in all, shared out in
    proportion to each partition's backlog (maxOffsetsPerTrigger)."""
    backlog = {tp: latest[tp] - start.get(tp, latest[tp]) for tp in latest}
    total = sum(b for b in backlog.values() if b > 0)
    if total <= limit:
        return dict(latest)
    out = {}
    for tp, end in latest.items():
        begin = start.get(tp, end)
        if backlog[tp] <= 0:
            out[tp] = end
            continue
        share = limit * backlog[tp] / total
        step = math.ceil(share) if share < 1 else math.floor(share)
        out[tp] = min(begin + step, end)
    return out


def to_json_offsets(offsets: Mapping[TP, int]) -> dict[str, dict[str, int]]:
    """spark-sql-kafka's offset JSON: {"topic": {"partition": offset}}."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = offset
    return out


def from_json_offsets(offsets: Mapping[str, Mapping[str, int]]) -> dict[TP, int]:
    return {(t, int(p)): o for t, ps in offsets.items() for p, o in ps.items()}


def by_tp(offsets: Mapping[_TopicPartition, int]) -> dict[TP, int]:
    """gregor-client's {TopicPartition: offset} as planning's {(topic, partition): offset}."""
    return {(tp.topic, tp.partition): o for tp, o in offsets.items()}
