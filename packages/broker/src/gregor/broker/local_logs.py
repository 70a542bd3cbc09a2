"""LocalLogs: this broker's logs and the settings they run with.

A topic's log settings are the broker's `log.*` defaults (with the dynamic broker defaults
of /config/brokers applied) and the topic's overrides from /config/topics. They are kept
here and applied to the open logs as they change. The log manager (gregor-storage) is
opened by the broker once the dynamic configs are known; until then nothing is hosted.

A log directory whose I/O fails (a disk full, a disk gone) goes offline in the log manager.
Once every directory is offline the broker can serve no replica, so it halts as Kafka's
LogManager does ("all log dirs have failed"): its ZooKeeper session then expires and the
controller elects other leaders from the ISR. Restarted once the disk is back, it recovers
its logs and catches up as any restarted broker. (With several directories and one offline,
its partitions answer KAFKA_STORAGE_ERROR until a restart; the controller is not told, as
Kafka tells it through /log_dir_event_notification.)
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Mapping
from pathlib import Path

from gregor.broker.config import BrokerConfig
from gregor.broker.zk import KafkaZkClient, znodes
from gregor.protocol.errors import KafkaStorageError
from gregor.storage.config import LogConfig
from gregor.storage.log import Log
from gregor.storage.manager import LogManager

log = logging.getLogger(__name__)


class LocalLogs:
    def __init__(self, config: BrokerConfig, zk: KafkaZkClient) -> None:
        self.config = config
        self.zk = zk
        self.log_defaults = config.log_config
        self._log_manager: LogManager | None = None
        self._topic_overrides: dict[str, dict[str, str]] = {}
        self._topic_configs: dict[str, LogConfig] = {}
        self._dynamic_broker_configs: dict[str, dict[str, str]] = {}

    @property
    def log_manager(self) -> LogManager:
        if self._log_manager is None:
            raise KafkaStorageError("the log manager is not started yet")
        return self._log_manager

    def open_manager(self, cluster_id: str) -> LogManager:
        """Open the log directories (recovery included: call in a thread)."""
        self._log_manager = LogManager.open(
            self.config.log_manager_config,
            self.log_defaults,
            cluster_id=cluster_id,
            topic_config=self.topic_log_config,
        )
        self._log_manager.on_dir_failure = self._dir_failed
        return self._log_manager

    def _dir_failed(self, path: Path) -> None:
        """In the thread whose I/O failed: halt once no log directory is left."""
        manager = self.log_manager
        if manager.live_dirs:
            log.error("log directory %s is offline: its partitions wait for a restart", path)
            return
        log.critical(
            "broker %d: every log directory (%s) is offline; halting",
            self.config.broker_id,
            ", ".join(str(d) for d in manager.offline_dirs),
        )
        logging.shutdown()
        os._exit(1)  # as Kafka's Exit.halt: nothing more may be written or acknowledged

    # -- the logs ----------------------------------------------------------------------------

    def open_log(self, topic: str, partition: int, topic_id: uuid.UUID | None) -> Log:
        """The partition's log, created if this broker has none yet."""
        return self.log_manager.get_or_create_log(
            topic, partition, topic_id=topic_id, config=self.topic_log_config(topic)
        )

    def delete_log(self, topic: str, partition: int) -> None:
        self.log_manager.delete_log(topic, partition)

    def hosted_topics(self) -> set[str]:
        return {topic for topic, _ in self.log_manager.logs}

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
        log.info("broker %d: dynamic broker settings %s", self.config.broker_id, dict(dynamic))

    def config_changed(self, entity_type: str, name: str, config: Mapping[str, str]) -> None:
        """A dynamic config (ConfigChangeListener): topics' logs and this broker's defaults."""
        if entity_type == znodes.CONFIG_TOPICS:
            self.update_topic_config(name, config)
        elif entity_type == znodes.CONFIG_BROKERS and name in (
            str(self.config.broker_id),
            znodes.DEFAULT_ENTITY,
        ):
            self._dynamic_broker_configs[name] = dict(config)
            self.update_dynamic_broker_config(
                {
                    **self._dynamic_broker_configs.get(znodes.DEFAULT_ENTITY, {}),
                    **self._dynamic_broker_configs.get(str(self.config.broker_id), {}),
                }
            )

    @property
    def dynamic_broker_configs(self) -> dict[str, dict[str, str]]:
        return self._dynamic_broker_configs

    async def load_new_topic_configs(self, topics: set[str]) -> None:
        """Read the overrides of topics about to get their first log here: a new topic's
        config is written with it, without a change notification."""
        new = topics - self.hosted_topics()
        if new:
            found = await self.zk.get_entities_configs(znodes.CONFIG_TOPICS, new)
            for topic, overrides in found.items():
                self.update_topic_config(topic, overrides)
