"""pytest fixtures for real processes: ZooKeeper (and, as they arrive, brokers).

One ZooKeeper server runs for the whole session; each test that asks for `zk_connect` gets a
fresh chroot on it (`127.0.0.1:PORT/t-<n>`), which Kafka's `zookeeper.connect` supports, so
tests are isolated without paying a JVM start each.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from gregor.devcluster import ZooKeeper

_chroots = itertools.count()


@contextmanager
def zookeeper_client(connect: str) -> Iterator[KazooClient]:
    """A started kazoo client on `connect` (a chroot included), stopped and closed after."""
    client = KazooClient(connect)
    client.start(timeout=15)
    try:
        yield client
    finally:
        client.stop()
        client.close()


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeper]:
    server = ZooKeeper(tmp_path_factory.mktemp("zookeeper"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def zk_connect(zookeeper: ZooKeeper) -> str:
    """A `zookeeper.connect` string with a chroot of this test's own (created empty)."""
    chroot = f"/t-{next(_chroots)}"
    with zookeeper_client(zookeeper.connect) as client:
        client.ensure_path(chroot)
    return zookeeper.connect + chroot


@pytest.fixture
def own_zookeeper(tmp_path: Path) -> Iterator[ZooKeeper]:
    """A ZooKeeper server for this test alone (for tests that kill or pause it)."""
    server = ZooKeeper(tmp_path / "zookeeper")
    server.start()
    try:
        yield server
    finally:
        server.stop()
