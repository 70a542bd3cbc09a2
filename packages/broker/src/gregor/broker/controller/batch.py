"""Collects the LeaderAndIsr, UpdateMetadata and StopReplica a state change needs, and sends
them as one request of each kind per broker.

A batch is opened with `new_batch()`, filled by the state machines, and sent with `send()`.
The bodies are built per broker at send time, at the version its connection negotiated.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import attrs

from gregor.broker.controller.channel import ControllerChannelManager, ControlRequest
from gregor.broker.controller.context import ControllerContext
from gregor.broker.zk.znodes import (
    LEADER_DURING_DELETE,
    SECURITY_PROTOCOL_IDS,
    BrokerRegistration,
    LeaderAndIsr,
    ReplicaAssignment,
    TopicPartition,
    group_by_topic,
)
from gregor.protocol.apis.leader_and_isr import (
    LeaderAndIsrLiveLeader,
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    LeaderAndIsrTopicState,
)
from gregor.protocol.apis.stop_replica import (
    StopReplicaPartitionState,
    StopReplicaPartitionV0,
    StopReplicaRequest,
    StopReplicaResponse,
    StopReplicaTopicState,
    StopReplicaTopicV1,
)
from gregor.protocol.apis.update_metadata import (
    UpdateMetadataBroker,
    UpdateMetadataEndpoint,
    UpdateMetadataPartitionState,
    UpdateMetadataRequest,
    UpdateMetadataTopicState,
)
from gregor.protocol.schema import Response

log = logging.getLogger(__name__)

_ZERO_UUID = uuid.UUID(int=0)


class BatchNotEmptyError(RuntimeError):
    """A new batch was opened while the previous one still held requests."""


@attrs.frozen
class _LeaderAndIsrEntry:
    tp: TopicPartition
    state: LeaderAndIsr
    assignment: ReplicaAssignment
    is_new: bool


@attrs.frozen
class _MetadataEntry:
    tp: TopicPartition
    state: LeaderAndIsr
    replicas: tuple[int, ...]
    offline: tuple[int, ...]


@attrs.frozen
class _StopEntry:
    tp: TopicPartition
    leader_epoch: int
    delete: bool


# Callbacks into the controller: (broker id, response) for LeaderAndIsr; (broker id,
# request-level error, {partition: error}) for StopReplica of topics being deleted.
LeaderAndIsrCallback = Callable[[int, LeaderAndIsrResponse, int], None]
StopReplicaCallback = Callable[[int, int, dict[TopicPartition, int]], None]


class RequestBatch:
    def __init__(
        self,
        controller_id: int,
        context: ControllerContext,
        channels: ControllerChannelManager,
        on_leader_and_isr: LeaderAndIsrCallback | None = None,
        on_deletion_stop_replica: StopReplicaCallback | None = None,
    ) -> None:
        self.controller_id = controller_id
        self.context = context
        self.channels = channels
        self.on_leader_and_isr = on_leader_and_isr
        self.on_deletion_stop_replica = on_deletion_stop_replica
        self._leader_and_isr: dict[int, dict[TopicPartition, _LeaderAndIsrEntry]] = {}
        self._stop_replica: dict[int, dict[TopicPartition, _StopEntry]] = {}
        self._metadata_brokers: set[int] = set()
        self._metadata: dict[TopicPartition, _MetadataEntry] = {}

    @property
    def empty(self) -> bool:
        return not (self._leader_and_isr or self._stop_replica or self._metadata_brokers)

    def new_batch(self) -> None:
        if not self.empty:
            raise BatchNotEmptyError(
                "a new controller request batch was started while the last one held "
                f"LeaderAndIsr for {sorted(self._leader_and_isr)}, StopReplica for "
                f"{sorted(self._stop_replica)}, UpdateMetadata for {sorted(self._metadata_brokers)}"
            )

    def clear(self) -> None:
        self._leader_and_isr.clear()
        self._stop_replica.clear()
        self._metadata_brokers.clear()
        self._metadata.clear()

    # -- adding ------------------------------------------------------------------------

    def add_leader_and_isr(
        self,
        broker_ids: Iterable[int],
        tp: TopicPartition,
        state: LeaderAndIsr,
        assignment: ReplicaAssignment,
        is_new: bool,
    ) -> None:
        for broker_id in broker_ids:
            if broker_id < 0:
                continue
            entries = self._leader_and_isr.setdefault(broker_id, {})
            already_new = tp in entries and entries[tp].is_new
            entries[tp] = _LeaderAndIsrEntry(tp, state, assignment, is_new or already_new)
        self.add_update_metadata(self.context.live_or_shutting_down_ids, [tp])

    def add_stop_replica(self, broker_ids: Iterable[int], tp: TopicPartition, delete: bool) -> None:
        epoch = self.context.leader_epoch(tp)
        for broker_id in broker_ids:
            if broker_id < 0:
                continue
            entries = self._stop_replica.setdefault(broker_id, {})
            already_delete = tp in entries and entries[tp].delete
            entries[tp] = _StopEntry(tp, epoch, delete or already_delete)

    def add_update_metadata(
        self, broker_ids: Iterable[int], partitions: Iterable[TopicPartition] = ()
    ) -> None:
        """UpdateMetadata to these brokers, with the current state of these partitions (and
        of those added before in this batch)."""
        context = self.context
        self._metadata_brokers.update(b for b in broker_ids if b >= 0)
        for tp in partitions:
            state = context.leadership.get(tp)
            if state is None:
                continue  # no leader yet: nothing to announce
            replicas = context.replicas(tp)
            offline = tuple(r for r in replicas if not context.is_replica_online(r, tp))
            if context.is_queued_for_deletion(tp.topic):
                state = attrs.evolve(state, leader=LEADER_DURING_DELETE)
            self._metadata[tp] = _MetadataEntry(tp, state, replicas, offline)

    # -- sending -----------------------------------------------------------------------

    def send(self) -> None:
        try:
            self._send_leader_and_isr()
            self._send_update_metadata()
            self._send_stop_replica()
        finally:
            self.clear()

    def _send_leader_and_isr(self) -> None:
        context = self.context
        for broker_id, entries in self._leader_and_isr.items():
            if broker_id not in context.broker_epochs:
                continue
            leaders = {e.state.leader for e in entries.values()}
            become_leader = sum(1 for e in entries.values() if e.state.leader == broker_id)
            log.info(
                "sending LeaderAndIsr to broker %d: %d become-leader and %d become-follower",
                broker_id,
                become_leader,
                len(entries) - become_leader,
            )
            request = LeaderAndIsrBuilder(
                self.controller_id,
                context.epoch,
                context.broker_epochs[broker_id],
                list(entries.values()),
                {t: context.topic_ids.get(t) for t in {e.tp.topic for e in entries.values()}},
                [self._live_leader(b) for b in sorted(leaders) if b in context.live_brokers],
            )
            callback = self._leader_and_isr_callback(broker_id)
            self.channels.send(
                broker_id,
                ControlRequest(LeaderAndIsrRequest, request.build, callback, "LeaderAndIsr"),
            )

    def _live_leader(self, broker_id: int) -> LeaderAndIsrLiveLeader:
        broker = self.context.live_brokers[broker_id]
        endpoint = broker.endpoint(self.channels.listener) or broker.endpoints[0]
        return LeaderAndIsrLiveLeader(broker_id, endpoint.host, endpoint.port)

    def _leader_and_isr_callback(self, broker_id: int) -> Callable[[Response, int], None] | None:
        handler = self.on_leader_and_isr
        if handler is None:
            return None

        def callback(response: Response, version: int) -> None:
            assert isinstance(response, LeaderAndIsrResponse)
            handler(broker_id, response, version)

        return callback

    def _send_update_metadata(self) -> None:
        context = self.context
        targets = sorted(self._metadata_brokers & context.live_or_shutting_down_ids)
        if not targets:
            return
        log.info(
            "sending UpdateMetadata to brokers %s for %d partitions", targets, len(self._metadata)
        )
        builder = UpdateMetadataBuilder(
            self.controller_id,
            context,
            list(self._metadata.values()),
        )
        for broker_id in targets:
            self.channels.send(
                broker_id,
                ControlRequest(
                    UpdateMetadataRequest,
                    builder.for_broker(context.broker_epochs[broker_id]),
                    None,
                    "UpdateMetadata",
                ),
            )

    def _send_stop_replica(self) -> None:
        context = self.context
        for broker_id, entries in self._stop_replica.items():
            if broker_id not in context.broker_epochs:
                continue
            deleting = sum(1 for e in entries.values() if e.delete)
            log.info(
                "sending StopReplica to broker %d for %d replicas (%d to delete)",
                broker_id,
                len(entries),
                deleting,
            )
            builder = StopReplicaBuilder(
                self.controller_id,
                context.epoch,
                context.broker_epochs[broker_id],
                list(entries.values()),
            )
            # Split as old versions need (one request per delete flag); one request otherwise.
            for delete_flag in (None, True, False):
                if not builder.has_requests(delete_flag):
                    continue
                self.channels.send(
                    broker_id,
                    ControlRequest(
                        StopReplicaRequest,
                        builder.builder(delete_flag),
                        self._stop_replica_callback(broker_id, entries),
                        "StopReplica",
                    ),
                )

    def _stop_replica_callback(
        self, broker_id: int, entries: Mapping[TopicPartition, _StopEntry]
    ) -> Callable[[Response, int], None] | None:
        handler = self.on_deletion_stop_replica
        if handler is None:
            return None
        context = self.context

        def callback(response: Response, version: int) -> None:
            assert isinstance(response, StopReplicaResponse)
            errors: dict[TopicPartition, int] = {}
            for error in response.partition_errors:
                tp = TopicPartition(error.topic_name, error.partition_index)
                entry = entries.get(tp)
                if (
                    entry is not None
                    and entry.delete
                    and tp.topic in context.topics_deletion_started
                ):
                    errors[tp] = error.error_code
            if errors:
                handler(broker_id, response.error_code, errors)

        return callback


# -- request bodies, per version ----------------------------------------------------------


S = TypeVar("S")
TS = TypeVar("TS")


def _by_topic(
    entries: Sequence[_LeaderAndIsrEntry | _MetadataEntry],
    states: Sequence[S],
    topic_ids: Mapping[str, uuid.UUID | None],
    topic_state: Callable[[str, uuid.UUID, list[S]], TS],
) -> list[TS]:
    """Partition states grouped into the topic states of v2+ (LeaderAndIsr) / v5+
    (UpdateMetadata), with each topic's id."""
    pairs = ((e.tp.topic, s) for e, s in zip(entries, states, strict=True))
    return [
        topic_state(t, topic_ids.get(t) or _ZERO_UUID, parts) for t, parts in group_by_topic(pairs)
    ]


@attrs.frozen
class LeaderAndIsrBuilder:
    controller_id: int
    controller_epoch: int
    broker_epoch: int
    entries: list[_LeaderAndIsrEntry]
    topic_ids: Mapping[str, Any]
    live_leaders: list[LeaderAndIsrLiveLeader]

    def build(self, version: int) -> LeaderAndIsrRequest:
        request = LeaderAndIsrRequest(
            controller_id=self.controller_id,
            controller_epoch=self.controller_epoch,
            broker_epoch=self.broker_epoch,
            live_leaders=self.live_leaders,
        )
        states = [self._state(e) for e in self.entries]
        if version < 2:
            request.ungrouped_partition_states = states
            return request
        request.topic_states = _by_topic(
            self.entries, states, self.topic_ids, LeaderAndIsrTopicState
        )
        return request

    def _state(self, entry: _LeaderAndIsrEntry) -> LeaderAndIsrPartitionState:
        state = entry.state
        return LeaderAndIsrPartitionState(
            topic_name=entry.tp.topic,
            partition_index=entry.tp.partition,
            controller_epoch=state.controller_epoch,
            leader=state.leader,
            leader_epoch=state.leader_epoch,
            isr=list(state.isr),
            partition_epoch=state.zk_version,
            replicas=list(entry.assignment.replicas),
            adding_replicas=list(entry.assignment.adding),
            removing_replicas=list(entry.assignment.removing),
            is_new=entry.is_new,
            leader_recovery_state=state.leader_recovery_state,
        )


class UpdateMetadataBuilder:
    def __init__(
        self, controller_id: int, context: ControllerContext, entries: list[_MetadataEntry]
    ) -> None:
        self.controller_id = controller_id
        self.controller_epoch = context.epoch
        self.entries = entries
        self.topic_ids = dict(context.topic_ids)
        self.brokers = sorted(context.live_brokers.values(), key=lambda b: b.id)

    def for_broker(self, broker_epoch: int) -> Callable[[int], UpdateMetadataRequest]:
        def build(version: int) -> UpdateMetadataRequest:
            return self.build(version, broker_epoch)

        return build

    def build(self, version: int, broker_epoch: int) -> UpdateMetadataRequest:
        request = UpdateMetadataRequest(
            controller_id=self.controller_id,
            controller_epoch=self.controller_epoch,
            broker_epoch=broker_epoch,
            live_brokers=[self._broker(b, version) for b in self.brokers],
        )
        states = [self._state(e) for e in self.entries]
        if version < 5:
            request.ungrouped_partition_states = states
            return request
        request.topic_states = _by_topic(
            self.entries, states, self.topic_ids, UpdateMetadataTopicState
        )
        return request

    @staticmethod
    def _state(entry: _MetadataEntry) -> UpdateMetadataPartitionState:
        state = entry.state
        return UpdateMetadataPartitionState(
            topic_name=entry.tp.topic,
            partition_index=entry.tp.partition,
            controller_epoch=state.controller_epoch,
            leader=state.leader,
            leader_epoch=state.leader_epoch,
            isr=list(state.isr),
            zk_version=state.zk_version,
            replicas=list(entry.replicas),
            offline_replicas=list(entry.offline),
        )

    @staticmethod
    def _broker(broker: BrokerRegistration, version: int) -> UpdateMetadataBroker:
        result = UpdateMetadataBroker(id=broker.id, rack=broker.rack)
        if version == 0:
            plaintext = next(
                (e for e in broker.endpoints if e.security_protocol == "PLAINTEXT"), None
            )
            if plaintext is not None:
                result.v0_host, result.v0_port = plaintext.host, plaintext.port
            return result
        result.endpoints = [
            UpdateMetadataEndpoint(
                port=e.port,
                host=e.host,
                listener=e.listener,
                security_protocol=SECURITY_PROTOCOL_IDS[e.security_protocol],
            )
            for e in broker.endpoints
        ]
        return result


@attrs.frozen
class StopReplicaBuilder:
    controller_id: int
    controller_epoch: int
    broker_epoch: int
    entries: list[_StopEntry]

    def has_requests(self, delete_flag: bool | None) -> bool:
        """`delete_flag` None: the one request of v3+; True/False: the split of v0-2.

        The version is only known at send time, so both forms are queued and each skips
        itself when its connection's version calls for the other.
        """
        if delete_flag is None:
            return bool(self.entries)
        return any(e.delete == delete_flag for e in self.entries)

    def builder(self, delete_flag: bool | None) -> Callable[[int], StopReplicaRequest | None]:
        def build(version: int) -> StopReplicaRequest | None:
            return self.build(version, delete_flag)

        return build

    def build(self, version: int, delete_flag: bool | None) -> StopReplicaRequest | None:
        if (version >= 3) != (delete_flag is None):
            return None  # the other form serves this version
        request = StopReplicaRequest(
            controller_id=self.controller_id,
            controller_epoch=self.controller_epoch,
            broker_epoch=self.broker_epoch,
        )
        if version >= 3:
            states = group_by_topic(
                (e.tp.topic, StopReplicaPartitionState(e.tp.partition, e.leader_epoch, e.delete))
                for e in self.entries
            )
            request.topic_states = [StopReplicaTopicState(t, parts) for t, parts in states]
            return request
        chosen = [e for e in self.entries if e.delete == delete_flag]
        request.delete_partitions = bool(delete_flag)
        if version == 0:
            request.ungrouped_partitions = [
                StopReplicaPartitionV0(e.tp.topic, e.tp.partition) for e in chosen
            ]
        else:
            indexes = group_by_topic((e.tp.topic, e.tp.partition) for e in chosen)
            request.topics = [StopReplicaTopicV1(t, p) for t, p in indexes]
        return request
