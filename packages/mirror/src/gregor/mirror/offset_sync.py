"""Offset syncs: MM2's `mm2-offset-syncs.<cluster>.internal` records, and what they say.

An offset sync says that the record at `upstream_offset` of a source partition was written at
`offset` of its copy. Key: topic (STRING), partition (INT32); value: upstreamOffset (INT64),
offset (INT64); no version header, as MM2 writes them.

gregor-mirror writes a sync for the first record it copies of each run of consecutive
offsets, for the last record before any jump (a gap in the source: compacted records,
transaction markers; or in the target: a retried batch), and for the last record of each
delivered chunk. So between two syncs of a partition either the offsets advance together, or
nothing was copied: the syncs describe the whole mapping, and translation is exact
(`translate.translate`). The last sync of a partition is also how far the copy got: a
restarted mirror resumes after it.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

import attrs

from gregor.client import TopicPartition
from gregor.mirror import schema


@attrs.frozen
class OffsetSync:
    partition: TopicPartition  # the source partition
    upstream_offset: int
    offset: int  # in the copy

    def key(self) -> bytes:
        return schema.string(self.partition.topic) + schema.int32(self.partition.partition)

    def value(self) -> bytes:
        return schema.int64(self.upstream_offset) + schema.int64(self.offset)

    @classmethod
    def decode(cls, key: bytes, value: bytes) -> OffsetSync:
        k = schema.Reader(key, "offset sync key")
        tp = TopicPartition(k.string(), k.int32())
        v = schema.Reader(value, "offset sync value")
        return cls(tp, v.int64(), v.int64())


Sync = tuple[int, int]  # (upstream offset, downstream offset)


class SyncStore:
    """Every partition's syncs in upstream order: what the offset-syncs topic says.

    A sync that goes back (a restarted mirror copying again) replaces the syncs at or after
    its upstream offset, as MM2's OffsetSyncStore does; a sync in the middle of a straight run
    says nothing its neighbours do not, and is dropped.
    """

    def __init__(self) -> None:
        self.syncs: dict[TopicPartition, list[Sync]] = {}

    def add(self, sync: OffsetSync) -> None:
        runs = self.syncs.setdefault(sync.partition, [])
        new = (sync.upstream_offset, sync.offset)
        while runs and runs[-1][0] >= new[0]:
            runs.pop()
        if len(runs) >= 2 and _straight(runs[-2], runs[-1]) and _straight(runs[-1], new):
            runs[-1] = new
        else:
            runs.append(new)

    def add_all(self, syncs: Iterable[OffsetSync]) -> None:
        for sync in syncs:
            self.add(sync)

    def last(self, partition: TopicPartition) -> Sync | None:
        runs = self.syncs.get(partition)
        return runs[-1] if runs else None

    def of(self, partition: TopicPartition) -> list[Sync]:
        return self.syncs.get(partition, [])

    def translate(self, partition: TopicPartition, offset: int) -> int | None:
        return translate(self.of(partition), offset)


def _straight(a: Sync, b: Sync) -> bool:
    return b[0] - a[0] == b[1] - a[1]


def translate(syncs: Sequence[Sync], offset: int) -> int | None:
    """The target offset of a source position (a committed offset: the next record to read),
    from a partition's syncs in upstream order; None before the first sync.

    Between two syncs the offsets advance together, or nothing was copied (see above),
    so the record at or after `offset` is at `d + (offset - u)` of the sync before it, but
    never past the next sync's `d`. Past the last sync, what follows it is not known yet: the
    next record lands at `d + 1` of the last sync, so that is where to resume (it re-reads
    rather than skips, should records after the last sync already be there).
    """
    index = bisect.bisect_right(syncs, offset, key=lambda sync: sync[0]) - 1
    if index < 0:
        return None
    upstream, downstream = syncs[index]
    span = syncs[index + 1][1] - downstream if index + 1 < len(syncs) else 1
    return downstream + min(offset - upstream, span)
