"""Dynamic config changes reach every broker: existing configs at start, each notification
once and in order, again after a session expiry; old notifications are purged."""

from __future__ import annotations

from typing import Any

import trio
from kazoo.client import KazooClient

from gregor.broker.zk import KafkaZkClient, znodes
from gregor.broker.zk.config_changes import ConfigChangeListener


async def test_every_listener_applies_every_change_in_order(
    control_plane: Any, zk_connect: str
) -> None:
    admin: KafkaZkClient = control_plane.admin
    await admin.change_entity_config("topics", "before", {"retention.ms": "1"})
    await admin.change_entity_config("brokers", "<default>", {"log.retention.ms": "2"})
    seen: list[list[tuple[str, str, dict[str, str]]]] = [[], []]
    clients = [KafkaZkClient(zk_connect, session_timeout_ms=6000) for _ in seen]
    async with trio.open_nursery() as nursery:
        for client, log in zip(clients, seen, strict=True):
            await client.start()
            listener = ConfigChangeListener(client, lambda t, n, c, log=log: log.append((t, n, c)))
            await nursery.start(listener.run)
        # The configs that existed before are applied at start.
        for log in seen:
            assert sorted(log) == [
                ("brokers", "<default>", {"log.retention.ms": "2"}),
                ("topics", "before", {"retention.ms": "1"}),
            ]
            log.clear()
        await admin.change_entity_config("topics", "t", {"segment.ms": "10"})
        await admin.change_entity_config("topics", "t", {"segment.ms": "20"})
        await admin.change_entity_config("brokers", "1", {"log.retention.ms": "3"})
        expected = [
            ("topics", "t", {"segment.ms": "20"}),  # each reads the config as it is now
            ("topics", "t", {"segment.ms": "20"}),
            ("brokers", "1", {"log.retention.ms": "3"}),
        ]
        await control_plane.wait_until(lambda: all(len(log) >= 2 for log in seen), "changes")
        await control_plane.wait_until(
            lambda: all(log[-1] == expected[-1] for log in seen), "every change applied"
        )
        for log in seen:
            assert log[-1] == expected[-1] and len(log) <= 3
            assert all(entry in expected for entry in log)
        # A session expiry in between loses nothing.
        session_id, password = clients[0].session.kazoo.client_id
        thief = KazooClient(zk_connect.split("/")[0], client_id=(session_id, password))
        thief.start(timeout=15)
        thief.stop()
        thief.close()
        await control_plane.wait_until(
            lambda: clients[0].session_id not in (session_id, -1), "a new session"
        )
        seen[0].clear()
        await admin.change_entity_config("topics", "after", {"retention.ms": "5"})
        await control_plane.wait_until(
            lambda: ("topics", "after", {"retention.ms": "5"}) in seen[0], "the change after"
        )
        nursery.cancel_scope.cancel()
    for client in clients:
        await client.close()


async def test_old_notifications_are_purged(control_plane: Any, zk_connect: str) -> None:
    admin: KafkaZkClient = control_plane.admin
    seen: list[str] = []
    client = KafkaZkClient(zk_connect)
    await client.start()
    async with trio.open_nursery() as nursery:
        # Everything is old at once, here: each notification goes once it was applied.
        listener = ConfigChangeListener(client, lambda t, n, c: seen.append(n), expiration_s=0)
        await nursery.start(listener.run)
        for name in ("a", "b", "c"):
            await admin.change_entity_config("topics", name, {"retention.ms": "1"})
        await control_plane.wait_until(lambda: seen == ["a", "b", "c"], "all applied")

        async def purged() -> bool:
            return await admin.get_children(znodes.CONFIG_CHANGES) == []

        await control_plane.wait_until_async(purged, "the notifications purged")
        nursery.cancel_scope.cancel()
    await client.close()
