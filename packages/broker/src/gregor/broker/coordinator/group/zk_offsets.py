"""Offsets of OffsetCommit v0 and OffsetFetch v0, which a ZooKeeper-mode Kafka broker keeps
in ZooKeeper rather than `__consumer_offsets`: `/consumers/<group>/offsets/<topic>/<partition>`
holding the offset as decimal text (the znodes of the old ZooKeeper consumers)."""

from __future__ import annotations

from gregor.broker.zk import KafkaZkClient, znodes


def offset_path(group_id: str, topic: str, partition: int) -> str:
    return f"{znodes.CONSUMERS}/{group_id}/offsets/{topic}/{partition}"


async def commit_offset(
    zk: KafkaZkClient, group_id: str, topic: str, partition: int, offset: int
) -> None:
    await zk.set_or_create(offset_path(group_id, topic, partition), str(offset).encode())


async def fetch_offset(zk: KafkaZkClient, group_id: str, topic: str, partition: int) -> int | None:
    found = await zk.get_data(offset_path(group_id, topic, partition))
    if found is None:
        return None
    try:
        return int(found[0].decode())
    except (UnicodeDecodeError, ValueError):
        return None
