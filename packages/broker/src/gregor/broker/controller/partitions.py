"""The partition state machine: NonExistent -> New -> Online <-> Offline -> NonExistent.

Moving a partition online writes its leadership to ZooKeeper first (created for a new
partition, compare-and-set for an existing one, fenced by the controller epoch), then
records it in the context and queues LeaderAndIsr for its replicas and UpdateMetadata for
every broker. A compare-and-set that loses to a partition leader's concurrent ISR change is
re-read and retried.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable

from gregor.broker.controller.batch import RequestBatch
from gregor.broker.controller.context import (
    ControllerContext,
    PartitionState,
    valid_transitions,
)
from gregor.broker.controller.election import ElectionResult, Strategy, elect
from gregor.broker.zk.client import ControllerMovedError, KafkaZkClient
from gregor.broker.zk.znodes import LeaderAndIsr, TopicPartition

log = logging.getLogger(__name__)

Results = dict[TopicPartition, LeaderAndIsr | Exception]
# Which of these topics allow unclean leader election (topic config over broker default).
UncleanLookup = Callable[[set[str]], Awaitable[dict[str, bool]]]


class StateChangeFailedError(Exception):
    """A state change the controller could not make (no eligible leader, fenced, ...)."""


class PartitionStateMachine:
    def __init__(
        self,
        context: ControllerContext,
        zk: KafkaZkClient,
        batch: RequestBatch,
        unclean_lookup: UncleanLookup,
    ) -> None:
        self.context = context
        self.zk = zk
        self.batch = batch
        self.unclean_lookup = unclean_lookup
        self.unclean_elections = 0

    async def startup(self) -> None:
        """Give every known partition its initial state, then bring what can be online."""
        context = self.context
        for tp in context.all_partitions():
            state = context.leadership.get(tp)
            if state is None:
                context.partition_states[tp] = PartitionState.NEW
            elif context.is_replica_online(state.leader, tp):
                context.partition_states[tp] = PartitionState.ONLINE
            else:
                context.partition_states[tp] = PartitionState.OFFLINE
        await self.trigger_online_state_change()

    async def trigger_online_state_change(self, topic: str | None = None) -> Results:
        """Elect leaders for every new or offline partition (of `topic`) not being deleted."""
        context = self.context
        partitions = [
            tp
            for tp in context.partitions_in_states(
                {PartitionState.OFFLINE, PartitionState.NEW}, topic
            )
            if not context.is_queued_for_deletion(tp.topic)
        ]
        return await self.handle_state_changes(partitions, PartitionState.ONLINE, Strategy.OFFLINE)

    async def handle_state_changes(
        self,
        partitions: Iterable[TopicPartition],
        target: PartitionState,
        strategy: Strategy | None = None,
    ) -> Results:
        tps = sorted(set(partitions))
        if not tps:
            return {}
        self.batch.new_batch()
        try:
            results = await self._change(tps, target, strategy)
        except ControllerMovedError:
            self.batch.clear()
            raise
        except Exception as exc:
            log.exception("moving partitions %s to %s failed", tps, target.value)
            results = dict.fromkeys(tps, exc)
        # Whatever is batched was written to ZooKeeper: the brokers must hear of it.
        self.batch.send()
        return results

    async def _change(
        self, tps: list[TopicPartition], target: PartitionState, strategy: Strategy | None
    ) -> Results:
        context = self.context
        valid = valid_transitions(
            context.partition_states, tps, target, PartitionState.NON_EXISTENT
        )
        if target != PartitionState.ONLINE:
            for tp in valid:
                context.partition_states[tp] = target
            return {}
        new = [tp for tp in valid if context.partition_states[tp] == PartitionState.NEW]
        existing = [tp for tp in valid if context.partition_states[tp] != PartitionState.NEW]
        results: Results = {}
        if new:
            results.update(await self._initialize(new))
        if existing:
            if strategy is None:
                raise ValueError("moving partitions online needs an election strategy")
            results.update(await self._elect_until_done(existing, strategy))
        for tp, result in results.items():
            if isinstance(result, LeaderAndIsr):
                context.partition_states[tp] = PartitionState.ONLINE
        return results

    async def _initialize(self, tps: list[TopicPartition]) -> Results:
        """First leader and ISR of new partitions: the live replicas, the first leading."""
        context = self.context
        results: Results = {}
        states: dict[TopicPartition, LeaderAndIsr] = {}
        for tp in tps:
            live = [r for r in context.replicas(tp) if context.is_replica_online(r, tp)]
            if not live:
                results[tp] = StateChangeFailedError(
                    f"no replica of new partition {tp} is alive: assigned replicas are "
                    f"{list(context.replicas(tp))}, live brokers are "
                    f"{sorted(context.live_broker_ids)}"
                )
                log.error("%s", results[tp])
                continue
            states[tp] = LeaderAndIsr(live[0], 0, tuple(live), context.epoch)
        if not states:
            return results
        created = await self.zk.create_partition_states(states, context.epoch_zk_version)
        for tp, outcome in created.items():
            if isinstance(outcome, Exception):
                log.error("creating the state of new partition %s failed: %r", tp, outcome)
                results[tp] = outcome
                continue
            context.leadership[tp] = outcome
            self.batch.add_leader_and_isr(outcome.isr, tp, outcome, context.assignment(tp), True)
            results[tp] = outcome
        return results

    async def _elect_until_done(self, tps: list[TopicPartition], strategy: Strategy) -> Results:
        results: Results = {}
        remaining = tps
        while remaining:
            finished, remaining = await self._elect(remaining, strategy)
            results.update(finished)
            if remaining:
                log.info("retrying %s leader election for %s", strategy.value, remaining)
        return results

    async def _elect(
        self, tps: list[TopicPartition], strategy: Strategy
    ) -> tuple[Results, list[TopicPartition]]:
        context = self.context
        results: Results = {}
        current = await self.zk.get_partition_states(tps)
        valid: dict[TopicPartition, LeaderAndIsr] = {}
        for tp in tps:
            state = current.get(tp)
            if state is None:
                results[tp] = StateChangeFailedError(f"partition {tp} has no state in ZooKeeper")
            elif state.controller_epoch > context.epoch:
                results[tp] = StateChangeFailedError(
                    f"the state of {tp} was written by a newer controller (epoch "
                    f"{state.controller_epoch} > {context.epoch}): this one was replaced"
                )
            else:
                valid[tp] = state
        unclean = await self._unclean_allowed(valid, strategy)
        elections: list[ElectionResult] = [
            elect(context, tp, state, strategy, tp.topic in unclean) for tp, state in valid.items()
        ]
        updates: dict[TopicPartition, LeaderAndIsr] = {}
        recipients: dict[TopicPartition, tuple[int, ...]] = {}
        for election in elections:
            if election.leader_and_isr is None:
                results[election.tp] = StateChangeFailedError(
                    f"no eligible leader for {election.tp} under the {strategy.value} strategy"
                )
            else:
                updates[election.tp] = election.leader_and_isr
                recipients[election.tp] = election.recipients
                if election.unclean:
                    self.unclean_elections += 1
                    log.warning(
                        "unclean leader election for %s: %d leads, data may be lost",
                        election.tp,
                        election.leader_and_isr.leader,
                    )
        if not updates:
            return results, []
        outcome = await self.zk.update_partition_states(updates, context.epoch_zk_version)
        for tp, written in outcome.finished.items():
            if isinstance(written, Exception):
                results[tp] = written
                continue
            context.leadership[tp] = written
            self.batch.add_leader_and_isr(
                recipients[tp], tp, written, context.assignment(tp), is_new=False
            )
            results[tp] = written
        return results, outcome.retry

    async def _unclean_allowed(
        self, states: dict[TopicPartition, LeaderAndIsr], strategy: Strategy
    ) -> set[str]:
        """Topics whose partitions here have no live in-sync replica and allow unclean
        election (only asked for the offline strategy)."""
        if strategy != Strategy.OFFLINE:
            return set()
        context = self.context
        without_isr = {
            tp.topic
            for tp, state in states.items()
            if not any(context.is_replica_online(r, tp) for r in state.isr)
        }
        if not without_isr:
            return set()
        allowed = await self.unclean_lookup(without_isr)
        return {topic for topic, ok in allowed.items() if ok}
