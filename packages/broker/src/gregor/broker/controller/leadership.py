"""Leader elections on demand: preferred and unclean elections asked for by an admin client
or through /admin/preferred_replica_election, and the periodic auto leader rebalance.

The auto rebalance looks at each broker's share of partitions whose preferred replica (the
first assigned) it is; when more than `leader.imbalance.per.broker.percentage` of them are
led by another broker, it moves their leadership back where the preferred replica is alive
and in sync.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable
from typing import TYPE_CHECKING

from gregor.broker.controller.context import PartitionState
from gregor.broker.controller.election import Strategy, preferred_leader
from gregor.broker.controller.events import (
    NOT_CONTROLLER,
    ApiError,
    ElectionTrigger,
    ElectionType,
    Reply,
)
from gregor.broker.controller.partitions import Results, StateChangeFailedError
from gregor.broker.zk import znodes
from gregor.broker.zk.client import ControllerMovedError
from gregor.broker.zk.znodes import NO_LEADER, LeaderAndIsr, TopicPartition
from gregor.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from gregor.broker.controller.core import ControllerCore

log = logging.getLogger(__name__)


class LeaderElections:
    def __init__(self, controller: ControllerCore) -> None:
        self.controller = controller

    async def on_replica_election(
        self,
        partitions: Iterable[TopicPartition],
        election_type: ElectionType,
        trigger: ElectionTrigger,
    ) -> Results:
        c = self.controller
        tps = set(partitions)
        if election_type == ElectionType.PREFERRED:
            strategy = Strategy.PREFERRED
        else:
            # Unclean only when an admin asked for it explicitly.
            unclean = trigger == ElectionTrigger.ADMIN
            strategy = Strategy.OFFLINE_UNCLEAN if unclean else Strategy.OFFLINE
        if tps:
            log.info(
                "%s leader election for %s, triggered by %s",
                election_type.name.lower(),
                sorted(tps),
                trigger.value,
            )
        try:
            return await c.partitions.handle_state_changes(tps, PartitionState.ONLINE, strategy)
        finally:
            if trigger != ElectionTrigger.ADMIN:
                await self._remove_from_preferred_election(tps, trigger == ElectionTrigger.AUTO)

    async def _remove_from_preferred_election(
        self, partitions: set[TopicPartition], auto: bool
    ) -> None:
        c = self.controller
        context = c.context
        for tp in sorted(partitions):
            state = context.leadership.get(tp)
            preferred = context.replicas(tp)[:1]
            if state is not None and list(preferred) == [state.leader]:
                log.info("%s completed preferred replica election: %d leads", tp, state.leader)
            else:
                log.warning("%s failed to move leadership to its preferred replica", tp)
        if not auto:
            await c.zk.delete_preferred_replica_election(context.epoch_zk_version)
            # Re-arm the watch so the next request through the znode is noticed.
            await c.zk.exists(znodes.PREFERRED_REPLICA_ELECTION, watch=True)

    async def fetch_pending_preferred_elections(self) -> set[TopicPartition]:
        """Elections left in /admin/preferred_replica_election by the last controller."""
        context = self.controller.context
        pending = set()
        for tp in await self.controller.zk.get_preferred_replica_election():
            replicas = context.replicas(tp)
            state = context.leadership.get(tp)
            done = not replicas or (state is not None and state.leader == replicas[0])
            if not done and not self.controller.deletion.is_queued(tp.topic):
                pending.add(tp)
        return pending

    async def process_election(
        self,
        partitions: set[TopicPartition] | None,
        election_type: ElectionType,
        trigger: ElectionTrigger,
        reply: Reply[dict[TopicPartition, int | ApiError]] | None,
    ) -> None:
        c = self.controller
        if not c.is_active:
            if reply is not None:
                reply.set(dict.fromkeys(partitions or (), NOT_CONTROLLER))
            return
        try:
            results = await self._elect(partitions, election_type, trigger)
        except BaseException:
            if reply is not None:
                reply.set(dict.fromkeys(partitions or (), NOT_CONTROLLER))
            raise
        if reply is not None:
            reply.set(results)

    async def _elect(
        self,
        partitions: set[TopicPartition] | None,
        election_type: ElectionType,
        trigger: ElectionTrigger,
    ) -> dict[TopicPartition, int | ApiError]:
        c = self.controller
        context = c.context
        if partitions is None:
            # Through the znode: it must (still) exist; reading re-arms its watch.
            if not await c.zk.exists(znodes.PREFERRED_REPLICA_ELECTION, watch=True):
                return {}
            partitions = await c.zk.get_preferred_replica_election()
        known = context.all_partitions()
        results: dict[TopicPartition, int | ApiError] = {}
        electable: set[TopicPartition] = set()
        for tp in partitions:
            if tp not in known:
                results[tp] = ApiError(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist."
                )
            elif c.deletion.is_queued(tp.topic):
                results[tp] = ApiError(
                    ErrorCode.INVALID_TOPIC_EXCEPTION, "The topic is being deleted"
                )
            elif self._election_needed(tp, election_type):
                electable.add(tp)
            else:
                results[tp] = ApiError(ErrorCode.ELECTION_NOT_NEEDED)
        outcome = await self.on_replica_election(electable, election_type, trigger)
        for tp in electable:
            result = outcome.get(tp)
            if isinstance(result, LeaderAndIsr):
                results[tp] = result.leader
            else:
                results[tp] = _election_error(result, election_type)
        return results

    def _election_needed(self, tp: TopicPartition, election_type: ElectionType) -> bool:
        context = self.controller.context
        state = context.leadership.get(tp)
        leader = state.leader if state is not None else NO_LEADER
        if election_type == ElectionType.PREFERRED:
            return leader != context.replicas(tp)[0]
        return leader == NO_LEADER or not context.is_live_broker(leader)

    async def check_and_trigger_auto_rebalance(self) -> None:
        c = self.controller
        context = c.context
        by_preferred: dict[int, list[TopicPartition]] = defaultdict(list)
        for tp in context.all_partitions():
            replicas = context.replicas(tp)
            if replicas and not c.deletion.is_queued(tp.topic):
                by_preferred[replicas[0]].append(tp)
        threshold = c.settings.leader_imbalance_per_broker_percentage / 100
        for broker_id, tps in sorted(by_preferred.items()):
            misplaced = [
                tp
                for tp in tps
                if (state := context.leadership.get(tp)) is not None and state.leader != broker_id
            ]
            if len(misplaced) / len(tps) <= threshold:
                continue
            candidates = {
                tp
                for tp in misplaced
                if tp.topic in context.all_topics and self._preferred_can_lead(tp)
            }
            if candidates:
                await self.on_replica_election(
                    candidates, ElectionType.PREFERRED, ElectionTrigger.AUTO
                )

    def _preferred_can_lead(self, tp: TopicPartition) -> bool:
        context = self.controller.context
        replicas = context.replicas(tp)
        live = [r for r in replicas if context.is_replica_online(r, tp)]
        state = context.leadership.get(tp)
        return state is not None and preferred_leader(replicas, state.isr, live) is not None


def _election_error(result: Exception | None, election_type: ElectionType) -> ApiError:
    if isinstance(result, StateChangeFailedError) or result is None:
        code = (
            ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
            if election_type == ElectionType.PREFERRED
            else ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
        )
        return ApiError(code, str(result) if result is not None else None)
    if isinstance(result, ControllerMovedError):
        return NOT_CONTROLLER
    if isinstance(result, KafkaError):
        return ApiError(result.code, str(result))
    return ApiError(ErrorCode.UNKNOWN_SERVER_ERROR, str(result))
