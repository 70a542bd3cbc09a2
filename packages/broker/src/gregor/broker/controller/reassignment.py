"""Partition reassignment, through the AlterPartitionReassignments API or the
/admin/reassign_partitions znode.

With RS the replicas, ORS the original and TRS the target replicas, AR = TRS - ORS the
replicas being added and RR = ORS - TRS those being removed:

- Update: ZooKeeper first, then memory: RS = TRS + ORS, with AR and RR (so a new controller
  can resume). Replicas a superseded reassignment was adding and this one does not want are
  stopped.
- While the target replicas are not all in the ISR: bump the leader epoch, send LeaderAndIsr
  (with AR and RR) to ORS and AR, and start AR as new replicas. Completion is noticed from
  the partition's state znode (watched) or an ISR change notification.
- Once TRS is in the ISR: AR go online; RS = TRS in memory; leadership moves to a target
  replica if the leader is not one (otherwise the leader epoch is bumped); RR go offline and
  are deleted; ZooKeeper gets RS = TRS; the partition leaves /admin/reassign_partitions;
  every broker gets UpdateMetadata.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from gregor.broker.controller.context import PartitionReplica, PartitionState, ReplicaState
from gregor.broker.controller.election import Strategy
from gregor.broker.controller.events import (
    NONE,
    NOT_CONTROLLER,
    ApiError,
    PartitionReassignmentIsrChange,
    Reply,
)
from gregor.broker.controller.partitions import StateChangeFailedError
from gregor.broker.zk import znodes
from gregor.broker.zk.client import ControllerMovedError
from gregor.broker.zk.znodes import LeaderAndIsr, ReplicaAssignment, TopicPartition
from gregor.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from gregor.broker.controller.core import ControllerCore

log = logging.getLogger(__name__)


class Reassignments:
    def __init__(self, controller: ControllerCore) -> None:
        self.controller = controller
        self._watched: set[TopicPartition] = set()

    def unwatch_all(self) -> None:
        for tp in list(self._watched):
            self._unwatch(tp)

    def _watch(self, tp: TopicPartition) -> None:
        c = self.controller
        c.zk.set_node_handler(
            znodes.partition_state_path(tp), lambda: c.put(PartitionReassignmentIsrChange(tp))
        )
        self._watched.add(tp)

    def _unwatch(self, tp: TopicPartition) -> None:
        self._watched.discard(tp)
        self.controller.zk.set_node_handler(znodes.partition_state_path(tp), None)

    # -- entry points --------------------------------------------------------------------

    async def initialize(self) -> None:
        """On failover: new znode reassignments, then those the API had started."""
        resumed = await self.process_zk_reassignment()
        await self.maybe_resume(lambda tp, _a: tp not in resumed)

    async def maybe_resume(
        self, should_resume: Callable[[TopicPartition, ReplicaAssignment], bool]
    ) -> None:
        context = self.controller.context
        for tp in sorted(context.being_reassigned):
            assignment = context.assignment(tp)
            if should_resume(tp, assignment):
                await self.on_reassignment(tp, assignment)

    async def process_zk_reassignment(self) -> set[TopicPartition]:
        """Start what /admin/reassign_partitions asks for; the partitions started."""
        c = self.controller
        if not await c.zk.exists(znodes.REASSIGN_PARTITIONS, watch=True):
            return set()
        results: dict[TopicPartition, ApiError] = {}
        wanted: dict[TopicPartition, ReplicaAssignment] = {}
        for tp, target in (await c.zk.get_partition_reassignment()).items():
            built = self._build(tp, list(target))
            if built is None:
                results[tp] = ApiError(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS)
            else:
                wanted[tp] = built
        results.update(await self._trigger(wanted))
        failed = {tp for tp, error in results.items() if not error.is_success}
        if failed:
            log.warning("reassignments through ZooKeeper failed: %s", results)
            await self._remove_from_zk(lambda tp, _replicas: tp in failed)
        return {tp for tp, error in results.items() if error.is_success}

    async def process_api_reassignment(
        self,
        reassignments: dict[TopicPartition, list[int] | None],
        reply: Reply[dict[TopicPartition, ApiError] | ApiError],
    ) -> None:
        c = self.controller
        if not c.is_active:
            reply.set(NOT_CONTROLLER)
            return
        try:
            results: dict[TopicPartition, ApiError] = {}
            wanted: dict[TopicPartition, ReplicaAssignment] = {}
            for tp, target in reassignments.items():
                error = self._validate(tp, target) if target is not None else None
                if error is not None:
                    results[tp] = error
                    continue
                built = self._build(tp, target)
                if built is None:
                    results[tp] = ApiError(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS)
                else:
                    wanted[tp] = built
            # The latest reassignment wins over one made through the znode.
            await self._remove_from_zk(lambda tp, _replicas: tp in wanted)
            results.update(await self._trigger(wanted))
        except BaseException:
            reply.set(NOT_CONTROLLER)
            raise
        reply.set(results)

    def process_list(
        self,
        partitions: set[TopicPartition] | None,
        reply: Reply[dict[TopicPartition, ReplicaAssignment] | ApiError],
    ) -> None:
        c = self.controller
        if not c.is_active:
            reply.set(NOT_CONTROLLER)
            return
        context = c.context
        wanted = context.being_reassigned if partitions is None else partitions
        reply.set(
            {
                tp: context.assignment(tp)
                for tp in wanted
                if context.assignment(tp).is_being_reassigned
            }
        )

    async def process_isr_change(self, tp: TopicPartition) -> None:
        if tp in self.controller.context.being_reassigned:
            await self.maybe_complete(tp)

    async def maybe_complete(self, tp: TopicPartition) -> None:
        assignment = self.controller.context.assignment(tp)
        if await self._is_complete(tp, assignment):
            log.info("the target replicas %s of %s are in sync", assignment.target_replicas, tp)
            await self.on_reassignment(tp, assignment)

    # -- validation ----------------------------------------------------------------------

    def _validate(self, tp: TopicPartition, replicas: Sequence[int]) -> ApiError | None:
        context = self.controller.context
        invalid = ErrorCode.INVALID_REPLICA_ASSIGNMENT
        if not replicas:
            return ApiError(invalid, "Empty replica list specified in partition reassignment.")
        if len(set(replicas)) != len(replicas):
            return ApiError(
                invalid, f"Duplicate replica ids in partition reassignment replica list: {replicas}"
            )
        if any(r < 0 for r in replicas):
            return ApiError(invalid, f"Invalid broker id in replica list: {replicas}")
        adding = context.assignment(tp).reassign_to(replicas).adding
        if not set(adding) <= context.live_broker_ids:
            return ApiError(
                invalid,
                f"Replica assignment has brokers that are not alive. Replica list: "
                f"{list(adding)}, live broker list: {sorted(context.live_broker_ids)}",
            )
        return None

    def _build(self, tp: TopicPartition, target: Sequence[int] | None) -> ReplicaAssignment | None:
        """The new assignment; a missing target cancels the reassignment in progress."""
        current = self.controller.context.assignment(tp)
        if current.is_being_reassigned:
            return current.reassign_to(target if target is not None else current.origin_replicas)
        return None if target is None else current.reassign_to(target)

    async def _trigger(
        self, reassignments: dict[TopicPartition, ReplicaAssignment]
    ) -> dict[TopicPartition, ApiError]:
        c = self.controller
        results: dict[TopicPartition, ApiError] = {}
        unknown = ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
        for tp, assignment in sorted(reassignments.items()):
            if c.deletion.is_queued(tp.topic) or not c.context.replicas(tp):
                results[tp] = unknown
                continue
            try:
                await self.on_reassignment(tp, assignment)
                results[tp] = NONE
            except ControllerMovedError:
                raise
            except Exception as exc:
                log.exception("reassigning %s failed", tp)
                results[tp] = ApiError(ErrorCode.UNKNOWN_SERVER_ERROR, str(exc))
        return results

    # -- the phases ----------------------------------------------------------------------

    async def on_reassignment(self, tp: TopicPartition, assignment: ReplicaAssignment) -> None:
        c = self.controller
        c.deletion.mark_ineligible({tp.topic}, "a reassignment is in progress")
        await self._update_current(tp, assignment)
        if not await self._is_complete(tp, assignment):
            await self._bump_epoch_and_send(tp, assignment)
            await c.replicas.handle_state_changes(
                [PartitionReplica(tp, r) for r in assignment.adding], ReplicaState.NEW
            )
            return
        await c.replicas.handle_state_changes(
            [PartitionReplica(tp, r) for r in assignment.adding], ReplicaState.ONLINE
        )
        completed = ReplicaAssignment(assignment.target_replicas)
        c.context.set_assignment(tp, completed)
        await self._move_leader_if_needed(tp, completed)
        await self._stop_replicas(tp, assignment.removing)
        await self._write_assignment(tp, completed)
        self._unwatch(tp)
        await self._remove_from_zk(
            lambda t, replicas: t == tp and tuple(replicas) == completed.replicas
        )
        c.context.being_reassigned.discard(tp)
        c.send_update_metadata(c.context.live_or_shutting_down_ids, [tp])
        await c.deletion.resume_for({tp.topic})
        log.info("reassignment of %s to %s completed", tp, list(completed.replicas))

    async def _update_current(self, tp: TopicPartition, assignment: ReplicaAssignment) -> None:
        context = self.controller.context
        current = context.assignment(tp)
        if current != assignment:
            await self._write_assignment(tp, assignment)
            context.set_assignment(tp, assignment)
            unneeded = [r for r in current.replicas if r not in assignment.replicas]
            if unneeded:
                await self._stop_replicas(tp, unneeded)
        self._watch(tp)
        context.being_reassigned.add(tp)

    async def _is_complete(self, tp: TopicPartition, assignment: ReplicaAssignment) -> bool:
        if not assignment.is_being_reassigned:
            return True
        # Reading the state with a watch re-arms the ISR watch of the reassignment.
        state = await self.controller.zk.get_partition_state(tp, watch=tp in self._watched)
        return state is not None and set(assignment.target_replicas) <= set(state.isr)

    async def _bump_leader_epoch(self, tp: TopicPartition) -> LeaderAndIsr:
        """Write the same leader and ISR with the next leader epoch, so that the replicas
        accept the LeaderAndIsr carrying the new assignment."""
        c = self.controller
        context = c.context
        while True:
            state = await c.zk.get_partition_state(tp)
            if state is None:
                raise StateChangeFailedError(f"{tp} has no state to bump the leader epoch of")
            if state.controller_epoch > context.epoch:
                raise StateChangeFailedError(
                    f"the state of {tp} was written by a newer controller: this one was replaced"
                )
            outcome = await c.zk.update_partition_states(
                {tp: state.new_epoch(context.epoch)}, context.epoch_zk_version
            )
            written = outcome.finished.get(tp)
            if isinstance(written, Exception):
                raise written
            if written is not None:
                context.leadership[tp] = written
                return written

    async def _bump_epoch_and_send(self, tp: TopicPartition, assignment: ReplicaAssignment) -> None:
        c = self.controller
        state = await self._bump_leader_epoch(tp)
        batch = c.batch
        batch.new_batch()
        batch.add_leader_and_isr(assignment.origin_replicas, tp, state, assignment, is_new=False)
        batch.add_leader_and_isr(assignment.adding, tp, state, assignment, is_new=True)
        batch.send()

    async def _move_leader_if_needed(
        self, tp: TopicPartition, assignment: ReplicaAssignment
    ) -> None:
        c = self.controller
        state = c.context.leadership.get(tp)
        leader = state.leader if state is not None else -1
        if leader in assignment.replicas and c.context.is_replica_online(leader, tp):
            await self._bump_epoch_and_send(tp, assignment)
        else:
            await c.partitions.handle_state_changes([tp], PartitionState.ONLINE, Strategy.REASSIGN)

    async def _stop_replicas(self, tp: TopicPartition, removed: Iterable[int]) -> None:
        replicas = self.controller.replicas
        gone = [PartitionReplica(tp, r) for r in removed]
        for state in (
            ReplicaState.OFFLINE,
            ReplicaState.DELETION_STARTED,
            ReplicaState.DELETION_SUCCESSFUL,
            ReplicaState.NON_EXISTENT,
        ):
            await replicas.handle_state_changes(gone, state)

    async def _write_assignment(self, tp: TopicPartition, assignment: ReplicaAssignment) -> None:
        context = self.controller.context
        partitions = context.topic_assignment(tp.topic)
        partitions[tp.partition] = assignment
        await self.controller.zk.set_topic_assignment(
            tp.topic, context.topic_ids.get(tp.topic), partitions, context.epoch_zk_version
        )

    async def _remove_from_zk(
        self, should_remove: Callable[[TopicPartition, Sequence[int]], bool]
    ) -> None:
        """Drop partitions from /admin/reassign_partitions (the znode goes when empty)."""
        c = self.controller
        if not await c.zk.exists(znodes.REASSIGN_PARTITIONS):
            return
        current = await c.zk.get_partition_reassignment()
        keep = {tp: r for tp, r in current.items() if not should_remove(tp, r)}
        if len(keep) == len(current) and current:
            return
        version = c.context.epoch_zk_version
        if keep:
            await c.zk.set_or_create_partition_reassignment(keep, version)
        else:
            await c.zk.delete_partition_reassignment(version)
            await c.zk.exists(znodes.REASSIGN_PARTITIONS, watch=True)
