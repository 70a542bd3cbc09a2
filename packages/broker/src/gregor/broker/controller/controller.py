"""The controller: elected through /controller, it runs the cluster's state machines.

Every broker runs a `Controller`; the one that creates /controller (and bumps
/controller_epoch) is active. It learns the cluster from ZooKeeper, watches it, and tells
brokers what to do only through LeaderAndIsr, UpdateMetadata and StopReplica, each
carrying its epoch so a replaced controller is ignored. Its work is a single queue of
events processed in order by one task, as Kafka's ControllerEventManager does.

When the ZooKeeper session expires the controller resigns; when a new session starts, it
registers the broker again and takes part in a new election. A newly elected controller
finishes what its predecessor left in flight: topic deletions, reassignments, preferred
replica elections.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from functools import partial
from typing import Any

import trio

from gregor.broker.controller.batch import RequestBatch
from gregor.broker.controller.channel import ControllerChannelManager
from gregor.broker.controller.context import (
    ControllerContext,
    PartitionReplica,
    PartitionState,
    ReplicaState,
)
from gregor.broker.controller.deletion import TopicDeletionManager
from gregor.broker.controller.election import Strategy
from gregor.broker.controller.events import (
    ApiError,
    ApiPartitionReassignment,
    AutoPreferredReplicaLeaderElection,
    BrokerChange,
    ControlledShutdown,
    ElectionTrigger,
    ElectionType,
    Event,
    EventQueue,
    Expire,
    IsrChangeNotification,
    LeaderAndIsrResponseReceived,
    ListPartitionReassignments,
    PartitionModifications,
    PartitionReassignmentIsrChange,
    Reelect,
    RegisterBrokerAndReelect,
    ReplicaLeaderElection,
    Reply,
    Startup,
    TopicChange,
    TopicDeletion,
    TopicDeletionStopReplicaResponseReceived,
    UncleanLeaderElectionEnable,
    ZkPartitionReassignment,
)
from gregor.broker.controller.leadership import LeaderElections
from gregor.broker.controller.partitions import PartitionStateMachine
from gregor.broker.controller.reassignment import Reassignments
from gregor.broker.controller.replicas import ReplicaStateMachine
from gregor.broker.controller.settings import ControllerSettings
from gregor.broker.zk import znodes
from gregor.broker.zk.client import ControllerMovedError, KafkaZkClient
from gregor.broker.zk.session import ZooKeeperClosedError, ZooKeeperSessionExpiredError
from gregor.broker.zk.znodes import (
    BrokerRegistration,
    ReplicaAssignment,
    TopicAssignment,
    TopicPartition,
)
from gregor.protocol.apis.leader_and_isr import LeaderAndIsrResponse
from gregor.protocol.errors import (
    BrokerNotAvailableError,
    ErrorCode,
    NotControllerError,
    StaleBrokerEpochError,
)

log = logging.getLogger(__name__)

UNKNOWN_BROKER_EPOCH = -1
UNCLEAN_ELECTION = "unclean.leader.election.enable"
AUTO_REBALANCE_FIRST_CHECK_S = 5.0  # as Kafka: the first check 5 s after becoming controller


class Controller:
    """The controller service of one broker (see the module docstring)."""

    def __init__(
        self, zk: KafkaZkClient, settings: ControllerSettings, broker: BrokerRegistration
    ) -> None:
        self.zk = zk
        self.settings = settings
        self.broker = broker
        self.broker_id = settings.broker_id
        self.broker_epoch = -1
        self._active_controller_id = -1
        self._controller_changed = trio.Event()  # set, and replaced, when the id changes
        self.context = ControllerContext()
        self.queue = EventQueue()
        self.channels = ControllerChannelManager(
            self.broker_id,
            settings.inter_broker_listener,
            settings.request_timeout_s,
            settings.security,
        )
        context = self.context
        self.batch = self._new_batch()
        self.partitions = PartitionStateMachine(
            context, zk, self._new_batch(), self._unclean_allowed
        )
        self.replicas = ReplicaStateMachine(context, zk, self._new_batch())
        self.deletion = TopicDeletionManager(
            context,
            zk,
            self.partitions,
            self.replicas,
            settings.delete_topic_enable,
            self._send_deletion_metadata,
            self._unwatch_topic,
        )
        self.reassignments = Reassignments(self)
        self.elections = LeaderElections(self)
        self._nursery: trio.Nursery | None = None
        self._active_scope = trio.CancelScope()
        self._watched_topics: set[str] = set()
        self._dynamic_broker_configs: dict[str, dict[str, str]] = {}

    def _new_batch(self) -> RequestBatch:
        return RequestBatch(
            self.broker_id,
            self.context,
            self.channels,
            self._on_leader_and_isr_response,
            self._on_deletion_stop_replica_response,
        )

    def __repr__(self) -> str:
        return f"<Controller of broker {self.broker_id}, active={self.is_active}>"

    @property
    def active_controller_id(self) -> int:
        """The controller this broker last saw in /controller (-1: none)."""
        return self._active_controller_id

    @active_controller_id.setter
    def active_controller_id(self, value: int) -> None:
        if value != self._active_controller_id:
            self._active_controller_id = value
            self._controller_changed.set()
            self._controller_changed = trio.Event()

    async def wait_for_another_controller(self, known: int) -> int:
        """Wait until a controller other than `known` is elected; its id."""
        while self._active_controller_id in (known, -1):
            await self._controller_changed.wait()
        return self._active_controller_id

    @property
    def is_active(self) -> bool:
        return self.active_controller_id == self.broker_id

    @property
    def epoch(self) -> int:
        return self.context.epoch

    # -- running -----------------------------------------------------------------------

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Register this broker in ZooKeeper, then take part in controller elections until
        cancelled. Started with `nursery.start`, so a taken broker id fails the start."""
        self.broker_epoch = await self.zk.register_broker(self.broker)
        self.zk.add_session_listener(self)
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self.queue.put(Startup())
                task_status.started()
                await self._process_events()
        finally:
            self.zk.remove_session_listener(self)
            self.zk.set_node_handler(znodes.CONTROLLER, None)
            self._resign()
            self._nursery = None

    async def _process_events(self) -> None:
        while True:
            event = await self.queue.get()
            try:
                await self._process(event)
            except ControllerMovedError:
                log.info("the controller moved while %s was processed", type(event).__name__)
                await self._maybe_resign()
            except ZooKeeperClosedError:
                return
            except ZooKeeperSessionExpiredError:
                # The session listener queued the resignation; nothing else to do here.
                log.info(
                    "the ZooKeeper session expired while %s was processed", type(event).__name__
                )
            except Exception:
                log.exception("the controller failed to process %s", type(event).__name__)

    def put(self, event: Event) -> None:
        self.queue.put(event)

    # -- ZooKeeper session (SessionListener) -------------------------------------------

    def session_expired(self) -> None:
        self.queue.clear_and_put(Expire())

    def session_established(self) -> None:
        self.queue.put(RegisterBrokerAndReelect())

    # -- dispatch ----------------------------------------------------------------------

    async def _process(self, event: Event) -> None:
        match event:
            case Startup():
                self.zk.set_node_handler(znodes.CONTROLLER, lambda: self.put(Reelect()))
                await self._elect()
            case Reelect():
                await self._maybe_resign()
                await self._elect()
            case RegisterBrokerAndReelect():
                self.broker_epoch = await self.zk.register_broker(self.broker)
                await self._maybe_resign()
                await self._elect()
            case Expire():
                self.active_controller_id = -1
                self._resign()
            case BrokerChange():
                await self._process_broker_change()
            case TopicChange():
                await self._process_topic_change()
            case PartitionModifications(topic):
                await self._process_partition_modifications(topic)
            case TopicDeletion():
                await self._process_topic_deletion()
            case IsrChangeNotification():
                await self._process_isr_change_notification()
            case LeaderAndIsrResponseReceived(broker_id, response, version):
                await self._process_leader_and_isr_response(broker_id, response, version)
            case TopicDeletionStopReplicaResponseReceived(broker_id, error, errors):
                await self._process_deletion_stop_replica_response(broker_id, error, errors)
            case ControlledShutdown(broker_id, broker_epoch, reply):
                await self._process_controlled_shutdown(broker_id, broker_epoch, reply)
            case ZkPartitionReassignment():
                if self.is_active:
                    await self.reassignments.process_zk_reassignment()
            case PartitionReassignmentIsrChange(tp):
                if self.is_active:
                    await self.reassignments.process_isr_change(tp)
            case ApiPartitionReassignment(reassignments, reply):
                await self.reassignments.process_api_reassignment(reassignments, reply)
            case ListPartitionReassignments(partitions, reply):
                self.reassignments.process_list(partitions, reply)
            case ReplicaLeaderElection(partitions, election_type, trigger, reply):
                await self.elections.process_election(partitions, election_type, trigger, reply)
            case AutoPreferredReplicaLeaderElection():
                if self.is_active:
                    await self.elections.check_and_trigger_auto_rebalance()
            case UncleanLeaderElectionEnable(topic):
                if self.is_active:
                    await self.partitions.trigger_online_state_change(topic)
            case _:
                log.error("the controller has no handler for %r", event)

    # -- election and resignation ------------------------------------------------------

    async def _elect(self) -> None:
        # Reading with a watch: whatever happens to /controller next, we hear of it.
        self.active_controller_id = await self._controller_id(watch=True)
        if self.active_controller_id != -1:
            return
        try:
            epoch, version = await self.zk.register_controller_and_increment_epoch(self.broker_id)
        except ControllerMovedError:
            await self._maybe_resign()
            return
        self.context.epoch, self.context.epoch_zk_version = epoch, version
        self.active_controller_id = self.broker_id
        log.info("broker %d is the controller now, with epoch %d", self.broker_id, epoch)
        try:
            await self._on_controller_failover()
        except ControllerMovedError:
            raise
        except Exception:
            log.exception("broker %d failed to become controller; resigning", self.broker_id)
            await self._trigger_controller_move()

    async def _controller_id(self, watch: bool) -> int:
        found = await self.zk.get_controller_id(watch=watch)
        return -1 if found is None else found

    async def _maybe_resign(self) -> None:
        was_active = self.is_active
        self.active_controller_id = await self._controller_id(watch=True)
        if was_active and not self.is_active:
            self._resign()

    async def _trigger_controller_move(self) -> None:
        """Give up being controller on purpose, so that a new election starts afresh."""
        self.active_controller_id = await self._controller_id(watch=False)
        if not self.is_active:
            return
        version = self.context.epoch_zk_version
        self.active_controller_id = -1
        self._resign()
        try:
            await self.zk.delete_controller(version)
        except ControllerMovedError:
            pass

    def _resign(self) -> None:
        zk = self.zk
        for path in (znodes.ISR_CHANGE_NOTIFICATION, znodes.TOPICS, znodes.DELETE_TOPICS):
            zk.set_child_handler(path, None)
        zk.set_child_handler(znodes.BROKER_IDS, None)
        zk.set_node_handler(znodes.REASSIGN_PARTITIONS, None)
        zk.set_node_handler(znodes.PREFERRED_REPLICA_ELECTION, None)
        for topic in list(self._watched_topics):
            self._unwatch_topic(topic)
        self.reassignments.unwatch_all()
        self._active_scope.cancel()
        self.channels.shutdown()
        for batch in (self.batch, self.partitions.batch, self.replicas.batch):
            batch.clear()
        self.context.reset()
        log.info("broker %d is not the controller (any more)", self.broker_id)

    async def _on_controller_failover(self) -> None:
        zk = self.zk
        put = self.put
        zk.set_child_handler(znodes.BROKER_IDS, lambda: put(BrokerChange()))
        zk.set_child_handler(znodes.TOPICS, lambda: put(TopicChange()))
        zk.set_child_handler(znodes.DELETE_TOPICS, lambda: put(TopicDeletion()))
        zk.set_child_handler(znodes.ISR_CHANGE_NOTIFICATION, lambda: put(IsrChangeNotification()))
        zk.set_node_handler(znodes.REASSIGN_PARTITIONS, lambda: put(ZkPartitionReassignment()))
        zk.set_node_handler(
            znodes.PREFERRED_REPLICA_ELECTION,
            lambda: put(
                ReplicaLeaderElection(None, ElectionType.PREFERRED, ElectionTrigger.ZOOKEEPER)
            ),
        )
        await zk.exists(znodes.REASSIGN_PARTITIONS, watch=True)
        await zk.exists(znodes.PREFERRED_REPLICA_ELECTION, watch=True)
        stale = await zk.get_isr_change_notifications(watch=True)
        await zk.delete_isr_change_notifications(stale, self.context.epoch_zk_version)
        await self._initialize_context()
        queued, ineligible = await self._fetch_topic_deletions()
        await self.deletion.init(queued, ineligible)
        # Brokers must know the live brokers before the LeaderAndIsr the state machines send.
        self.send_update_metadata(self.context.live_or_shutting_down_ids, ())
        await self.replicas.startup()
        await self.partitions.startup()
        log.info("controller %d is ready, with epoch %d", self.broker_id, self.epoch)
        await self.reassignments.initialize()
        await self.deletion.try_deletion()
        pending = await self.elections.fetch_pending_preferred_elections()
        await self.elections.on_replica_election(
            pending, ElectionType.PREFERRED, ElectionTrigger.ZOOKEEPER
        )
        if self.settings.auto_leader_rebalance_enable and self._nursery is not None:
            self._active_scope = trio.CancelScope()
            self._nursery.start_soon(self._schedule_auto_rebalance, self._active_scope)

    async def _schedule_auto_rebalance(self, scope: trio.CancelScope) -> None:
        with scope:
            await trio.sleep(AUTO_REBALANCE_FIRST_CHECK_S)
            while True:
                self.put(AutoPreferredReplicaLeaderElection())
                await trio.sleep(self.settings.leader_imbalance_check_interval_s)

    async def _initialize_context(self) -> None:
        context = self.context
        brokers = await self.zk.get_all_brokers(watch=True)
        context.set_live_brokers(brokers)
        context.all_topics = await self.zk.get_all_topics(watch=True)
        assignments = await self._watch_topics(context.all_topics)
        await self._record_assignments(assignments)
        for tp in context.all_partitions():
            if context.assignment(tp).is_being_reassigned:
                context.being_reassigned.add(tp)
        context.leadership = await self.zk.get_partition_states(context.all_partitions())
        context.shutting_down.clear()
        if self._nursery is not None:
            self.channels.start(self._nursery, [b for b, _ in brokers.values()])
        log.info(
            "controller %d: live brokers %s, %d topics",
            self.broker_id,
            sorted(context.live_broker_ids),
            len(context.all_topics),
        )

    async def _fetch_topic_deletions(self) -> tuple[set[str], set[str]]:
        context = self.context
        queued = await self.zk.get_topic_deletions(watch=True)
        with_offline_replicas = {
            topic
            for topic in context.all_topics
            if any(
                not context.is_replica_online(r.replica, r.tp)
                for r in context.replicas_for_topic(topic)
            )
        }
        reassigning = {tp.topic for tp in context.being_reassigned}
        return queued, with_offline_replicas | reassigning

    # -- topics ------------------------------------------------------------------------

    async def _watch_topics(self, topics: Iterable[str]) -> dict[str, TopicAssignment]:
        """Watch each topic's znode (partition additions) and read its assignment."""
        names = set(topics)
        for topic in names - self._watched_topics:
            self.zk.set_node_handler(
                znodes.topic_path(topic), partial(self.put, PartitionModifications(topic))
            )
        self._watched_topics |= names
        return await self.zk.get_topic_assignments(names, watch=True)

    def _unwatch_topic(self, topic: str) -> None:
        self._watched_topics.discard(topic)
        self.zk.set_node_handler(znodes.topic_path(topic), None)

    async def _record_assignments(self, assignments: dict[str, TopicAssignment]) -> None:
        """Take the topics' assignments into the context, giving ids to topics without."""
        context = self.context
        for topic, assignment in assignments.items():
            topic_id = assignment.topic_id
            if topic_id is None:
                topic_id = znodes.new_topic_id()
                await self.zk.set_topic_assignment(
                    topic, topic_id, assignment.partitions, context.epoch_zk_version
                )
            context.add_topic_id(topic, topic_id)
            for partition, replicas in assignment.partitions.items():
                context.set_assignment(TopicPartition(topic, partition), replicas)

    async def _process_topic_change(self) -> None:
        if not self.is_active:
            return
        context = self.context
        topics = await self.zk.get_all_topics(watch=True)
        new = topics - context.all_topics
        for topic in context.all_topics - topics:
            self._unwatch_topic(topic)
            context.remove_topic(topic)
        context.all_topics = set(topics)
        if not new:
            return
        assignments = await self._watch_topics(new)
        await self._record_assignments(assignments)
        log.info("new topics %s", sorted(new))
        created = {
            TopicPartition(topic, p)
            for topic, assignment in assignments.items()
            for p in assignment.partitions
        }
        await self.on_new_partitions(created)

    async def _process_partition_modifications(self, topic: str) -> None:
        if not self.is_active:
            return
        context = self.context
        found = (await self.zk.get_topic_assignments([topic], watch=True)).get(topic)
        if found is None:
            return
        added = {
            TopicPartition(topic, p): a
            for p, a in found.partitions.items()
            if not context.replicas(TopicPartition(topic, p))
        }
        if not added:
            return
        if self.deletion.is_queued(topic):
            log.warning("not adding partitions %s to %s: it is being deleted", sorted(added), topic)
            await self.zk.set_topic_assignment(
                topic,
                context.topic_ids.get(topic),
                context.topic_assignment(topic),
                context.epoch_zk_version,
            )
            return
        log.info("new partitions %s", sorted(added))
        for tp, assignment in added.items():
            context.set_assignment(tp, assignment)
        await self.on_new_partitions(set(added))

    async def on_new_partitions(self, partitions: set[TopicPartition]) -> None:
        replicas = self.context.replicas_for_partitions(partitions)
        await self.partitions.handle_state_changes(partitions, PartitionState.NEW)
        await self.replicas.handle_state_changes(replicas, ReplicaState.NEW)
        await self.partitions.handle_state_changes(
            partitions, PartitionState.ONLINE, Strategy.OFFLINE
        )
        await self.replicas.handle_state_changes(replicas, ReplicaState.ONLINE)

    async def _process_topic_deletion(self) -> None:
        if not self.is_active:
            return
        context = self.context
        topics = await self.zk.get_topic_deletions(watch=True)
        unknown = topics - context.all_topics
        if unknown:
            log.warning("ignoring the deletion of topics that do not exist: %s", sorted(unknown))
            await self.zk.delete_topic_deletions(unknown, context.epoch_zk_version)
        topics -= unknown
        if not self.settings.delete_topic_enable:
            if topics:
                log.info("not deleting %s: delete.topic.enable is false", sorted(topics))
                await self.zk.delete_topic_deletions(topics, context.epoch_zk_version)
            return
        if topics:
            reassigning = {tp.topic for tp in context.being_reassigned}
            self.deletion.mark_ineligible(topics & reassigning, "a reassignment is in progress")
            await self.deletion.enqueue(topics)

    def _send_deletion_metadata(self, partitions: set[TopicPartition]) -> None:
        self.send_update_metadata(self.context.live_or_shutting_down_ids, partitions)

    # -- brokers -----------------------------------------------------------------------

    async def _process_broker_change(self) -> None:
        if not self.is_active:
            return
        context = self.context
        current = await self.zk.get_all_brokers(watch=True)
        known = context.live_or_shutting_down_ids
        new = set(current) - known
        dead = known - set(current)
        bounced = {
            b for b in set(current) & known if current[b][1] > context.broker_epochs.get(b, -1)
        }
        log.info(
            "brokers joined %s, left %s, bounced %s; live now %s",
            sorted(new),
            sorted(dead),
            sorted(bounced),
            sorted(current),
        )
        for broker_id in new:
            self.channels.add_broker(current[broker_id][0])
        for broker_id in bounced:
            self.channels.remove_broker(broker_id)
            self.channels.add_broker(current[broker_id][0])
        for broker_id in dead:
            self.channels.remove_broker(broker_id)
        if new:
            context.add_live_brokers({b: current[b] for b in new})
            await self._on_broker_startup(sorted(new))
        if bounced:
            context.remove_live_brokers(bounced)
            await self._on_broker_failure(sorted(bounced))
            context.add_live_brokers({b: current[b] for b in bounced})
            await self._on_broker_startup(sorted(bounced))
        if dead:
            context.remove_live_brokers(dead)
            await self._on_broker_failure(sorted(dead))

    async def _on_broker_startup(self, new: list[int]) -> None:
        context = self.context
        for broker_id in new:
            context.offline_dirs.pop(broker_id, None)
        existing = context.live_or_shutting_down_ids - set(new)
        self.send_update_metadata(existing, ())
        # The new brokers get everything at once.
        self.send_update_metadata(new, context.partitions_with_leaders())
        on_new = context.replicas_on_brokers(new)
        await self.replicas.handle_state_changes(on_new, ReplicaState.ONLINE)
        await self.partitions.trigger_online_state_change()
        await self.reassignments.maybe_resume(
            lambda _tp, a: any(r in new for r in a.target_replicas)
        )
        await self.deletion.resume_for(
            {r.topic for r in on_new if self.deletion.is_queued(r.topic)}
        )

    async def _on_broker_failure(self, dead: list[int]) -> None:
        context = self.context
        for broker_id in dead:
            context.offline_dirs.pop(broker_id, None)
            context.shutting_down.discard(broker_id)
        await self.on_replicas_offline(context.replicas_on_brokers(dead))

    async def on_replicas_offline(self, replicas: set[PartitionReplica]) -> None:
        context = self.context
        for_deletion = {r for r in replicas if self.deletion.is_queued(r.topic)}
        others = replicas - for_deletion
        await self.partitions.handle_state_changes(
            context.partitions_with_offline_leader(), PartitionState.OFFLINE
        )
        results = await self.partitions.trigger_online_state_change()
        await self.replicas.handle_state_changes(others, ReplicaState.OFFLINE)
        if for_deletion:
            await self.deletion.fail_replica_deletion(for_deletion)
        if not others and all(isinstance(r, Exception) for r in results.values()):
            # Nothing was sent, but the brokers must still learn who is offline.
            self.send_update_metadata(context.live_or_shutting_down_ids, ())

    # -- notifications and responses -----------------------------------------------------

    async def _process_isr_change_notification(self) -> None:
        if not self.is_active:
            return
        context = self.context
        numbers = await self.zk.get_isr_change_notifications(watch=True)
        if not numbers:
            return
        try:
            changed = await self.zk.get_partitions_from_isr_changes(numbers)
            known = {tp for tp in changed if context.replicas(tp)}
            if known:
                context.leadership.update(await self.zk.get_partition_states(known))
                self.send_update_metadata(context.live_or_shutting_down_ids, known)
                for tp in known & context.being_reassigned:
                    await self.reassignments.maybe_complete(tp)
        finally:
            await self.zk.delete_isr_change_notifications(numbers, context.epoch_zk_version)

    def _on_leader_and_isr_response(
        self, broker_id: int, response: LeaderAndIsrResponse, version: int
    ) -> None:
        self.put(LeaderAndIsrResponseReceived(broker_id, response, version))

    async def _process_leader_and_isr_response(
        self, broker_id: int, response: LeaderAndIsrResponse, version: int
    ) -> None:
        if not self.is_active:
            return
        context = self.context
        if response.error_code != ErrorCode.NONE:
            log.error(
                "broker %d answered LeaderAndIsr with error %d", broker_id, response.error_code
            )
            return
        errors: dict[TopicPartition, int] = {}
        if version >= 5:
            for topic in response.topics:
                name = context.topic_names.get(topic.topic_id)
                if name is not None:
                    for p in topic.partition_errors:
                        errors[TopicPartition(name, p.partition_index)] = p.error_code
        else:
            for p in response.partition_errors:
                errors[TopicPartition(p.topic_name, p.partition_index)] = p.error_code
        offline = {tp for tp, code in errors.items() if code == ErrorCode.KAFKA_STORAGE_ERROR}
        online = {tp for tp, code in errors.items() if code == ErrorCode.NONE}
        previous = context.offline_dirs.get(broker_id, set())
        current = (previous - online) | offline
        context.offline_dirs[broker_id] = current
        newly_offline = current - previous
        if newly_offline:
            log.info("replicas of %s on broker %d are offline", sorted(newly_offline), broker_id)
            await self.on_replicas_offline(
                {PartitionReplica(tp, broker_id) for tp in newly_offline}
            )

    def _on_deletion_stop_replica_response(
        self, broker_id: int, error_code: int, errors: dict[TopicPartition, int]
    ) -> None:
        self.put(TopicDeletionStopReplicaResponseReceived(broker_id, error_code, errors))

    async def _process_deletion_stop_replica_response(
        self, broker_id: int, error_code: int, errors: dict[TopicPartition, int]
    ) -> None:
        if not self.is_active:
            return
        failed = set(errors) if error_code else {tp for tp, code in errors.items() if code}
        await self.deletion.fail_replica_deletion(
            {PartitionReplica(tp, broker_id) for tp in failed}
        )
        deleted = set(errors) - failed
        if deleted:
            await self.deletion.complete_replica_deletion(
                {PartitionReplica(tp, broker_id) for tp in deleted}
            )

    # -- controlled shutdown -------------------------------------------------------------

    async def _process_controlled_shutdown(
        self, broker_id: int, broker_epoch: int, reply: Reply[set[TopicPartition]]
    ) -> None:
        try:
            reply.set(await self._do_controlled_shutdown(broker_id, broker_epoch))
        except ControllerMovedError as exc:
            reply.fail(NotControllerError(str(exc)))
            raise
        except Exception as exc:
            reply.fail(exc)

    async def _do_controlled_shutdown(
        self, broker_id: int, broker_epoch: int
    ) -> set[TopicPartition]:
        context = self.context
        if not self.is_active:
            raise NotControllerError("the controller moved to another broker")
        if broker_epoch != UNKNOWN_BROKER_EPOCH:
            known = context.broker_epochs.get(broker_id)
            if known is not None and broker_epoch < known:
                raise StaleBrokerEpochError(
                    f"controlled shutdown from broker {broker_id} with broker epoch "
                    f"{broker_epoch}; its current epoch is {known}"
                )
        if broker_id not in context.live_or_shutting_down_ids:
            raise BrokerNotAvailableError(f"Broker id {broker_id} does not exist.")
        log.info("controlled shutdown of broker %d", broker_id)
        context.shutting_down.add(broker_id)
        acting = {
            tp
            for tp in context.partitions_on_broker(broker_id)
            if len(context.replicas(tp)) > 1
            and tp in context.leadership
            and not self.deletion.is_queued(tp.topic)
        }
        led = {tp for tp in acting if context.leadership[tp].leader == broker_id}
        followed = acting - led
        await self.partitions.handle_state_changes(
            led, PartitionState.ONLINE, Strategy.CONTROLLED_SHUTDOWN
        )
        self.batch.new_batch()
        for tp in followed:
            self.batch.add_stop_replica([broker_id], tp, delete=False)
        self.batch.send()
        await self.replicas.handle_state_changes(
            {PartitionReplica(tp, broker_id) for tp in followed}, ReplicaState.OFFLINE
        )
        # Kafka answers with every partition the broker still leads, and the broker retries
        # until none remain. A partition none of whose other replicas is live and staying
        # (the last live broker, every other replica shutting down too) can never move, like
        # a single-replica one: it is left out, so the broker does not wait out its retries
        # for nothing. One with a live replica outside the ISR stays: it may catch up.
        return {
            tp
            for tp in context.partition_leaders_on_broker(broker_id)
            if any(
                r != broker_id and context.is_replica_online(r, tp) for r in context.replicas(tp)
            )
        }

    # -- shared helpers ----------------------------------------------------------------

    def send_update_metadata(
        self, broker_ids: Iterable[int], partitions: Iterable[TopicPartition]
    ) -> None:
        self.batch.new_batch()
        self.batch.add_update_metadata(broker_ids, partitions)
        self.batch.send()

    async def _unclean_allowed(self, topics: set[str]) -> dict[str, bool]:
        configs = await self.zk.get_entities_configs(znodes.CONFIG_TOPICS, topics)
        default = self._unclean_default()
        return {
            topic: _parse_bool(config.get(UNCLEAN_ELECTION), default)
            for topic, config in configs.items()
        }

    # -- the requests of admin clients and brokers ---------------------------------------

    async def elect_leaders(
        self, partitions: set[TopicPartition], election_type: ElectionType
    ) -> dict[TopicPartition, int | ApiError]:
        """ElectLeaders: each partition's new leader, or why it got none."""
        reply: Reply[dict[TopicPartition, int | ApiError]] = Reply()
        self.put(ReplicaLeaderElection(partitions, election_type, ElectionTrigger.ADMIN, reply))
        return await reply.wait()

    async def alter_partition_reassignments(
        self, reassignments: dict[TopicPartition, list[int] | None]
    ) -> dict[TopicPartition, ApiError] | ApiError:
        """AlterPartitionReassignments: per partition result, or one error for all."""
        reply: Reply[dict[TopicPartition, ApiError] | ApiError] = Reply()
        self.put(ApiPartitionReassignment(reassignments, reply))
        return await reply.wait()

    async def list_partition_reassignments(
        self, partitions: set[TopicPartition] | None
    ) -> dict[TopicPartition, ReplicaAssignment] | ApiError:
        reply: Reply[dict[TopicPartition, ReplicaAssignment] | ApiError] = Reply()
        self.put(ListPartitionReassignments(partitions, reply))
        return await reply.wait()

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> set[TopicPartition]:
        """The partitions the broker still leads after leadership was moved away; raises
        the Kafka error to answer with otherwise."""
        reply: Reply[set[TopicPartition]] = Reply()
        self.put(ControlledShutdown(broker_id, broker_epoch, reply))
        return await reply.wait()

    def enable_unclean_leader_election(self, topic: str | None = None) -> None:
        """A dynamic config change turned unclean election on: elect where now possible."""
        self.put(UncleanLeaderElectionEnable(topic))

    def config_changed(self, entity_type: str, name: str, config: dict[str, str]) -> None:
        """A dynamic config change reached this broker (see zk.config_changes): the
        controller cares whether it allows unclean leader election now."""
        if entity_type == znodes.CONFIG_TOPICS:
            if _parse_bool(config.get(UNCLEAN_ELECTION), False):
                self.enable_unclean_leader_election(name)
        elif entity_type == znodes.CONFIG_BROKERS and name in (
            znodes.DEFAULT_ENTITY,
            str(self.broker_id),
        ):
            was = self._unclean_default()
            self._dynamic_broker_configs[name] = dict(config)
            if self._unclean_default() and not was:
                self.enable_unclean_leader_election(None)

    def _unclean_default(self) -> bool:
        """unclean.leader.election.enable of this broker: dynamic over static."""
        for entity in (str(self.broker_id), znodes.DEFAULT_ENTITY):
            value = self._dynamic_broker_configs.get(entity, {}).get(UNCLEAN_ELECTION)
            if value is not None:
                return _parse_bool(value, False)
        return self.settings.unclean_leader_election_enable

    # -- metrics -------------------------------------------------------------------------

    def metrics(self) -> dict[str, float]:
        context = self.context
        active = self.is_active
        return {
            "ActiveControllerCount": 1 if active else 0,
            "OfflinePartitionsCount": context.offline_partition_count() if active else 0,
            "PreferredReplicaImbalanceCount": (
                context.preferred_replica_imbalance_count() if active else 0
            ),
            "GlobalTopicCount": len(context.all_topics) if active else 0,
            "GlobalPartitionCount": len(context.leadership) if active else 0,
            "TopicsToDeleteCount": len(context.topics_to_delete) if active else 0,
            "UncleanLeaderElections": self.partitions.unclean_elections,
            "EventQueueSize": len(self.queue),
        }


def _parse_bool(text: str | None, default: bool) -> bool:
    if text is None:
        return default
    return text.strip().lower() == "true"
