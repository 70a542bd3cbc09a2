"""What the controller last told this broker about the cluster (UpdateMetadata).

Every broker keeps the same cache, filled by the controller's UpdateMetadata requests: the
live brokers and their endpoints per listener, each partition's leader, leader epoch, ISR,
replicas and offline replicas, the topic ids, and the controller's id. Metadata requests are
answered from it.

The cache is an immutable snapshot replaced whole on each update, so a reader takes one
reference and sees a consistent view for the rest of its work. Admin requests that wait for
the controller's work to show (`wait_until`) wake on each update.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping

import attrs
import trio

from gregor.broker.control_requests import partition_states
from gregor.protocol.apis.metadata import MetadataResponseBroker, MetadataResponsePartition
from gregor.protocol.apis.update_metadata import (
    UpdateMetadataRequest,
)
from gregor.protocol.errors import ErrorCode

NO_LEADER = -1
LEADER_DURING_DELETE = -2  # a partition state's leader while its topic is being deleted
ZERO_UUID = uuid.UUID(int=0)


@attrs.frozen(slots=True)
class Node:
    id: int
    host: str
    port: int
    rack: str | None


@attrs.frozen(slots=True)
class PartitionState:
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    offline_replicas: tuple[int, ...]
    zk_version: int
    controller_epoch: int


@attrs.frozen(slots=True)
class Snapshot:
    # broker id -> listener name -> node
    nodes: Mapping[int, Mapping[str, Node]]
    partitions: Mapping[str, Mapping[int, PartitionState]]
    topic_ids: Mapping[str, uuid.UUID]
    controller_id: int  # -1 when unknown


_EMPTY = Snapshot({}, {}, {}, -1)


class MetadataCache:
    def __init__(self, broker_id: int) -> None:
        self.broker_id = broker_id
        self.snapshot = _EMPTY
        self.controller_epoch = -1
        self._updated = trio.Event()  # set, and replaced, on each update
        self._sizes: Mapping[str, tuple[uuid.UUID, int]] = {}
        self._sizes_of: Snapshot | None = None

    # -- updates ---------------------------------------------------------------------------

    def update(self, request: UpdateMetadataRequest) -> list[tuple[str, int]]:
        """Apply an UpdateMetadata request; return the partitions it deleted.

        Partition states replace the ones they name; a leader of -2 deletes the partition
        (its topic is being deleted). The live brokers replace the whole broker list.
        """
        old = self.snapshot
        nodes: dict[int, dict[str, Node]] = {}
        for broker in request.live_brokers:
            by_listener = {
                endpoint.listener: Node(broker.id, endpoint.host, endpoint.port, broker.rack)
                for endpoint in broker.endpoints
            }
            if not broker.endpoints and broker.v0_host:  # UpdateMetadata v0
                by_listener["PLAINTEXT"] = Node(broker.id, broker.v0_host, broker.v0_port, None)
            nodes[broker.id] = by_listener
        topic_ids = dict(old.topic_ids)
        for topic_state in request.topic_states:
            if topic_state.topic_id != ZERO_UUID:
                topic_ids[topic_state.topic_name] = topic_state.topic_id
            else:
                topic_ids.pop(topic_state.topic_name, None)
        partitions = {topic: dict(parts) for topic, parts in old.partitions.items()}
        deleted: list[tuple[str, int]] = []
        for topic, state in partition_states(request):
            index = state.partition_index
            if state.leader == LEADER_DURING_DELETE:
                parts = partitions.get(topic)
                if parts is not None and parts.pop(index, None) is not None:
                    deleted.append((topic, index))
                    if not parts:
                        del partitions[topic]
                        topic_ids.pop(topic, None)
                continue
            partitions.setdefault(topic, {})[index] = PartitionState(
                leader=state.leader,
                leader_epoch=state.leader_epoch,
                isr=tuple(state.isr),
                replicas=tuple(state.replicas),
                offline_replicas=tuple(state.offline_replicas),
                zk_version=state.zk_version,
                controller_epoch=state.controller_epoch,
            )
        self.snapshot = Snapshot(nodes, partitions, topic_ids, request.controller_id)
        self.controller_epoch = request.controller_epoch
        self._updated.set()
        self._updated = trio.Event()
        return deleted

    async def wait_until(self, predicate: Callable[[], bool], timeout_ms: int) -> bool:
        """Wait until `predicate()` holds, checking it after each update; False if it still
        does not after `timeout_ms`."""
        with trio.move_on_after(max(0, timeout_ms) / 1000):
            while not predicate():
                await self._updated.wait()
            return True
        return predicate()

    # -- reads -----------------------------------------------------------------------------

    @property
    def controller_id(self) -> int:
        return self.snapshot.controller_id

    def topics(self) -> list[str]:
        return sorted(self.snapshot.partitions)

    def contains_topic(self, topic: str) -> bool:
        return topic in self.snapshot.partitions

    def topic_id(self, topic: str) -> uuid.UUID:
        return self.snapshot.topic_ids.get(topic, ZERO_UUID)

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        for name, known in self.snapshot.topic_ids.items():
            if known == topic_id:
                return name
        return None

    def topic_sizes(self) -> Mapping[str, tuple[uuid.UUID, int]]:
        """Each topic with an id: (id, partitions); computed once per snapshot."""
        snapshot = self.snapshot
        if self._sizes_of is not snapshot:
            self._sizes = {
                name: (snapshot.topic_ids[name], len(parts))
                for name, parts in snapshot.partitions.items()
                if snapshot.topic_ids.get(name, ZERO_UUID) != ZERO_UUID
            }
            self._sizes_of = snapshot
        return self._sizes

    def partition(self, topic: str, partition: int) -> PartitionState | None:
        parts = self.snapshot.partitions.get(topic)
        return None if parts is None else parts.get(partition)

    def partition_count(self, topic: str) -> int | None:
        parts = self.snapshot.partitions.get(topic)
        return None if parts is None else len(parts)

    def alive_broker_ids(self) -> list[int]:
        return sorted(self.snapshot.nodes)

    def is_alive(self, broker_id: int) -> bool:
        return broker_id in self.snapshot.nodes

    def node(self, broker_id: int, listener: str) -> Node | None:
        """The endpoint of a live broker on a listener."""
        by_listener = self.snapshot.nodes.get(broker_id)
        return None if by_listener is None else by_listener.get(listener)

    def alive_nodes(self, listener: str) -> list[Node]:
        return [
            by_listener[listener]
            for _, by_listener in sorted(self.snapshot.nodes.items())
            if listener in by_listener
        ]

    def brokers_metadata(self, listener: str) -> list[MetadataResponseBroker]:
        return [
            MetadataResponseBroker(node.id, node.host, node.port, node.rack)
            for node in self.alive_nodes(listener)
        ]

    def partitions_metadata(
        self,
        topic: str,
        listener: str,
        *,
        error_unavailable_endpoints: bool = False,
        error_unavailable_listeners: bool = False,
    ) -> list[MetadataResponsePartition] | None:
        """The partitions of a topic as Metadata reports them, or None for an unknown topic.

        `error_unavailable_endpoints` (Metadata v0) filters out replicas without an endpoint
        on this listener and reports REPLICA_NOT_AVAILABLE; `error_unavailable_listeners`
        (v6+) reports a leader lacking the listener as LISTENER_NOT_FOUND.
        """
        snapshot = self.snapshot
        parts = snapshot.partitions.get(topic)
        if parts is None:
            return None
        out = []
        for index, state in sorted(parts.items()):
            replicas = list(state.replicas)
            isr = list(state.isr)
            if error_unavailable_endpoints:
                replicas = [r for r in replicas if self.node(r, listener) is not None]
                isr = [r for r in isr if self.node(r, listener) is not None]
            leader = self.node(state.leader, listener)
            error = ErrorCode.NONE
            leader_id = state.leader
            if leader is None:
                leader_id = NO_LEADER
                if state.leader in snapshot.nodes and error_unavailable_listeners:
                    error = ErrorCode.LISTENER_NOT_FOUND
                else:
                    error = ErrorCode.LEADER_NOT_AVAILABLE
            elif len(replicas) < len(state.replicas) or len(isr) < len(state.isr):
                error = ErrorCode.REPLICA_NOT_AVAILABLE
            out.append(
                MetadataResponsePartition(
                    error_code=error,
                    partition_index=index,
                    leader_id=leader_id,
                    leader_epoch=state.leader_epoch,
                    replica_nodes=replicas,
                    isr_nodes=isr,
                    offline_replicas=list(state.offline_replicas),
                )
            )
        return out
