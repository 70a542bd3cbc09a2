"""ReplicatedTopic: a topic's partitions led by this broker, as a coordinator's log
(`gregor.broker.coordinator.topic_log.TopicLog`): appends to the leader's log at once, and
a wait in the produce purgatory until the high watermark passes them (acks=all)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol

from gregor.broker.coordinator.topic_log import FailedWrite, Write
from gregor.broker.partition import Partition
from gregor.broker.purgatory import Purgatory
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.storage.log import Log
from gregor.storage.producer_state import AppendOrigin

Key = tuple[str, int]  # (topic, partition), the purgatory's key


class LeaderLookup(Protocol):
    """The replica lookup: the partitions hosted here, and the purgatory acks=all waits in."""

    @property
    def produce_purgatory(self) -> Purgatory[Key]: ...
    def partition(self, topic: str, partition: int) -> Partition | None: ...
    def partition_or_error(self, topic: str, partition: int) -> Partition: ...


class ReplicaWrite:
    """An append to a leader's log, waiting in the produce purgatory for its high watermark."""

    def __init__(
        self, purgatory: Purgatory[Key], partition: Partition, base: int, end: int, acks_all: bool
    ) -> None:
        self.purgatory = purgatory
        self.partition = partition
        self.error = ErrorCode.NONE
        self.base_offset = base
        self._end = end
        # acks=0: nothing to wait for.
        self._result: int | None = None if acks_all else ErrorCode.NONE

    def _check(self, _changed: Collection[Key]) -> bool:
        done, error = self.partition.enough_replicas_reached(self._end)
        if done:
            self._result = error
        return done

    async def replicated(self, timeout_s: float) -> int:
        if self._result is None:
            await self.purgatory.wait([self.partition.key], self._check, timeout_s)
        return ErrorCode.REQUEST_TIMED_OUT if self._result is None else self._result


class ReplicatedTopic:
    def __init__(self, replicas: LeaderLookup, topic: str) -> None:
        self.replicas = replicas
        self.topic = topic

    def append(self, partition: int, records: bytes, *, wait: bool = True) -> Write:
        try:
            target = self.replicas.partition_or_error(self.topic, partition)
            # As the coordinator: transactional offsets are checked by epoch, not sequence.
            info = target.append_as_leader(records, -1 if wait else 0, AppendOrigin.COORDINATOR)
        except KafkaError as exc:
            return FailedWrite(exc.code)
        purgatory = self.replicas.produce_purgatory
        return ReplicaWrite(purgatory, target, info.first_offset, info.last_offset + 1, wait)

    def leader_log(self, partition: int) -> Log | None:
        found = self.replicas.partition(self.topic, partition)
        if found is None or not found.is_leader:
            return None
        return found.log
