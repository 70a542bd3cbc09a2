"""Offset translation: where a consumer that stopped on the source resumes on the target.

`translate(syncs, offset)` (from offset_sync) is the exact translation the checkpoints carry;
`translate_offsets(config, source_alias, group)` is the library function, as MM2's
RemoteClusterUtils.translateOffsets: a group's offsets for the target cluster, read from the
checkpoints the mirror wrote there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gregor.client import OffsetAndMetadata, TopicPartition
from gregor.mirror.checkpoints import read_checkpoints
from gregor.mirror.offset_sync import translate
from gregor.mirror.policy import DEFAULT_POLICY, policy_from_config


async def translate_offsets(
    target: Mapping[str, Any],
    source_alias: str,
    group: str,
    *,
    replication_policy: str = DEFAULT_POLICY,
    separator: str = ".",
    timeout: float = 30.0,
) -> dict[TopicPartition, OffsetAndMetadata]:
    """The offsets on the target cluster (client settings `target`) of `group`'s commits on
    the cluster `source_alias`: its latest checkpoints in `<source_alias>.checkpoints.internal`,
    by the target's topic names."""
    policy = policy_from_config(replication_policy, separator=separator)
    topic = policy.checkpoints_topic(source_alias)
    latest = await read_checkpoints(target, topic, timeout)
    return {
        checkpoint.partition: OffsetAndMetadata(checkpoint.offset, checkpoint.metadata)
        for checkpoint in latest.values()
        if checkpoint.group == group
    }


__all__ = ["translate", "translate_offsets"]
