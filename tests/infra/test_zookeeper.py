"""The ZooKeeper the tests and the local cluster use: a real server, chroots, clean stop."""

from __future__ import annotations

from pathlib import Path

from kazoo.client import KazooClient

from gregor.broker.devcluster import ZooKeeper, four_letter_word


def test_chroot_isolates_tests(zookeeper: ZooKeeper, zk_connect: str) -> None:
    client = KazooClient(zk_connect)
    client.start(timeout=15)
    try:
        client.ensure_path("/brokers/ids")
        client.create("/brokers/ids/1", b'{"host":"x"}', ephemeral=True)
        assert client.get_children("/brokers/ids") == ["1"]
    finally:
        client.stop()
        client.close()
    root = KazooClient(zookeeper.connect)
    root.start(timeout=15)
    try:
        chroot = zk_connect.split("/", 1)[1]
        assert root.exists(f"/{chroot}/brokers/ids") is not None
        assert root.exists("/brokers") is None  # nothing leaked outside the chroot
        assert root.get_children(f"/{chroot}/brokers/ids") == []  # the ephemeral went with it
    finally:
        root.stop()
        root.close()


def test_stop_leaves_no_process(tmp_path: Path) -> None:
    server = ZooKeeper(tmp_path)
    server.start()
    assert four_letter_word(server.host, server.port, "ruok") == "imok"
    server.stop()
    assert not server.is_running()
    assert four_letter_word(server.host, server.port, "ruok") == ""
