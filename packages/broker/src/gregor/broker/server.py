"""Broker: one broker process, its services, and their startup and shutdown order.

Handlers reach the services through `ctx.broker`:

- `config`            the validated BrokerConfig
- `broker_id`, `cluster_id`, `broker_epoch` (the czxid of our /brokers/ids registration)
- `controller`        this broker's controller service: it registers the broker in
                      /brokers/ids (again after a session expiry) and takes part in
                      controller elections
- `metadata_cache`    what the controller's UpdateMetadata requests said
- `replica_manager`   the partitions this broker hosts (logs, leader/follower state)
- `log_manager`       gregor-storage's LogManager: the log directories and their logs
- `zk`                the KafkaZkClient (gregor.broker.zk)
- `metrics`           the in-process metrics
- `topic_log_config(topic)` a topic's LogConfig (dynamic overrides from /config applied)
- `socket_server`     the listeners (`socket_server.advertised()`: the endpoints in use)
- `group_coordinator` the consumer groups of the `__consumer_offsets` partitions led here
- `internal_topics`   creates `__consumer_offsets` and `__transaction_state` on first use

Startup, as Kafka's: ZooKeeper session and cluster id; the log directories (recovery runs
in threads); the listeners are bound; the replica manager starts; requests are served; the
controller service registers the broker in /brokers/ids (its ephemeral znode is what makes it
live for the controller) and joins the controller election.

Stop (SIGTERM): controlled shutdown first, so the controller moves leadership away, then
everything is cancelled; the log manager closes every log cleanly on its way out. A SIGKILL
at any moment loses nothing acknowledged: the next start recovers the logs.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from functools import partial

import trio

from gregor.broker.apis import load_handlers
from gregor.broker.config import BrokerConfig
from gregor.broker.controller import Controller, ControllerSettings, controlled_shutdown
from gregor.broker.controller.admin import NewTopic, TopicAdmin
from gregor.broker.coordinator.group import broker_group_coordinator
from gregor.broker.coordinator.internal_topics import InternalTopicCreator
from gregor.broker.metadata_cache import MetadataCache
from gregor.broker.metrics import Metrics
from gregor.broker.network import SocketServer
from gregor.broker.replica_manager import ReplicaManager
from gregor.broker.topic_names import is_internal
from gregor.broker.zk import (
    BrokerEndpoint,
    BrokerRegistration,
    KafkaZkClient,
    znodes,
)
from gregor.broker.zk.config_changes import ConfigChangeListener
from gregor.protocol.errors import (
    ErrorCode,
    KafkaError,
    KafkaStorageError,
    TopicAlreadyExistsError,
)
from gregor.storage.config import LogConfig
from gregor.storage.manager import LogManager

log = logging.getLogger(__name__)


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.cluster_id = ""
        self.controller_settings = ControllerSettings.from_config(config)
        self.metrics = Metrics()
        self.metadata_cache = MetadataCache(config.broker_id)
        self.socket_server = SocketServer(self)
        self.zk = KafkaZkClient(
            config.zookeeper_connect,
            config.zookeeper_session_timeout_ms,
            config.zookeeper_connection_timeout_ms,
        )
        self.replica_manager = ReplicaManager(self)
        self.group_coordinator = broker_group_coordinator(self)
        self.internal_topics = InternalTopicCreator(self)
        self._log_manager: LogManager | None = None
        self._controller: Controller | None = None
        self._topic_overrides: dict[str, dict[str, str]] = {}
        self._topic_configs: dict[str, LogConfig] = {}
        self.log_defaults = config.log_config
        self._dynamic_broker_configs: dict[str, dict[str, str]] = {}
        self.config_listener = ConfigChangeListener(self.zk, self._config_changed)
        self._stop = trio.Event()
        self._nursery: trio.Nursery | None = None
        self.started = trio.Event()

    def __repr__(self) -> str:
        return f"<Broker {self.broker_id}>"

    @property
    def log_manager(self) -> LogManager:
        if self._log_manager is None:
            raise KafkaStorageError("the log manager is not started yet")
        return self._log_manager

    @property
    def controller(self) -> Controller:
        if self._controller is None:
            raise KafkaStorageError("the controller service is not started yet")
        return self._controller

    @property
    def broker_epoch(self) -> int:
        """The czxid of our registration, -1 before it; it changes with each new session."""
        return self._controller.broker_epoch if self._controller is not None else -1

    # -- topic configs -----------------------------------------------------------------------

    def topic_log_config(self, topic: str) -> LogConfig:
        """The topic's log settings: the broker's `log.*` defaults and its overrides."""
        found = self._topic_configs.get(topic)
        return found if found is not None else self.log_defaults

    def update_topic_config(self, topic: str, overrides: Mapping[str, str]) -> LogConfig:
        """A topic's overrides changed (/config/topics/T): apply them to its logs."""
        config = LogConfig.from_properties(overrides, defaults=self.log_defaults)
        if overrides:
            self._topic_overrides[topic] = dict(overrides)
            self._topic_configs[topic] = config
        else:
            self._topic_overrides.pop(topic, None)
            self._topic_configs.pop(topic, None)
        if self._log_manager is not None:
            self._log_manager.update_config(topic, config)
        return config

    def update_dynamic_broker_config(self, dynamic: Mapping[str, str]) -> None:
        """Dynamic broker settings (/config/brokers): new defaults for every topic."""
        defaults = LogConfig.from_server_properties({**self.config.properties, **dynamic})
        if defaults == self.log_defaults:
            return
        self.log_defaults = defaults
        self._topic_configs = {
            topic: LogConfig.from_properties(overrides, defaults=defaults)
            for topic, overrides in self._topic_overrides.items()
        }
        if self._log_manager is not None:
            self._log_manager.default_config = defaults
            for topic in {t for t, _ in self._log_manager.logs}:
                self._log_manager.update_config(topic, self.topic_log_config(topic))
        log.info("broker %d: dynamic broker settings %s", self.broker_id, dict(dynamic))

    def _config_changed(self, entity_type: str, name: str, config: dict[str, str]) -> None:
        """A dynamic config (ConfigChangeListener): topics' logs and this broker's defaults."""
        if entity_type == znodes.CONFIG_TOPICS:
            self.update_topic_config(name, config)
        elif entity_type == znodes.CONFIG_BROKERS and name in (
            str(self.broker_id),
            znodes.DEFAULT_ENTITY,
        ):
            self._dynamic_broker_configs[name] = dict(config)
            self.update_dynamic_broker_config(
                {
                    **self._dynamic_broker_configs.get(znodes.DEFAULT_ENTITY, {}),
                    **self._dynamic_broker_configs.get(str(self.broker_id), {}),
                }
            )
        if self._controller is not None:
            self._controller.config_changed(entity_type, name, config)

    async def load_topic_configs(self, topics: set[str]) -> None:
        """Read the overrides of topics about to get their first log here: a new topic's
        config is written with it, without a change notification."""
        if topics:
            found = await self.zk.get_entities_configs(znodes.CONFIG_TOPICS, topics)
            for topic, overrides in found.items():
                self.update_topic_config(topic, overrides)

    # -- auto-creation -----------------------------------------------------------------------

    async def auto_create_topics(self, names: list[str]) -> dict[str, int]:
        """Create topics a Metadata request named (`num.partitions`,
        `default.replication.factor`), as a ZooKeeper-mode broker does: the assignment znode
        is written and the controller creates the partitions. The error code to report for
        each: LEADER_NOT_AVAILABLE while it has no leader yet."""
        admin = TopicAdmin(
            self.zk,
            self.config.num_partitions,
            self.config.default_replication_factor,
            self.log_defaults,
        )
        out: dict[str, int] = {}
        for name in names:
            try:
                if is_internal(name):
                    await self.internal_topics.create(name)  # with their own settings
                else:
                    await admin.create_topic(NewTopic(name), validate_only=False)
            except TopicAlreadyExistsError:
                pass
            except KafkaError as exc:
                log.info("cannot auto-create topic %s: %s", name, exc)
                out[name] = exc.code
                continue
            out[name] = ErrorCode.LEADER_NOT_AVAILABLE
        return out

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
                self._nursery = nursery
                # Every topic's and broker's dynamic config first: logs open with them.
                await nursery.start(self.config_listener.run)
                self._log_manager = await trio.to_thread.run_sync(
                    partial(
                        LogManager.open,
                        config.log_manager_config,
                        self.log_defaults,
                        cluster_id=self.cluster_id,
                        topic_config=self.topic_log_config,
                    )
                )
                await nursery.start(self.log_manager.run)
                await self.socket_server.bind()
                await nursery.start(self.replica_manager.run)
                await nursery.start(self.group_coordinator.run)
                await nursery.start(self.socket_server.serve)
                self._controller = Controller(
                    self.zk, self.controller_settings, self.registration()
                )
                await nursery.start(self._controller.run)
                for entity, dynamic in self._dynamic_broker_configs.items():
                    self._controller.config_changed(znodes.CONFIG_BROKERS, entity, dynamic)
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
