"""The small value types of the client's public API."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple


class TopicPartition(NamedTuple):
    """A partition of a topic. A tuple: cheap to hash, and sorts by topic then partition."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


class OffsetAndMetadata(NamedTuple):
    """A committed position: the next offset to read, with the committer's note."""

    offset: int
    metadata: str = ""
    leader_epoch: int | None = None


class ConsumerGroupMetadata(NamedTuple):
    """A consumer's group membership, for send_offsets_to_transaction: the coordinator
    refuses offsets from a generation that is gone (a zombie after a rebalance)."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


class RecordMetadata(NamedTuple):
    """Where a produced record was written."""

    topic: str
    partition: int
    offset: int
    timestamp: int  # CreateTime as sent, or the broker's LogAppendTime

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


class OffsetAndTimestamp(NamedTuple):
    """The answer of offsets_for_times: the first offset at or after a timestamp."""

    offset: int
    timestamp: int
    leader_epoch: int | None = None


def as_offsets(
    offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | Mapping[tuple[str, int], int],
) -> dict[TopicPartition, OffsetAndMetadata]:
    """Offsets to commit, given as OffsetAndMetadata or plain offsets."""
    return {
        TopicPartition(*tp): meta
        if isinstance(meta, OffsetAndMetadata)
        else OffsetAndMetadata(meta)
        for tp, meta in offsets.items()
    }


def partitions_by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    """Partition ids grouped by topic, sorted, as requests list them."""
    out: dict[str, list[int]] = {}
    for topic, partition in sorted(set(partitions)):
        out.setdefault(topic, []).append(partition)
    return out
