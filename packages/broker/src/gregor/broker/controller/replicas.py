"""The replica state machine: each replica of each partition on each broker.

    NonExistent -> New -> Online <-> Offline -> DeletionStarted -> DeletionSuccessful
                                                     |-> DeletionIneligible -> Offline/Online
    DeletionSuccessful -> NonExistent

- New: the replica is told (LeaderAndIsr, is_new) to start following.
- Online: the replica is told its partition's current state.
- Offline: StopReplica (keep the data); the replica leaves the ISR in ZooKeeper, and the
  other replicas are told the shrunk ISR (the leader too, when it was the leader: the
  partition then has no leader until the partition state machine elects one).
- DeletionStarted: StopReplica with delete.
- NonExistent: the replica leaves the assignment.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable

from gregor.broker.controller.batch import RequestBatch
from gregor.broker.controller.context import (
    ControllerContext,
    PartitionReplica,
    ReplicaState,
    valid_transitions,
)
from gregor.broker.controller.partitions import StateChangeFailedError
from gregor.broker.zk.client import ControllerMovedError, KafkaZkClient
from gregor.broker.zk.znodes import NO_LEADER, LeaderAndIsr, ReplicaAssignment, TopicPartition

log = logging.getLogger(__name__)


class ReplicaStateMachine:
    def __init__(self, context: ControllerContext, zk: KafkaZkClient, batch: RequestBatch) -> None:
        self.context = context
        self.zk = zk
        self.batch = batch

    async def startup(self) -> None:
        context = self.context
        for tp in context.all_partitions():
            for replica in context.replicas(tp):
                # A replica on a dead broker cannot take part in a deletion yet.
                context.replica_states[PartitionReplica(tp, replica)] = (
                    ReplicaState.ONLINE
                    if context.is_replica_online(replica, tp)
                    else ReplicaState.DELETION_INELIGIBLE
                )
        online, offline = context.online_and_offline_replicas()
        await self.handle_state_changes(online, ReplicaState.ONLINE)
        await self.handle_state_changes(offline, ReplicaState.OFFLINE)

    async def handle_state_changes(
        self, replicas: Iterable[PartitionReplica], target: ReplicaState
    ) -> None:
        by_broker: dict[int, list[PartitionReplica]] = defaultdict(list)
        for replica in sorted(set(replicas)):
            by_broker[replica.replica].append(replica)
        if not by_broker:
            return
        self.batch.new_batch()
        try:
            for broker_id, group in sorted(by_broker.items()):
                await self._change(broker_id, group, target)
        except ControllerMovedError:
            self.batch.clear()
            raise
        except Exception:
            log.exception("moving replicas to %s failed", target.value)
        self.batch.send()

    async def _change(
        self, broker_id: int, replicas: list[PartitionReplica], target: ReplicaState
    ) -> None:
        context = self.context
        valid = valid_transitions(
            context.replica_states, replicas, target, ReplicaState.NON_EXISTENT
        )
        if target == ReplicaState.NEW:
            self._to_new(broker_id, valid)
        elif target == ReplicaState.ONLINE:
            self._to_online(broker_id, valid)
        elif target == ReplicaState.OFFLINE:
            await self._to_offline(broker_id, valid)
        elif target == ReplicaState.DELETION_STARTED:
            for replica in valid:
                context.replica_states[replica] = target
                self.batch.add_stop_replica([broker_id], replica.tp, delete=True)
        elif target == ReplicaState.NON_EXISTENT:
            for replica in valid:
                context.set_assignment(
                    replica.tp, context.assignment(replica.tp).remove_replica(broker_id)
                )
                context.replica_states.pop(replica, None)
        else:  # the deletion bookkeeping states
            for replica in valid:
                context.replica_states[replica] = target

    def _to_new(self, broker_id: int, replicas: list[PartitionReplica]) -> None:
        context = self.context
        for replica in replicas:
            state = context.leadership.get(replica.tp)
            if state is not None and state.leader == broker_id:
                log.error("replica %d of %s cannot be new: it is the leader", broker_id, replica.tp)
                continue
            if state is not None:
                self.batch.add_leader_and_isr(
                    [broker_id], replica.tp, state, context.assignment(replica.tp), is_new=True
                )
            context.replica_states[replica] = ReplicaState.NEW

    def _to_online(self, broker_id: int, replicas: list[PartitionReplica]) -> None:
        context = self.context
        for replica in replicas:
            tp = replica.tp
            if context.replica_states[replica] == ReplicaState.NEW:
                assignment = context.assignment(tp)
                if broker_id not in assignment.replicas:
                    log.error("replica %d of %s is not in its assignment; adding it", broker_id, tp)
                    context.set_assignment(
                        tp,
                        ReplicaAssignment(
                            (*assignment.replicas, broker_id),
                            assignment.adding,
                            assignment.removing,
                        ),
                    )
            else:
                state = context.leadership.get(tp)
                if state is not None:
                    self.batch.add_leader_and_isr(
                        [broker_id], tp, state, context.assignment(tp), is_new=False
                    )
            context.replica_states[replica] = ReplicaState.ONLINE

    async def _to_offline(self, broker_id: int, replicas: list[PartitionReplica]) -> None:
        context = self.context
        for replica in replicas:
            self.batch.add_stop_replica([broker_id], replica.tp, delete=False)
        with_leadership = [r.tp for r in replicas if r.tp in context.leadership]
        updated = await self._remove_from_isr(broker_id, with_leadership)
        for tp, state in updated.items():
            log.info("%s is now %s after replica %d went offline", tp, state, broker_id)
            if not context.is_queued_for_deletion(tp.topic):
                others = [r for r in context.replicas(tp) if r != broker_id]
                self.batch.add_leader_and_isr(
                    others, tp, state, context.assignment(tp), is_new=False
                )
            context.replica_states[PartitionReplica(tp, broker_id)] = ReplicaState.OFFLINE
        for replica in replicas:
            if replica.tp not in context.leadership:
                self.batch.add_update_metadata(context.live_or_shutting_down_ids, [replica.tp])
                context.replica_states[replica] = ReplicaState.OFFLINE

    async def _remove_from_isr(
        self, broker_id: int, tps: list[TopicPartition]
    ) -> dict[TopicPartition, LeaderAndIsr]:
        """Take `broker_id` out of these partitions' ISRs (and leadership) in ZooKeeper."""
        context = self.context
        results: dict[TopicPartition, LeaderAndIsr] = {}
        remaining = tps
        while remaining:
            current = await self.zk.get_partition_states(remaining)
            updates: dict[TopicPartition, LeaderAndIsr] = {}
            for tp in remaining:
                state = current.get(tp)
                if state is None:
                    if not context.is_queued_for_deletion(tp.topic):
                        log.error(
                            "%s",
                            StateChangeFailedError(
                                f"cannot remove replica {broker_id} from the ISR of {tp}: "
                                "its state znode is missing"
                            ),
                        )
                    continue
                if state.controller_epoch > context.epoch:
                    log.error("%s was changed by a newer controller; leaving it", tp)
                    continue
                if broker_id not in state.isr:
                    context.leadership[tp] = state
                    results[tp] = state
                    continue
                leader = NO_LEADER if state.leader == broker_id else state.leader
                # The last in-sync replica stays in the ISR: it is the only one with all data.
                isr = state.isr if len(state.isr) == 1 else [r for r in state.isr if r != broker_id]
                updates[tp] = state.new_leader_and_isr(leader, isr, context.epoch)
            outcome = await self.zk.update_partition_states(updates, context.epoch_zk_version)
            for tp, written in outcome.finished.items():
                if isinstance(written, Exception):
                    log.error(
                        "removing replica %d from the ISR of %s failed: %r", broker_id, tp, written
                    )
                    continue
                context.leadership[tp] = written
                results[tp] = written
            remaining = outcome.retry
        return results
