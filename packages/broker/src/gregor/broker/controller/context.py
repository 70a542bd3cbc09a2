"""What the active controller knows: live brokers, topics, assignments, leadership, and the
state of every partition and replica in its state machines.

Filled from ZooKeeper when a broker becomes controller and kept current by the controller's
events; ZooKeeper stays the source of truth (every change is written there first).
"""

from __future__ import annotations

import enum
import logging
import uuid
from collections.abc import Iterable, Mapping
from typing import NamedTuple, TypeVar

from gregor.broker.zk.znodes import (
    EPOCH_DURING_DELETE,
    NO_EPOCH,
    BrokerRegistration,
    LeaderAndIsr,
    ReplicaAssignment,
    TopicPartition,
)

log = logging.getLogger(__name__)


class PartitionState(enum.Enum):
    """A partition's state in the controller's partition state machine."""

    NEW = "NewPartition"  # replicas assigned, no leader yet
    ONLINE = "OnlinePartition"  # has a live leader
    OFFLINE = "OfflinePartition"  # its leader died
    NON_EXISTENT = "NonExistentPartition"  # never created, or deleted

    @property
    def valid_previous(self) -> frozenset[PartitionState]:
        return _PARTITION_TRANSITIONS[self]


_PARTITION_TRANSITIONS = {
    PartitionState.NEW: frozenset({PartitionState.NON_EXISTENT}),
    PartitionState.ONLINE: frozenset(
        {PartitionState.NEW, PartitionState.ONLINE, PartitionState.OFFLINE}
    ),
    PartitionState.OFFLINE: frozenset(
        {PartitionState.NEW, PartitionState.ONLINE, PartitionState.OFFLINE}
    ),
    PartitionState.NON_EXISTENT: frozenset({PartitionState.OFFLINE}),
}


class ReplicaState(enum.Enum):
    """A replica's state in the controller's replica state machine."""

    NEW = "NewReplica"
    ONLINE = "OnlineReplica"
    OFFLINE = "OfflineReplica"
    DELETION_STARTED = "ReplicaDeletionStarted"
    DELETION_SUCCESSFUL = "ReplicaDeletionSuccessful"
    DELETION_INELIGIBLE = "ReplicaDeletionIneligible"
    NON_EXISTENT = "NonExistentReplica"

    @property
    def valid_previous(self) -> frozenset[ReplicaState]:
        return _REPLICA_TRANSITIONS[self]


_R = ReplicaState
_REPLICA_TRANSITIONS = {
    _R.NEW: frozenset({_R.NON_EXISTENT}),
    _R.ONLINE: frozenset({_R.NEW, _R.ONLINE, _R.OFFLINE, _R.DELETION_INELIGIBLE}),
    _R.OFFLINE: frozenset({_R.NEW, _R.ONLINE, _R.OFFLINE, _R.DELETION_INELIGIBLE}),
    _R.DELETION_STARTED: frozenset({_R.OFFLINE}),
    _R.DELETION_SUCCESSFUL: frozenset({_R.DELETION_STARTED}),
    _R.DELETION_INELIGIBLE: frozenset({_R.OFFLINE, _R.DELETION_STARTED}),
    _R.NON_EXISTENT: frozenset({_R.DELETION_SUCCESSFUL}),
}


K = TypeVar("K")
S = TypeVar("S", PartitionState, ReplicaState)


def valid_transitions(states: dict[K, S], items: Iterable[K], target: S, initial: S) -> list[K]:
    """The items that may move to `target` from their current state (unknown ones start in
    `initial`); the others are logged and left out, as Kafka's state machines do."""
    valid = []
    for item in items:
        current = states.setdefault(item, initial)
        if current in target.valid_previous:
            valid.append(item)
        else:
            log.error("%s cannot move from %s to %s", item, current.value, target.value)
    return valid


class PartitionReplica(NamedTuple):
    tp: TopicPartition
    replica: int

    @property
    def topic(self) -> str:
        return self.tp.topic


EMPTY_ASSIGNMENT = ReplicaAssignment(())


class ControllerContext:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Forget everything (the controller resigned)."""
        self.epoch = 0
        self.epoch_zk_version = 0
        self.live_brokers: dict[int, BrokerRegistration] = {}
        self.broker_epochs: dict[int, int] = {}
        self.shutting_down: set[int] = set()
        self.all_topics: set[str] = set()
        self.topic_ids: dict[str, uuid.UUID] = {}
        self.topic_names: dict[uuid.UUID, str] = {}
        self.assignments: dict[str, dict[int, ReplicaAssignment]] = {}
        self.leadership: dict[TopicPartition, LeaderAndIsr] = {}
        self.being_reassigned: set[TopicPartition] = set()
        self.partition_states: dict[TopicPartition, PartitionState] = {}
        self.replica_states: dict[PartitionReplica, ReplicaState] = {}
        self.offline_dirs: dict[int, set[TopicPartition]] = {}
        self.topics_to_delete: set[str] = set()
        self.topics_deletion_started: set[str] = set()
        self.topics_ineligible_for_deletion: set[str] = set()

    # -- brokers -----------------------------------------------------------------------

    def set_live_brokers(self, brokers: Mapping[int, tuple[BrokerRegistration, int]]) -> None:
        self.live_brokers.clear()
        self.broker_epochs.clear()
        self.add_live_brokers(brokers)

    def add_live_brokers(self, brokers: Mapping[int, tuple[BrokerRegistration, int]]) -> None:
        for broker_id, (broker, epoch) in brokers.items():
            self.live_brokers[broker_id] = broker
            self.broker_epochs[broker_id] = epoch

    def remove_live_brokers(self, broker_ids: Iterable[int]) -> None:
        for broker_id in broker_ids:
            self.live_brokers.pop(broker_id, None)
            self.broker_epochs.pop(broker_id, None)

    @property
    def live_or_shutting_down_ids(self) -> set[int]:
        return set(self.broker_epochs)

    @property
    def live_broker_ids(self) -> set[int]:
        return set(self.broker_epochs) - self.shutting_down

    def is_live_broker(self, broker_id: int) -> bool:
        return broker_id in self.broker_epochs and broker_id not in self.shutting_down

    def is_replica_online(
        self, broker_id: int, tp: TopicPartition, include_shutting_down: bool = False
    ) -> bool:
        online = (
            broker_id in self.broker_epochs
            if include_shutting_down
            else self.is_live_broker(broker_id)
        )
        return online and tp not in self.offline_dirs.get(broker_id, ())

    # -- topics and assignments --------------------------------------------------------

    def add_topic_id(self, topic: str, topic_id: uuid.UUID) -> None:
        self.topic_ids[topic] = topic_id
        self.topic_names[topic_id] = topic

    def replicas(self, tp: TopicPartition) -> tuple[int, ...]:
        return self.assignment(tp).replicas

    def assignment(self, tp: TopicPartition) -> ReplicaAssignment:
        return self.assignments.get(tp.topic, {}).get(tp.partition, EMPTY_ASSIGNMENT)

    def set_assignment(self, tp: TopicPartition, assignment: ReplicaAssignment) -> None:
        self.assignments.setdefault(tp.topic, {})[tp.partition] = assignment

    def topic_assignment(self, topic: str) -> dict[int, ReplicaAssignment]:
        return dict(self.assignments.get(topic, {}))

    def all_partitions(self) -> set[TopicPartition]:
        return {
            TopicPartition(topic, p) for topic, parts in self.assignments.items() for p in parts
        }

    def partitions_for_topic(self, topic: str) -> set[TopicPartition]:
        return {TopicPartition(topic, p) for p in self.assignments.get(topic, {})}

    def partitions_on_broker(self, broker_id: int) -> set[TopicPartition]:
        return {
            TopicPartition(topic, p)
            for topic, parts in self.assignments.items()
            for p, a in parts.items()
            if broker_id in a.replicas
        }

    def replicas_on_brokers(self, broker_ids: Iterable[int]) -> set[PartitionReplica]:
        wanted = set(broker_ids)
        return {
            PartitionReplica(TopicPartition(topic, p), r)
            for topic, parts in self.assignments.items()
            for p, a in parts.items()
            for r in a.replicas
            if r in wanted
        }

    def replicas_for_topic(self, topic: str) -> set[PartitionReplica]:
        return {
            PartitionReplica(TopicPartition(topic, p), r)
            for p, a in self.assignments.get(topic, {}).items()
            for r in a.replicas
        }

    def replicas_for_partitions(
        self, partitions: Iterable[TopicPartition]
    ) -> set[PartitionReplica]:
        return {PartitionReplica(tp, r) for tp in partitions for r in self.replicas(tp)}

    def online_and_offline_replicas(self) -> tuple[set[PartitionReplica], set[PartitionReplica]]:
        online: set[PartitionReplica] = set()
        offline: set[PartitionReplica] = set()
        for tp in self.all_partitions():
            for r in self.replicas(tp):
                (online if self.is_replica_online(r, tp) else offline).add(PartitionReplica(tp, r))
        return online, offline

    def remove_topic(self, topic: str) -> None:
        self.topics_to_delete.discard(topic)
        self.topics_deletion_started.discard(topic)
        self.all_topics.discard(topic)
        topic_id = self.topic_ids.pop(topic, None)
        if topic_id is not None:
            self.topic_names.pop(topic_id, None)
        for p in self.assignments.pop(topic, {}):
            self.leadership.pop(TopicPartition(topic, p), None)

    # -- deletion ----------------------------------------------------------------------

    def is_queued_for_deletion(self, topic: str) -> bool:
        return topic in self.topics_to_delete

    def leader_epoch(self, tp: TopicPartition) -> int:
        """The epoch StopReplica carries: a sentinel for topics being deleted."""
        if tp.topic in self.topics_to_delete:
            return EPOCH_DURING_DELETE
        state = self.leadership.get(tp)
        return state.leader_epoch if state is not None else NO_EPOCH

    def replicas_in_state(self, topic: str, state: ReplicaState) -> set[PartitionReplica]:
        return {r for r in self.replicas_for_topic(topic) if self.replica_states.get(r) == state}

    def all_replicas_in_state(self, topic: str, state: ReplicaState) -> bool:
        return all(self.replica_states.get(r) == state for r in self.replicas_for_topic(topic))

    def any_replica_in_state(self, topic: str, state: ReplicaState) -> bool:
        return any(self.replica_states.get(r) == state for r in self.replicas_for_topic(topic))

    # -- leadership and states ---------------------------------------------------------

    def partitions_in_states(
        self, states: set[PartitionState], topic: str | None = None
    ) -> set[TopicPartition]:
        return {
            tp
            for tp, s in self.partition_states.items()
            if s in states and (topic is None or tp.topic == topic)
        }

    def partitions_with_leaders(self) -> set[TopicPartition]:
        return {tp for tp in self.leadership if tp.topic not in self.topics_to_delete}

    def partitions_with_offline_leader(self) -> set[TopicPartition]:
        return {
            tp
            for tp, state in self.leadership.items()
            if not self.is_replica_online(state.leader, tp)
            and tp.topic not in self.topics_to_delete
        }

    def partition_leaders_on_broker(self, broker_id: int) -> set[TopicPartition]:
        return {
            tp
            for tp, state in self.leadership.items()
            if state.leader == broker_id
            and tp.topic not in self.topics_to_delete
            and len(self.replicas(tp)) > 1
        }

    def offline_partition_count(self) -> int:
        return sum(
            1
            for tp, s in self.partition_states.items()
            if s == PartitionState.OFFLINE and tp.topic not in self.topics_deletion_started
        )

    def preferred_replica_imbalance_count(self) -> int:
        count = 0
        for tp, state in self.leadership.items():
            assignment = self.assignment(tp)
            if tp.topic in self.topics_to_delete or not assignment.replicas:
                continue
            preferred = assignment.replicas[0]
            if assignment.is_being_reassigned and preferred in assignment.adding:
                # A reassigning partition counts once its new preferred replica is in sync.
                count += preferred in state.isr
            else:
                count += state.leader != preferred
        return count
