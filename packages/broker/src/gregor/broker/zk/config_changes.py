"""Dynamic configs on every broker: /config/changes notifications, applied in order.

Whoever changes /config/topics/T, /config/brokers/<id|<default>>, /config/users/<u>,
/config/users/<u>/clients/<c> or /config/clients/<c> also creates a sequential
/config/changes/config_change_N naming the entity. Every broker runs a
`ConfigChangeListener`: at start it applies every entity's current config, then applies
each new notification once, in sequence order, by reading the entity's config afresh. After
a reconnection or a new session it looks again, so nothing is missed. Notifications older
than 15 minutes are purged, as Kafka does.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import trio

from gregor.broker.zk import znodes
from gregor.broker.zk.client import KafkaZkClient
from gregor.broker.zk.session import ZooKeeperClosedError, ZooKeeperError

log = logging.getLogger(__name__)

# (entity type, entity name, its whole dynamic config now): "topics", "orders", {...}
ConfigChange = Callable[[str, str, dict[str, str]], None]
EXPIRATION_S = 15 * 60
APPLIED_AT_START = (
    znodes.CONFIG_TOPICS,
    znodes.CONFIG_BROKERS,
    znodes.CONFIG_USERS,
    znodes.CONFIG_CLIENTS,
)


class ConfigChangeListener:
    def __init__(
        self, zk: KafkaZkClient, on_change: ConfigChange, expiration_s: float = EXPIRATION_S
    ) -> None:
        self.zk = zk
        self.on_change = on_change
        self.expiration_s = expiration_s
        self.last_applied = -1
        self._wakeup = trio.Event()

    def session_expired(self) -> None:
        pass

    def session_established(self) -> None:
        self._wake()

    def _wake(self) -> None:
        self._wakeup.set()

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Apply every current config, then follow notifications until cancelled."""
        self.zk.set_child_handler(znodes.CONFIG_CHANGES, self._wake)
        self.zk.add_session_listener(self)
        try:
            pending = await self._notifications()
            for entity_type in APPLIED_AT_START:
                for name in await self.zk.get_all_entities_with_config(entity_type):
                    await self._apply(entity_type, name)
            # What is announced before now is applied above.
            self.last_applied = max((n for n, _ in pending), default=-1)
            task_status.started()
            while True:
                await self._wakeup.wait()
                self._wakeup = trio.Event()
                try:
                    await self._process()
                except ZooKeeperClosedError:
                    return
                except ZooKeeperError as exc:
                    log.warning("config change notifications: %s; retrying", exc)
                    self._wake()
                    await trio.sleep(1.0)
        finally:
            self.zk.set_child_handler(znodes.CONFIG_CHANGES, None)
            self.zk.remove_session_listener(self)

    async def _notifications(self) -> list[tuple[int, str]]:
        """(sequence number, node name) of every notification, in order; arms the watch."""
        prefix = znodes.CONFIG_CHANGE_PREFIX
        found = []
        for name in await self.zk.get_children(znodes.CONFIG_CHANGES, watch=True):
            number = znodes.sequence_number(name, prefix)
            if name.startswith(prefix) and number.isdigit():
                found.append((int(number), name))
        return sorted(found)

    async def _process(self) -> None:
        notifications = await self._notifications()
        for number, name in notifications:
            if number <= self.last_applied:
                continue
            path = f"{znodes.CONFIG_CHANGES}/{name}"
            found = await self.zk.get_data(path)
            if found is not None:
                try:
                    entity_type, entity = znodes.decode_config_change(path, found[0])
                except znodes.ZNodeDataError as exc:
                    log.warning("ignoring config change notification: %s", exc)
                else:
                    await self._apply(entity_type, entity)
            self.last_applied = number
        await self._purge(notifications)

    async def _apply(self, entity_type: str, name: str) -> None:
        config = await self.zk.get_entity_configs(entity_type, name)
        # A user's config holds its SCRAM credentials: those are not logged.
        shown = {k: "[hidden]" if k.startswith("SCRAM-") else v for k, v in config.items()}
        log.info("applying the dynamic config of %s %s: %s", entity_type, name, shown)
        try:
            self.on_change(entity_type, name, config)
        except Exception:
            log.exception("applying the config of %s %s failed", entity_type, name)

    async def _purge(self, notifications: list[tuple[int, str]]) -> None:
        now = time.time()
        expired = []
        for _number, name in notifications:
            found = await self.zk.get_data(f"{znodes.CONFIG_CHANGES}/{name}")
            if found is not None and now - found[1].created > self.expiration_s:
                expired.append(f"{znodes.CONFIG_CHANGES}/{name}")
        if expired:
            await self.zk.delete_paths(expired, epoch_zk_version=-1)
