"""Checkpoints: MM2's `<source>.checkpoints.internal` records on the target, and the task
that writes them (and, with `sync.group.offsets.enabled`, the groups' offsets themselves).

Key: group (STRING), topic (STRING, the target's name), partition (INT32); value: version
(INT16, 0), upstreamOffset (INT64), offset (INT64), metadata (STRING).

Each round (every `emit.checkpoints.interval.seconds`) reads the source groups' committed
offsets of mirrored partitions and translates them through the offset syncs
(`translate.translate`); the groups are listed every `refresh.groups.interval.seconds`.
A group's offsets are written into the target only while the group has no members there,
and only forward, as MM2 does (KIP-545).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import trio

from gregor.client import (
    AsyncAdminClient,
    AsyncProducer,
    OffsetAndMetadata,
    TopicPartition,
)
from gregor.mirror import schema
from gregor.mirror.config import FlowConfig
from gregor.mirror.metrics import FlowMetrics
from gregor.mirror.offset_sync import SyncStore
from gregor.mirror.topics import COMPACTED, ensure_topic, read_to_end
from gregor.protocol.errors import (
    FencedMemberEpochError,
    GroupIdNotFoundError,
    IllegalGenerationError,
    RebalanceInProgressError,
    StaleMemberEpochError,
    UnknownMemberIdError,
)

log = logging.getLogger("gregor.mirror")
VERSION = 0
_INACTIVE = {"Empty", "Dead", ""}
# What a commit outside any generation gets from a group that has members.
_ACTIVE = (
    UnknownMemberIdError,
    IllegalGenerationError,
    RebalanceInProgressError,
    FencedMemberEpochError,
    StaleMemberEpochError,
)


@attrs.frozen
class Checkpoint:
    group: str
    partition: TopicPartition  # on the target
    upstream_offset: int
    offset: int  # on the target
    metadata: str = ""

    def key(self) -> bytes:
        tp = self.partition
        return schema.string(self.group) + schema.string(tp.topic) + schema.int32(tp.partition)

    def value(self) -> bytes:
        return (
            schema.int16(VERSION)
            + schema.int64(self.upstream_offset)
            + schema.int64(self.offset)
            + schema.string(self.metadata)
        )

    @classmethod
    def decode(cls, key: bytes, value: bytes) -> Checkpoint:
        k = schema.Reader(key, "checkpoint key")
        group, topic, partition = k.string(), k.string(), k.int32()
        v = schema.Reader(value, "checkpoint value")
        v.int16()  # version 0 is the only one; a newer one starts with the same fields
        return cls(group, TopicPartition(topic, partition), v.int64(), v.int64(), v.string())


async def read_checkpoints(
    config: Mapping[str, Any], topic: str, timeout: float = 30.0
) -> dict[tuple[str, TopicPartition], Checkpoint]:
    """The latest checkpoint of each (group, partition) in a checkpoints topic."""
    latest: dict[tuple[str, TopicPartition], Checkpoint] = {}
    for record in await read_to_end(config, topic, timeout):
        if record.key is None or record.value is None:
            continue
        checkpoint = Checkpoint.decode(record.key, record.value)
        latest[checkpoint.group, checkpoint.partition] = checkpoint
    return latest


class CheckpointTask:
    """Writes a flow's checkpoints (emit.checkpoints.enabled), and syncs group offsets into
    the target (sync.group.offsets.enabled): either, or both. `emitted` holds the latest
    translated offset of each group's partition, written or not."""

    def __init__(
        self,
        flow: FlowConfig,
        store: SyncStore,
        mirrored: Callable[[], Mapping[TopicPartition, TopicPartition]],
        metrics: FlowMetrics | None = None,
    ) -> None:
        self.flow = flow
        self.metrics = metrics or FlowMetrics(flow.name)
        self.store = store
        self.mirrored = mirrored  # source partition -> target partition, as of now
        self.emitted: dict[tuple[str, TopicPartition], Checkpoint] = {}
        self.groups: list[str] | None = None  # the source's groups the flow mirrors
        self.groups_listed = -math.inf  # trio time of the last listing
        self.held: set[str] = set()  # groups not synced as they have members on the target

    async def run(self) -> None:
        flow = self.flow
        target = flow.target
        topic = flow.checkpoints_topic
        async with (
            AsyncAdminClient(flow.source.admin_config()) as source_admin,
            AsyncAdminClient(target.admin_config()) as target_admin,
            AsyncProducer(target.producer_config(acks="all")) as producer,
        ):
            if flow.emit_checkpoints:
                await ensure_topic(
                    target_admin, topic, 1, flow.checkpoints_replication_factor, COMPACTED
                )
                self.emitted = await read_checkpoints(target.consumer_config(), topic)
            next_sync = trio.current_time()
            while True:
                started = time.monotonic()
                checkpoints = await self.checkpoints(source_admin)
                fresh = [c for c in checkpoints if self.emitted.get((c.group, c.partition)) != c]
                # emit.checkpoints.enabled=false with sync.group.offsets.enabled: the groups
                # are synced from the translated offsets, and no checkpoint is written.
                if fresh and flow.emit_checkpoints:
                    for c in fresh:
                        await producer.produce(topic, c.value(), c.key(), partition=0)
                    await producer.flush()
                    latency = round((time.monotonic() - started) * 1000)
                    self.metrics.checkpoint_latency.add(latency)
                for c in fresh:
                    self.emitted[c.group, c.partition] = c
                if flow.sync_group_offsets and trio.current_time() >= next_sync:
                    await self.sync_groups(target_admin)
                    next_sync = trio.current_time() + flow.sync_group_offsets_interval
                await trio.sleep(min(self.intervals()))

    def _held(self, group: str, why: str) -> None:
        """Say once (until it is synced again) that a group is not synced as it has members
        on the target."""
        if group not in self.held:
            self.held.add(group)
            log.info(
                "%s: group %s has members on %s (%s): not synced while they are there",
                self.flow.name, group, self.flow.target.alias, why,
            )  # fmt: skip

    def intervals(self) -> list[float]:
        """The intervals of what the task does: emit, sync, or both."""
        flow = self.flow
        return [
            interval
            for enabled, interval in (
                (flow.emit_checkpoints, flow.emit_checkpoints_interval),
                (flow.sync_group_offsets, flow.sync_group_offsets_interval),
            )
            if enabled
        ]

    async def checkpoints(self, source_admin: AsyncAdminClient) -> list[Checkpoint]:
        """The source groups' committed offsets of mirrored partitions, translated."""
        mirrored = self.mirrored()
        out = []
        for group in await self.source_groups(source_admin):
            offsets = await source_admin.list_group_offsets(group)
            for tp, committed in offsets.items():
                remote = mirrored.get(tp)
                upstream = committed.committed.offset
                if remote is None or upstream < 0:
                    continue
                downstream = self.store.translate(tp, upstream)
                if downstream is not None:
                    out.append(
                        Checkpoint(
                            group, remote, upstream, downstream, committed.committed.metadata
                        )
                    )
        return out

    async def source_groups(self, source_admin: AsyncAdminClient) -> list[str]:
        """The source's consumer groups that the flow's filter selects, listed again every
        refresh.groups.interval.seconds (as MM2 does: a new group is picked up then)."""
        now = trio.current_time()
        if self.groups is None or now - self.groups_listed >= self.flow.refresh_groups_interval:
            self.groups = sorted(
                listing.group_id
                for listing in await source_admin.list_groups()
                if listing.protocol_type in ("consumer", "") and self.flow.groups(listing.group_id)
            )
            self.groups_listed = now
        return self.groups

    async def sync_groups(self, target_admin: AsyncAdminClient) -> None:
        """Write the checkpointed offsets into the target's groups that have no members,
        where they move the group forward."""
        by_group: dict[str, dict[TopicPartition, Checkpoint]] = {}
        for (group, tp), checkpoint in self.emitted.items():
            by_group.setdefault(group, {})[tp] = checkpoint
        for group, checkpoints in sorted(by_group.items()):
            try:
                described = (await target_admin.describe_groups([group]))[group]
            except GroupIdNotFoundError:  # (how DescribeGroups v6+ says so: no such group)
                pass
            else:
                if described.state not in _INACTIVE or described.members:
                    self._held(group, f"{len(described.members)} members, {described.state}")
                    continue
            self.held.discard(group)
            current = await target_admin.list_group_offsets(group)
            ahead = {
                tp: OffsetAndMetadata(c.offset, c.metadata)
                for tp, c in checkpoints.items()
                if tp not in current or current[tp].committed.offset < c.offset
            }
            if not ahead:
                continue
            try:
                # An OffsetCommit outside any generation, as MM2's alterConsumerGroupOffsets.
                await target_admin.alter_group_offsets(group, ahead)
            except _ACTIVE as exc:
                # Members joined since it was described (or it is a KIP-848 group, which
                # DescribeGroups shows as Dead): theirs are the offsets that count.
                self._held(group, f"{type(exc).__name__}: {exc}")
                continue
            log.info(
                "%s: group %s synced on %s: %s",
                self.flow.name,
                group,
                self.flow.target.alias,
                {f"{tp.topic}-{tp.partition}": m.offset for tp, m in ahead.items()},
            )
