"""Broker: one broker process, the wiring of its parts, and their startup and shutdown order.

This is the one module that knows every part. Each part gets the narrow interface it uses
(see docs/architecture.md, "Who may call whom"):

- `replica_manager`   the partitions hosted here; it gets its logs from `local_logs`, writes
                      ISR changes to ZooKeeper, and announces leadership changes to the
                      listeners connected here (the group coordinator's)
- `group_coordinator` the consumer groups, on `__consumer_offsets` through a
                      `ReplicatedTopic` (a log append and a replica lookup)
- `transaction_coordinator` the transactional ids, on `__transaction_state` through a
                      `ReplicatedTopic`, its markers sent on inter-broker connections,
                      its producer ids from `producer_ids`
- `local_logs`        the log manager and the topic configs (dynamic ones applied)
- `topic_creator`     internal topics on first use, and auto-created topics
- `socket_server`     the listeners; each request's handler gets `Services`
                      (`gregor.broker.services`), never this class
- the controller service, started once the listeners are bound: it registers the broker in
  /brokers/ids (again after a session expiry) and takes part in controller elections

Startup, as Kafka's: ZooKeeper session and cluster id; the log directories (recovery runs
in threads); the listeners are bound; the replica manager starts; requests are served; the
controller service registers the broker in /brokers/ids (its ephemeral znode is what makes it
live for the controller) and joins the controller election.

Stop (SIGTERM): controlled shutdown first, so the controller moves leadership away, then
everything is cancelled; the log manager closes every log cleanly on its way out (also when
controlled shutdown gave up because ZooKeeper is unreachable: that wait is bounded). A SIGKILL
at any moment loses nothing acknowledged: the next start recovers the logs.
"""

from __future__ import annotations

import logging
from functools import partial

import trio

from gregor.broker.apis import load_handlers
from gregor.broker.authorization import ALLOW_ALL
from gregor.broker.config import BrokerConfig, is_password_config
from gregor.broker.controller import Controller, ControllerSettings, controlled_shutdown
from gregor.broker.coordinator.group import GroupConfig, GroupCoordinator
from gregor.broker.coordinator.partitioning import partition_for
from gregor.broker.coordinator.transaction import (
    InterBrokerMarkerTransport,
    TransactionConfig,
    TransactionCoordinator,
    TransactionStateManager,
    TxnMarkerChannel,
)
from gregor.broker.fetch_sessions import REFRESH_MS, FetchSessionCache
from gregor.broker.local_logs import LocalLogs
from gregor.broker.metadata_cache import MetadataCache
from gregor.broker.metrics import Metrics
from gregor.broker.network import SocketServer
from gregor.broker.producer_ids import ProducerIds
from gregor.broker.prometheus import serve as serve_prometheus
from gregor.broker.quotas import ClientQuotas
from gregor.broker.replica_manager import ReplicaManager
from gregor.broker.replicated_topic import ReplicatedTopic
from gregor.broker.replication_quotas import ReplicationQuotas
from gregor.broker.security.acl_authorizer import AclAuthorizer, parse_super_users
from gregor.broker.security.listeners import InterBrokerSecurity
from gregor.broker.security.passwords import decode_passwords, encode_passwords
from gregor.broker.services import Services
from gregor.broker.topic_creation import TopicCreator
from gregor.broker.topic_names import CONSUMER_OFFSETS, TRANSACTION_STATE
from gregor.broker.txn_verification import TxnVerifier
from gregor.broker.zk import (
    BrokerEndpoint,
    BrokerRegistration,
    KafkaZkClient,
    znodes,
)
from gregor.broker.zk.config_changes import ConfigChangeListener
from gregor.protocol.errors import KafkaStorageError

log = logging.getLogger(__name__)


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.cluster_id = ""
        # Read at each inter-broker connect: dynamic listener settings replace it (KIP-226).
        self.inter_broker_security = InterBrokerSecurity(config.inter_broker_security)
        self.controller_settings = ControllerSettings.from_config(
            config, self.inter_broker_security
        )
        self.metrics = Metrics()
        self.quotas = ClientQuotas(config.quota_window_num, config.quota_window_size_seconds)
        self.replication_quotas = ReplicationQuotas(
            config.broker_id, config.quota_window_num * config.quota_window_size_seconds
        )
        self.metadata_cache = MetadataCache(config.broker_id)
        self.zk = KafkaZkClient(
            config.zookeeper_connect,
            config.zookeeper_session_timeout_ms,
            config.zookeeper_connection_timeout_ms,
        )
        self.local_logs = LocalLogs(config, self.zk)
        self.replica_manager = ReplicaManager(
            config, self.metadata_cache, self.metrics, self.local_logs, self.zk
        )
        self.replica_manager.replication_quotas = self.replication_quotas
        self.replica_manager.inter_broker_security = self.inter_broker_security
        self.group_coordinator = self._group_coordinator()
        self.producer_ids = ProducerIds(config.broker_id, self.zk.allocate_producer_id_block)
        self.marker_transport = InterBrokerMarkerTransport(
            self.broker_id,
            self.metadata_cache,
            config.inter_broker_listener_name,
            security=self.inter_broker_security,
        )
        self.transaction_coordinator = self._transaction_coordinator()
        self.txn_verifier = TxnVerifier(self._transaction_coordinator_of, self.marker_transport)
        self.topic_creator = TopicCreator(config, self.zk, lambda: self.local_logs.log_defaults)
        self.acl_authorizer = (
            AclAuthorizer(
                self.zk,
                parse_super_users(config.super_users),
                config.allow_everyone_if_no_acl_found,
            )
            if config.authorizer_class_name
            else None
        )
        self.services = Services(
            config=config,
            metrics=self.metrics,
            zk=self.zk,
            metadata_cache=self.metadata_cache,
            local_logs=self.local_logs,
            replica_manager=self.replica_manager,
            fetch_sessions=FetchSessionCache(
                config.max_incremental_fetch_session_cache_slots,
                refresh_ms=min(REFRESH_MS, config.replica_lag_time_max_ms // 4),
                purgatory=self.replica_manager.fetch_purgatory,
            ),
            group_coordinator=self.group_coordinator,
            transaction_coordinator=self.transaction_coordinator,
            txn_verifier=self.txn_verifier,
            topic_creator=self.topic_creator,
            producer_ids=self.producer_ids,
            quotas=self.quotas,
            replication_quotas=self.replication_quotas,
            authorizer=self.acl_authorizer or ALLOW_ALL,
            controller=lambda: self.controller,
            cluster_id=lambda: self.cluster_id,
            broker_epoch=lambda: self.broker_epoch,
        )
        self.socket_server = SocketServer(config, self.metrics, self.services)
        self._controller: Controller | None = None
        self.config_listener = ConfigChangeListener(self.zk, self._config_changed)
        self._install_gauges()
        self._stop = trio.Event()
        self.started = trio.Event()

    def _group_coordinator(self) -> GroupCoordinator:
        """The group coordinator on `__consumer_offsets`, told of leadership changes."""

        async def existing_partitions() -> int:
            return len(await self.zk.get_partitions_for_topic(CONSUMER_OFFSETS))

        coordinator = GroupCoordinator(
            self.broker_id,
            GroupConfig.from_broker(self.config),
            ReplicatedTopic(self.replica_manager, CONSUMER_OFFSETS),
            existing_partitions=existing_partitions,
        )
        self.replica_manager.leadership_listeners.append(coordinator.on_leadership_change)
        return coordinator

    def _transaction_coordinator(self) -> TransactionCoordinator:
        """The transaction coordinator on `__transaction_state`, told of leadership changes."""

        async def existing_partitions() -> int:
            return len(await self.zk.get_partitions_for_topic(TRANSACTION_STATE))

        config = TransactionConfig.from_broker(self.config)
        coordinator = TransactionCoordinator(
            self.broker_id,
            config,
            TransactionStateManager(
                config, ReplicatedTopic(self.replica_manager, TRANSACTION_STATE)
            ),
            TxnMarkerChannel(self.marker_transport, config.marker_retry_backoff_ms / 1000),
            self.producer_ids.next_id,
            existing_partitions=existing_partitions,
        )
        self.replica_manager.leadership_listeners.append(coordinator.on_leadership_change)
        return coordinator

    def _transaction_coordinator_of(self, transactional_id: str) -> int | None:
        """The broker leading the id's `__transaction_state` partition, as far as we know."""
        partitions = self.config.transaction_state_log_num_partitions
        return self.marker_transport.leader_of(
            TRANSACTION_STATE, partition_for(transactional_id, partitions)
        )

    def __repr__(self) -> str:
        return f"<Broker {self.broker_id}>"

    @property
    def controller(self) -> Controller:
        if self._controller is None:
            raise KafkaStorageError("the controller service is not started yet")
        return self._controller

    @property
    def broker_epoch(self) -> int:
        """The czxid of our registration, -1 before it; it changes with each new session."""
        return self._controller.broker_epoch if self._controller is not None else -1

    def _config_changed(self, entity_type: str, name: str, config: dict[str, str]) -> None:
        """A dynamic config (ConfigChangeListener): the logs' settings, the controller's
        (unclean leader election), and the client quotas (users and client ids). A broker's
        passwords are stored encrypted: its parts get them decrypted."""
        if entity_type == znodes.CONFIG_BROKERS:
            config = decode_passwords(config, is_password_config, self.config.password_decoders)
        self.local_logs.config_changed(entity_type, name, config)
        self.quotas.config_changed(entity_type, name, config)
        if entity_type == znodes.CONFIG_TOPICS:
            self.replication_quotas.topic_config_changed(name, config)
        elif entity_type == znodes.CONFIG_BROKERS:
            self.replication_quotas.broker_config_changed(name, config)
            if name == str(self.broker_id):
                reloaded = self.socket_server.reconfigure(config)
                if reloaded is not None:
                    self.inter_broker_security.current = reloaded.inter_broker_security
        if self._controller is not None:
            self._controller.config_changed(entity_type, name, config)

    # -- running -----------------------------------------------------------------------------

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def request_stop(self) -> None:
        """Begin a graceful stop (what SIGTERM does)."""
        self._stop.set()

    def registration(self) -> BrokerRegistration:
        endpoints = tuple(
            BrokerEndpoint(e.listener, e.host, e.port, e.security_protocol)
            for e in self.socket_server.advertised()
        )
        return BrokerRegistration(self.broker_id, endpoints, self.config.broker_rack)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        load_handlers()
        config = self.config
        await self.zk.start()
        try:
            self.cluster_id = await self.zk.create_or_get_cluster_id(znodes.new_cluster_id())
            log.info("broker %d: cluster id %s", self.broker_id, self.cluster_id)
            async with trio.open_nursery() as nursery:
                await self._reencode_passwords()
                # Every topic's and broker's dynamic config first: logs open with them.
                await nursery.start(self.config_listener.run)
                if self.acl_authorizer is not None:  # every ACL, before any request
                    await nursery.start(self.acl_authorizer.run)
                log_manager = await trio.to_thread.run_sync(
                    partial(self.local_logs.open_manager, self.cluster_id)
                )
                await nursery.start(log_manager.run)
                await self.socket_server.bind()
                await nursery.start(self.replica_manager.run)
                await nursery.start(self.group_coordinator.run)
                await nursery.start(self.marker_transport.run)
                await nursery.start(self.transaction_coordinator.run)
                await nursery.start(self.socket_server.serve)
                self._controller = Controller(
                    self.zk, self.controller_settings, self.registration()
                )
                await nursery.start(self._controller.run)
                for entity, dynamic in self.local_logs.dynamic_broker_configs.items():
                    self._controller.config_changed(znodes.CONFIG_BROKERS, entity, dynamic)
                if config.metrics_prometheus_listener is not None:
                    host, port = config.metrics_prometheus_listener
                    await nursery.start(serve_prometheus, host, port, self.metrics, self.quotas)
                if config.metrics_log_interval_ms > 0:
                    nursery.start_soon(
                        self.metrics.log_periodically, config.metrics_log_interval_ms / 1000
                    )
                log.info(
                    "broker %d started on %s",
                    self.broker_id,
                    ", ".join(str(e) for e in self.socket_server.advertised()),
                )
                self.started.set()
                task_status.started()
                await self._stop.wait()
                await self._shutdown_gracefully()
                nursery.cancel_scope.cancel()
        finally:
            await self.zk.close()
            log.info("broker %d stopped", self.broker_id)

    async def _reencode_passwords(self) -> None:
        """With password.encoder.old.secret set (a secret rotation), this broker's stored
        passwords are encrypted again with password.encoder.secret, as Kafka does at start."""
        encoder = self.config.password_encoder
        if encoder is None or self.config.password_encoder_old_secret is None:
            return
        entity = str(self.broker_id)
        stored = await self.zk.get_entity_configs(znodes.CONFIG_BROKERS, entity)
        if not any(is_password_config(key) for key in stored):
            return
        decoded = decode_passwords(stored, is_password_config, self.config.password_decoders)
        encoded = encode_passwords(decoded, is_password_config, encoder)
        await self.zk.change_entity_config(znodes.CONFIG_BROKERS, entity, encoded)
        log.info("broker %d: dynamic passwords encrypted with the new secret", self.broker_id)

    def _install_gauges(self) -> None:
        """The gauges of the controller and the coordinators, read when scraped."""

        def offline_partitions() -> int:
            controller = self._controller
            if controller is None or not controller.is_active:
                return 0
            return len(controller.context.partitions_with_offline_leader())

        def transactional_ids() -> int:
            owned = self.transaction_coordinator.manager.owned.values()
            return sum(len(p.transactions) for p in owned)

        sessions = self.services.fetch_sessions
        self.metrics.gauges.update(
            {
                "kafka_server_fetchsessioncache_numincrementalfetchsessions": (
                    "Incremental fetch sessions (KIP-227) cached",
                    lambda: len(sessions),
                ),
                "kafka_server_fetchsessioncache_numincrementalfetchpartitionscached": (
                    "Partitions in the cached incremental fetch sessions",
                    lambda: sessions.total_partitions,
                ),
                "kafka_controller_kafkacontroller_activecontrollercount": (
                    "1 on the active controller",
                    lambda: int(self._controller is not None and self._controller.is_active),
                ),
                "kafka_controller_kafkacontroller_offlinepartitionscount": (
                    "Partitions without a live leader (on the active controller)",
                    offline_partitions,
                ),
                "kafka_coordinator_group_groupmetadatamanager_numgroups": (
                    "Consumer groups this broker coordinates",
                    lambda: len(self.group_coordinator.manager.groups),
                ),
                "kafka_coordinator_transaction_transactionstatemanager_numtransactionalids": (
                    "Transactional ids this broker coordinates (Gregor's)",
                    transactional_ids,
                ),
            }
        )

    async def _shutdown_gracefully(self) -> None:
        log.info("broker %d shutting down", self.broker_id)
        if self.config.controlled_shutdown_enable and self.broker_epoch >= 0:
            # While we still serve: if we are the controller, the request is for us.
            try:
                await controlled_shutdown(
                    self.zk, self.controller_settings, self.broker_epoch, self.controller
                )
            except* Exception as group:
                log.error("controlled shutdown failed; stopping anyway", exc_info=group)
        self.replica_manager.shutdown()
