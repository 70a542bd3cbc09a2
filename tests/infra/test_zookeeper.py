"""The ZooKeeper the tests and the local cluster use: a real server, chroots, clean stop."""

from __future__ import annotations

from pathlib import Path

from gregor.devcluster import ZooKeeper, four_letter_word
from gregor_testing.processes import zookeeper_client


def test_chroot_isolates_tests(zookeeper: ZooKeeper, zk_connect: str) -> None:
    with zookeeper_client(zk_connect) as client:
        client.ensure_path("/brokers/ids")
        client.create("/brokers/ids/1", b'{"host":"x"}', ephemeral=True)
        assert client.get_children("/brokers/ids") == ["1"]
    with zookeeper_client(zookeeper.connect) as root:
        chroot = zk_connect.split("/", 1)[1]
        assert root.exists(f"/{chroot}/brokers/ids") is not None
        assert root.exists("/brokers") is None  # nothing leaked outside the chroot
        assert root.get_children(f"/{chroot}/brokers/ids") == []  # the ephemeral went with it


def test_stop_leaves_no_process(tmp_path: Path) -> None:
    server = ZooKeeper(tmp_path)
    server.start()
    assert four_letter_word(server.host, server.port, "ruok") == "imok"
    server.stop()
    assert not server.is_running()
    assert four_letter_word(server.host, server.port, "ruok") == ""
