"""Topic deletion, as Kafka's TopicDeletionManager does it.

A topic marked in /admin/delete_topics is queued. Its deletion starts when it is eligible
(no reassignment in progress, no replica on a dead broker): UpdateMetadata announces it (its
leaders become -2 so brokers stop serving it), every replica goes offline (StopReplica) and
then to DeletionStarted (StopReplica with delete). Each broker's answer moves its replicas to
DeletionSuccessful, or DeletionIneligible on error; a broker that dies does the latter too.
When every replica is deleted the topic's znodes go, and the marker with them. Ineligible
topics are retried when what blocked them clears (a broker returns, a reassignment ends).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from gregor.broker.controller.context import (
    ControllerContext,
    PartitionReplica,
    PartitionState,
    ReplicaState,
)
from gregor.broker.controller.partitions import PartitionStateMachine
from gregor.broker.controller.replicas import ReplicaStateMachine
from gregor.broker.zk.client import KafkaZkClient
from gregor.broker.zk.znodes import TopicPartition

log = logging.getLogger(__name__)


class TopicDeletionManager:
    def __init__(
        self,
        context: ControllerContext,
        zk: KafkaZkClient,
        partitions: PartitionStateMachine,
        replicas: ReplicaStateMachine,
        enabled: bool,
        send_metadata: Callable[[set[TopicPartition]], None],
        topic_deleted: Callable[[str], None],
    ) -> None:
        self.context = context
        self.zk = zk
        self.partitions = partitions
        self.replicas = replicas
        self.enabled = enabled
        self.send_metadata = send_metadata
        self.topic_deleted = topic_deleted  # e.g. stop watching the topic's znode

    async def init(self, queued: set[str], ineligible: set[str]) -> None:
        context = self.context
        if self.enabled:
            context.topics_to_delete |= queued
            context.topics_ineligible_for_deletion |= ineligible & context.topics_to_delete
        elif queued:
            log.info("removing deletion markers of %s: delete.topic.enable is false", queued)
            await self.zk.delete_topic_deletions(queued, context.epoch_zk_version)

    def is_queued(self, topic: str) -> bool:
        return self.enabled and self.context.is_queued_for_deletion(topic)

    async def try_deletion(self) -> None:
        if self.enabled:
            await self._resume()

    async def enqueue(self, topics: set[str]) -> None:
        if self.enabled:
            self.context.topics_to_delete |= topics
            await self._resume()

    async def resume_for(self, topics: Iterable[str]) -> None:
        if not self.enabled:
            return
        context = self.context
        resumable = set(topics) & context.topics_to_delete
        if resumable:
            context.topics_ineligible_for_deletion -= resumable
            await self._resume()

    async def fail_replica_deletion(self, replicas: Iterable[PartitionReplica]) -> None:
        if not self.enabled:
            return
        failed = [r for r in replicas if self.context.is_queued_for_deletion(r.topic)]
        if failed:
            topics = {r.topic for r in failed}
            log.info("deleting replicas %s failed: halting deletion of %s", failed, topics)
            await self.replicas.handle_state_changes(failed, ReplicaState.DELETION_INELIGIBLE)
            self.mark_ineligible(topics, "replica deletion failed")
            await self._resume()

    def mark_ineligible(self, topics: Iterable[str], reason: str) -> None:
        if not self.enabled:
            return
        halted = set(topics) & self.context.topics_to_delete
        if halted:
            self.context.topics_ineligible_for_deletion |= halted
            log.info("deletion of topics %s halted: %s", sorted(halted), reason)

    async def complete_replica_deletion(self, replicas: Iterable[PartitionReplica]) -> None:
        done = [r for r in replicas if self.is_queued(r.topic)]
        await self.replicas.handle_state_changes(done, ReplicaState.DELETION_SUCCESSFUL)
        await self._resume()

    # -- the work ----------------------------------------------------------------------

    def _eligible(self, topic: str) -> bool:
        context = self.context
        return (
            context.is_queued_for_deletion(topic)
            and not context.any_replica_in_state(topic, ReplicaState.DELETION_STARTED)
            and topic not in context.topics_ineligible_for_deletion
        )

    async def _resume(self) -> None:
        context = self.context
        retry: set[str] = set()
        start: set[str] = set()
        for topic in sorted(context.topics_to_delete):
            if context.all_replicas_in_state(topic, ReplicaState.DELETION_SUCCESSFUL):
                await self._complete(topic)
                log.info("deletion of topic %s completed", topic)
                continue
            if not context.any_replica_in_state(
                topic, ReplicaState.DELETION_STARTED
            ) and context.any_replica_in_state(topic, ReplicaState.DELETION_INELIGIBLE):
                retry.add(topic)
            if self._eligible(topic):
                start.add(topic)
        if retry:
            failed = {
                r
                for t in retry
                for r in context.replicas_in_state(t, ReplicaState.DELETION_INELIGIBLE)
            }
            await self.replicas.handle_state_changes(failed, ReplicaState.OFFLINE)
        if start:
            log.info("deletion of topics %s (re)started", sorted(start))
            await self._start(start)

    async def _complete(self, topic: str) -> None:
        context = self.context
        self.topic_deleted(topic)
        deleted = context.replicas_in_state(topic, ReplicaState.DELETION_SUCCESSFUL)
        await self.replicas.handle_state_changes(deleted, ReplicaState.NON_EXISTENT)
        version = context.epoch_zk_version
        await self.zk.delete_topic_znode(topic, version)
        await self.zk.delete_topic_configs([topic], version)
        await self.zk.delete_topic_deletions([topic], version)
        for tp in context.partitions_for_topic(topic):
            context.partition_states.pop(tp, None)
        context.remove_topic(topic)

    async def _start(self, topics: set[str]) -> None:
        context = self.context
        unseen = topics - context.topics_deletion_started
        if unseen:
            partitions = {tp for t in unseen for tp in context.partitions_for_topic(t)}
            await self.partitions.handle_state_changes(partitions, PartitionState.OFFLINE)
            await self.partitions.handle_state_changes(partitions, PartitionState.NON_EXISTENT)
            context.topics_deletion_started |= unseen
        # Brokers learn the topic is going away (leader -2) and stop serving it.
        self.send_metadata({tp for t in topics for tp in context.partitions_for_topic(t)})
        dead: list[PartitionReplica] = []
        retry: list[PartitionReplica] = []
        blocked: set[str] = set()
        for topic in topics:
            deleted = context.replicas_in_state(topic, ReplicaState.DELETION_SUCCESSFUL)
            for replica in context.replicas_for_topic(topic):
                if not context.is_replica_online(replica.replica, replica.tp):
                    dead.append(replica)
                    blocked.add(topic)
                elif replica not in deleted:
                    retry.append(replica)
        await self.replicas.handle_state_changes(dead, ReplicaState.DELETION_INELIGIBLE)
        await self.replicas.handle_state_changes(retry, ReplicaState.OFFLINE)
        await self.replicas.handle_state_changes(retry, ReplicaState.DELETION_STARTED)
        if blocked:
            self.mark_ineligible(blocked, "replicas are offline")
