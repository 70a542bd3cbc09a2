"""Dynamic configs from ZooKeeper, applied to this broker's logs (Kafka's ZkConfigManager).

At startup, before the logs are loaded, every topic's overrides (/config/topics/T) and the
dynamic broker settings (/config/brokers/<our id> and /config/brokers/<default>) are read, so
each log opens with its topic's settings. Afterwards the broker watches /config/changes: each
notification names an entity whose znode is read again and applied (a topic's logs get their
new LogConfig; a broker change gives every topic new defaults).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from gregor.broker.zk import znodes
from gregor.protocol.errors import KafkaError

if TYPE_CHECKING:
    from gregor.broker.server import Broker

log = logging.getLogger(__name__)


class DynamicConfigManager:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.zk = broker.zk
        self._last_change = -1  # the sequence number of the last notification applied
        self._changed = trio.Event()

    async def load(self) -> None:
        """Read every topic override and the dynamic broker settings (at startup)."""
        self._last_change = max(await self._pending(), default=(-1, ""))[0]
        topics = await self.zk.get_all_entities_with_config(znodes.CONFIG_TOPICS)
        for topic, overrides in (
            await self.zk.get_entities_configs(znodes.CONFIG_TOPICS, topics)
        ).items():
            self._apply_topic(topic, overrides)
        await self._reload_broker()

    async def load_topics(self, topics: set[str]) -> None:
        """Read the overrides of topics about to get their first log here (a new topic's
        config is written with it, without a change notification)."""
        if topics:
            for topic, overrides in (
                await self.zk.get_entities_configs(znodes.CONFIG_TOPICS, topics)
            ).items():
                self._apply_topic(topic, overrides)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self.zk.set_child_handler(znodes.CONFIG_CHANGES, self._changed.set)
        try:
            self._changed.set()  # arm the watch
            task_status.started()
            while True:
                await self._changed.wait()
                self._changed = trio.Event()
                try:
                    await self._process_changes()
                except Exception:
                    log.exception("cannot apply config changes; will retry on the next one")
        finally:
            self.zk.set_child_handler(znodes.CONFIG_CHANGES, None)

    async def _pending(self) -> list[tuple[int, str]]:
        children = await self.zk.get_children(znodes.CONFIG_CHANGES, watch=True)
        out = []
        for child in children:
            number = znodes.sequence_number(child, znodes.CONFIG_CHANGE_PREFIX)
            if number.isdigit():
                out.append((int(number), child))
        return sorted(out)

    async def _process_changes(self) -> None:
        for number, child in await self._pending():
            if number <= self._last_change:
                continue
            found = await self.zk.get_data(f"{znodes.CONFIG_CHANGES}/{child}")
            self._last_change = number
            if found is None:
                continue
            try:
                entity_type, name = znodes.decode_config_change(child, found[0])
            except znodes.ZNodeDataError as exc:
                log.warning("ignoring config change %s: %s", child, exc)
                continue
            if entity_type == znodes.CONFIG_TOPICS:
                self._apply_topic(name, await self.zk.get_entity_configs(entity_type, name))
            elif entity_type == znodes.CONFIG_BROKERS and name in (
                str(self.broker.broker_id),
                znodes.DEFAULT_ENTITY,
            ):
                await self._reload_broker()

    def _apply_topic(self, topic: str, overrides: dict[str, str]) -> None:
        try:
            self.broker.update_topic_config(topic, overrides)
        except KafkaError as exc:
            log.warning("ignoring invalid config of topic %s: %s", topic, exc)
        else:
            log.info("topic %s config overrides: %s", topic, overrides or "none")

    async def _reload_broker(self) -> None:
        found = await self.zk.get_entities_configs(
            znodes.CONFIG_BROKERS, [str(self.broker.broker_id), znodes.DEFAULT_ENTITY]
        )
        try:
            self.broker.update_dynamic_broker_config(
                {**found[znodes.DEFAULT_ENTITY], **found[str(self.broker.broker_id)]}
            )
        except KafkaError as exc:
            log.warning("ignoring invalid dynamic broker config: %s", exc)
