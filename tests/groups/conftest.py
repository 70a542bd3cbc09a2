"""The consumer group suites' cluster: three brokers shared by every module here that needs
no cluster of its own (tests use groups and topics of their own), with Kafka's defaults but a
short initial rebalance delay and session timeouts the tests can afford."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gregor.broker.devcluster import LocalCluster, ZooKeeper
from gregor_testing.cluster import scoped_cluster

GROUP_PROPERTIES = {
    "group.initial.rebalance.delay.ms": "500",
    "group.min.session.timeout.ms": "1000",
}


@pytest.fixture(scope="package")
def group_cluster(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    zookeeper: ZooKeeper,
) -> Iterator[LocalCluster]:
    yield from scoped_cluster(
        request, tmp_path_factory.mktemp("group-cluster"), zookeeper, GROUP_PROPERTIES
    )
