"""Heartbeats: MM2's `heartbeats` records, emitted into each target cluster.

Key: sourceClusterAlias (STRING), targetClusterAlias (STRING); value: version (INT16, 0),
timestamp (INT64, ms). Flows mirror the `heartbeats` topics onward like any other (`A.heartbeats`
on B holds what was emitted into A), so the remote heartbeats topics show every replication
path and its delay.
"""

from __future__ import annotations

import logging
import time

import attrs
import trio

from gregor.client import AsyncAdminClient, AsyncProducer
from gregor.mirror import schema
from gregor.mirror.config import FlowConfig
from gregor.mirror.topics import COMPACTED, ensure_topic

log = logging.getLogger("gregor.mirror")
VERSION = 0


@attrs.frozen
class Heartbeat:
    source: str
    target: str
    timestamp: int

    def key(self) -> bytes:
        return schema.string(self.source) + schema.string(self.target)

    def value(self) -> bytes:
        return schema.int16(VERSION) + schema.int64(self.timestamp)

    @classmethod
    def decode(cls, key: bytes, value: bytes) -> Heartbeat:
        k = schema.Reader(key, "heartbeat key")
        source, target = k.string(), k.string()
        v = schema.Reader(value, "heartbeat value")
        v.int16()  # version 0 is the only one; a newer one starts with the same fields
        return cls(source, target, v.int64())


async def emit_heartbeats(flow: FlowConfig) -> None:
    """Every emit.heartbeats.interval.seconds, a heartbeat of the pair into its target."""
    topic = flow.policy.heartbeats_topic()
    target = flow.target
    async with AsyncAdminClient(target.admin_config()) as admin:
        await ensure_topic(admin, topic, 1, flow.heartbeats_replication_factor, COMPACTED)
    async with AsyncProducer(target.producer_config(acks="all")) as producer:
        while True:
            beat = Heartbeat(flow.source.alias, target.alias, int(time.time() * 1000))
            await producer.produce(topic, beat.value(), beat.key(), partition=0)
            await trio.sleep(flow.emit_heartbeats_interval)
