"""What the client knows of the cluster: brokers, topics, partitions and their leaders.

A `Cluster` is an immutable snapshot built from one Metadata response; the network client
swaps in a new one on each refresh, so readers (the producer's partitioner in the caller's
thread, the sender, the fetcher) never see a half-updated view and need no lock.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping

import attrs

from gregor.client.types import TopicPartition
from gregor.protocol.apis.metadata import MetadataResponse
from gregor.protocol.errors import ErrorCode

NO_LEADER = -1
NO_TOPIC_ID = uuid.UUID(int=0)


@attrs.frozen
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None = None

    def __str__(self) -> str:
        return f"broker {self.node_id} ({self.host}:{self.port})"


@attrs.frozen
class PartitionInfo:
    topic: str
    partition: int
    leader: int
    leader_epoch: int = -1
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    offline_replicas: tuple[int, ...] = ()
    error_code: int = 0


@attrs.frozen
class TopicInfo:
    name: str
    partitions: tuple[PartitionInfo, ...]  # by partition index
    topic_id: uuid.UUID = NO_TOPIC_ID
    is_internal: bool = False
    error_code: int = 0

    @property
    def available(self) -> tuple[int, ...]:
        """Partitions with a leader, by index."""
        return tuple(p.partition for p in self.partitions if p.leader != NO_LEADER)


class Cluster:
    """One snapshot of cluster metadata (treat as immutable)."""

    def __init__(
        self,
        brokers: Mapping[int, BrokerInfo] = {},
        topics: Mapping[str, TopicInfo] = {},
        *,
        cluster_id: str | None = None,
        controller_id: int = -1,
        topic_errors: Mapping[str, int] = {},
    ) -> None:
        self.brokers = dict(brokers)
        self.topics = dict(topics)
        self.cluster_id = cluster_id
        self.controller_id = controller_id
        # Topics the broker answered with an error (UNKNOWN_TOPIC_OR_PARTITION, ...).
        self.topic_errors = dict(topic_errors)
        self._leaders: dict[TopicPartition, int] = {}
        self._available: dict[str, tuple[int, ...]] = {}
        self.topic_names_by_id = {t.topic_id: t.name for t in self.topics.values()}
        for info in self.topics.values():
            self._available[info.name] = info.available
            for p in info.partitions:
                self._leaders[TopicPartition(info.name, p.partition)] = p.leader

    @classmethod
    def from_response(cls, response: MetadataResponse, previous: Cluster | None = None) -> Cluster:
        """A snapshot from a Metadata response. Topics that answered with an error keep
        their previous layout (a leader election in progress is no reason to forget them)."""
        brokers = {
            b.node_id: BrokerInfo(b.node_id, b.host, b.port, b.rack) for b in response.brokers
        }
        topics: dict[str, TopicInfo] = {}
        errors: dict[str, int] = {}
        for t in response.topics:
            if t.name is None:
                continue
            if t.error_code != ErrorCode.NONE and not t.partitions:
                errors[t.name] = t.error_code
                if previous is not None and t.name in previous.topics:
                    topics[t.name] = previous.topics[t.name]
                continue
            if t.error_code != ErrorCode.NONE:
                errors[t.name] = t.error_code
            partitions = sorted(
                (
                    PartitionInfo(
                        t.name,
                        p.partition_index,
                        p.leader_id if p.error_code != ErrorCode.LEADER_NOT_AVAILABLE else -1,
                        p.leader_epoch,
                        tuple(p.replica_nodes),
                        tuple(p.isr_nodes),
                        tuple(p.offline_replicas),
                        p.error_code,
                    )
                    for p in t.partitions
                ),
                key=lambda p: p.partition,
            )
            topics[t.name] = TopicInfo(
                t.name, tuple(partitions), t.topic_id, t.is_internal, t.error_code
            )
        return cls(
            brokers,
            topics,
            cluster_id=response.cluster_id,
            controller_id=response.controller_id,
            topic_errors=errors,
        )

    def leader_for(self, tp: TopicPartition) -> int:
        """The leader's node id, or -1 when unknown."""
        return self._leaders.get(tp, NO_LEADER)

    def partition_count(self, topic: str) -> int | None:
        info = self.topics.get(topic)
        return None if info is None else len(info.partitions)

    def available_partitions(self, topic: str) -> tuple[int, ...]:
        return self._available.get(topic, ())

    def partitions_for(self, topic: str) -> tuple[PartitionInfo, ...]:
        info = self.topics.get(topic)
        return () if info is None else info.partitions

    def partition_info(self, tp: TopicPartition) -> PartitionInfo | None:
        partitions = self.partitions_for(tp.topic)
        return partitions[tp.partition] if 0 <= tp.partition < len(partitions) else None

    def broker(self, node_id: int) -> BrokerInfo | None:
        return self.brokers.get(node_id)

    def replica_racks(self, topic: str) -> list[frozenset[str]]:
        """For each partition, the racks its replicas are on (for rack-aware assignment)."""
        out = []
        for p in self.partitions_for(topic):
            racks = (self.brokers[r].rack for r in p.replicas if r in self.brokers)
            out.append(frozenset(r for r in racks if r))
        return out

    def describe(self, nodes: Iterable[int]) -> str:
        return ", ".join(str(self.brokers.get(n, n)) for n in nodes)
