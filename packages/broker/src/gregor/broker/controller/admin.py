"""Topic administration through ZooKeeper, as Kafka's AdminZkClient does it: validate, then
write the znodes the controller acts on.

- Creating a topic writes its config (/config/topics/T) and then its assignment
  (/brokers/topics/T, with a new topic id); the controller sees the new topic and elects
  leaders.
- Deleting a topic creates /admin/delete_topics/T; the controller does the rest.
- Adding partitions rewrites /brokers/topics/T with the new partitions appended.

Every failure raises the Kafka error a broker answers with, and Kafka's message.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence

import attrs

from gregor.broker.controller.assignment import AssignmentError, BrokerRack, assign_replicas
from gregor.broker.topic_names import (
    has_collision_chars,
    unify_collision_chars,
    validate_topic_name,
)
from gregor.broker.zk import znodes
from gregor.broker.zk.client import KafkaZkClient, TopicExistsError
from gregor.broker.zk.znodes import ReplicaAssignment
from gregor.protocol.errors import (
    BrokerNotAvailableError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidRequestError,
    InvalidTopicError,
    ReassignmentInProgressError,
    TopicAlreadyExistsError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
)
from gregor.storage.config import LogConfig

log = logging.getLogger(__name__)

NO_NUM_PARTITIONS = -1
NO_REPLICATION_FACTOR = -1


@attrs.frozen
class NewTopic:
    name: str
    num_partitions: int = NO_NUM_PARTITIONS
    replication_factor: int = NO_REPLICATION_FACTOR
    assignments: Mapping[int, Sequence[int]] = attrs.field(factory=dict)
    configs: Mapping[str, str | None] = attrs.field(factory=dict)


@attrs.frozen
class CreatedTopic:
    name: str
    topic_id: uuid.UUID | None
    assignment: dict[int, list[int]]
    configs: dict[str, str]  # the topic's overrides

    @property
    def num_partitions(self) -> int:
        return len(self.assignment)

    @property
    def replication_factor(self) -> int:
        return len(self.assignment[0]) if self.assignment else 0


class TopicAdmin:
    def __init__(
        self,
        zk: KafkaZkClient,
        default_partitions: int,
        default_replication_factor: int,
        log_defaults: LogConfig,
    ) -> None:
        self.zk = zk
        self.default_partitions = default_partitions
        self.default_replication_factor = default_replication_factor
        self.log_defaults = log_defaults

    async def live_brokers(self) -> list[BrokerRack]:
        brokers = await self.zk.get_all_brokers()
        return [BrokerRack(i, reg.rack) for i, (reg, _) in sorted(brokers.items())]

    # -- creation ------------------------------------------------------------------------

    async def create_topic(self, topic: NewTopic, validate_only: bool) -> CreatedTopic:
        configs = self._validated_configs(topic.configs)
        if topic.assignments and (
            topic.num_partitions != NO_NUM_PARTITIONS
            or topic.replication_factor != NO_REPLICATION_FACTOR
        ):
            raise InvalidRequestError(
                "Both numPartitions or replicationFactor and replicasAssignments were set. "
                "Both cannot be used at the same time."
            )
        if topic.assignments:
            assignment = {p: list(r) for p, r in topic.assignments.items()}
        else:
            partitions = (
                self.default_partitions
                if topic.num_partitions == NO_NUM_PARTITIONS
                else topic.num_partitions
            )
            factor = (
                self.default_replication_factor
                if topic.replication_factor == NO_REPLICATION_FACTOR
                else topic.replication_factor
            )
            try:
                assignment = assign_replicas(await self.live_brokers(), partitions, factor)
            except AssignmentError as exc:
                raise UnknownServerError(str(exc)) from exc
        await self._validate_creation(topic.name, assignment)
        created = CreatedTopic(topic.name, None, assignment, configs)
        if validate_only:
            return created
        topic_id = znodes.new_topic_id()
        # The config first: when the controller sees the topic, its config is in place.
        await self.zk.set_or_create_entity_configs(znodes.CONFIG_TOPICS, topic.name, configs)
        try:
            await self.zk.create_topic_assignment(topic.name, topic_id, assignment)
        except TopicExistsError as exc:
            raise TopicAlreadyExistsError(str(exc)) from None
        log.info(
            "created topic %s with assignment %s and config %s", topic.name, assignment, configs
        )
        return attrs.evolve(created, topic_id=topic_id)

    def _validated_configs(self, configs: Mapping[str, str | None]) -> dict[str, str]:
        nulls = sorted(k for k, v in configs.items() if v is None)
        if nulls:
            raise InvalidConfigError(
                f"Null value not supported for topic configs: {','.join(nulls)}"
            )
        given = {k: v for k, v in configs.items() if v is not None}
        self.validate_topic_config(given)
        return given

    def validate_topic_config(self, configs: Mapping[str, str]) -> LogConfig:
        """The log config these overrides make; InvalidConfigError naming the key otherwise."""
        return LogConfig.from_properties(configs, defaults=self.log_defaults)

    async def _validate_creation(self, name: str, assignment: Mapping[int, Sequence[int]]) -> None:
        validate_topic_name(name)
        if await self.zk.is_topic_marked_for_deletion(name):
            raise TopicAlreadyExistsError(f"Topic '{name}' is marked for deletion.")
        if await self.zk.topic_exists(name):
            raise TopicAlreadyExistsError(f"Topic '{name}' already exists.")
        if has_collision_chars(name):
            unified = unify_collision_chars(name)
            colliding = sorted(
                t for t in await self.zk.get_all_topics() if unify_collision_chars(t) == unified
            )
            if name in colliding:
                raise TopicAlreadyExistsError(f"Topic '{name}' already exists.")
            if colliding:
                raise InvalidTopicError(
                    f"Topic '{name}' collides with existing topics: {', '.join(colliding)}"
                )
        if len({len(r) for r in assignment.values()}) != 1:
            raise InvalidReplicaAssignmentError(
                "All partitions should have the same number of replicas"
            )
        for replicas in assignment.values():
            if len(set(replicas)) != len(replicas):
                raise InvalidReplicaAssignmentError(
                    f"Duplicate replica assignment found: {dict(assignment)}"
                )
        if sorted(assignment) != list(range(len(assignment))):
            raise InvalidReplicaAssignmentError(
                "partitions should be a consecutive 0-based integer sequence"
            )

    # -- deletion ------------------------------------------------------------------------

    async def delete_topic(self, name: str) -> None:
        """Mark a topic for deletion (fine if it is marked already)."""
        if not await self.zk.topic_exists(name):
            raise UnknownTopicOrPartitionError(f"Topic `{name}` to delete does not exist")
        try:
            await self.zk.create_delete_topic_path(name)
        except TopicExistsError:
            pass  # already being deleted: the caller waits for it like for a new request

    # -- partitions ----------------------------------------------------------------------

    async def create_partitions(
        self,
        name: str,
        count: int,
        assignments: Sequence[Sequence[int]] | None,
        validate_only: bool,
    ) -> dict[int, list[int]]:
        """Grow a topic to `count` partitions; the new partitions' assignments."""
        found = (await self.zk.get_topic_assignments([name])).get(name)
        if found is None or not found.partitions:
            raise UnknownTopicOrPartitionError(f"The topic '{name}' does not exist.")
        existing = dict(found.partitions)
        if any(a.is_being_reassigned for a in existing.values()):
            raise ReassignmentInProgressError(
                f"A partition reassignment is in progress for the topic '{name}'."
            )
        current = len(existing)
        if count < current:
            raise InvalidPartitionsError(
                f"Topic currently has {current} partitions, which is higher than the requested "
                f"{count}."
            )
        if count == current:
            raise InvalidPartitionsError(f"Topic already has {current} partitions.")
        if 0 not in existing:
            raise UnknownServerError(
                f"Unexpected existing replica assignment for topic '{name}', partition id 0 "
                f"is missing. Assignment: {existing}"
            )
        brokers = await self.live_brokers()
        broker_ids = [b.id for b in brokers]
        factor = len(existing[0].replicas)
        added = count - current
        if assignments is not None:
            unknown = sorted({b for r in assignments for b in r} - set(broker_ids))
            if unknown:
                raise InvalidReplicaAssignmentError(
                    f"Unknown broker(s) in replica assignment: {', '.join(map(str, unknown))}."
                )
            if len(assignments) != added:
                raise InvalidReplicaAssignmentError(
                    f"Increasing the number of partitions by {added} but {len(assignments)} "
                    "assignments provided."
                )
            new = {current + i: list(r) for i, r in enumerate(assignments)}
            _validate_new_assignment(new, factor, set(broker_ids))
        else:
            # Continue where partition 0's leader sits, as Kafka does.
            first = existing[0].replicas[0]
            start = next((i for i, b in enumerate(broker_ids) if b >= first), 0)
            try:
                new = assign_replicas(brokers, added, factor, start, current)
            except AssignmentError as exc:
                raise UnknownServerError(str(exc)) from exc
        if not validate_only:
            combined = {**existing, **{p: ReplicaAssignment(tuple(r)) for p, r in new.items()}}
            await self.zk.set_topic_assignment(name, found.topic_id, combined)
            log.info("added partitions to %s: %s", name, new)
        return new


def _validate_new_assignment(
    assignment: Mapping[int, Sequence[int]], factor: int, brokers: set[int]
) -> None:
    for partition, replicas in sorted(assignment.items()):
        if not replicas:
            raise InvalidReplicaAssignmentError(
                f"Cannot have replication factor of 0 for partition id {partition}."
            )
        if len(set(replicas)) != len(replicas):
            raise InvalidReplicaAssignmentError(
                "Duplicate brokers not allowed in replica assignment: "
                f"{', '.join(map(str, replicas))} for partition id {partition}."
            )
        if not set(replicas) <= brokers:
            raise BrokerNotAvailableError(
                f"Some brokers specified for partition id {partition} are not available. "
                f"Specified brokers: {', '.join(map(str, replicas))}, available brokers: "
                f"{', '.join(map(str, sorted(brokers)))}."
            )
    bad = {p: len(r) for p, r in sorted(assignment.items()) if len(r) != factor}
    if bad:
        raise InvalidReplicaAssignmentError(
            "Inconsistent replication factor between partitions, partition 0 has "
            f"{factor} while partitions [{', '.join(map(str, bad))}] have replication "
            f"factors [{', '.join(map(str, bad.values()))}], respectively."
        )
