"""The package's cluster: three brokers with every kind of listener (see
gregor_testing.security), replicating over SASL_SSL, with SCRAM users in ZooKeeper."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gregor.devcluster import LocalCluster, ZooKeeper
from gregor_testing.cluster import start_cluster, stop_cluster
from gregor_testing.security import (
    LISTENERS,
    USERS,
    Pki,
    add_scram_users,
    pki_fixture,
    security_properties,
)

pki = pki_fixture()


@pytest.fixture(scope="package")
def secure_cluster(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    zookeeper: ZooKeeper,
    pki: Pki,
) -> Iterator[LocalCluster]:
    cluster = start_cluster(
        tmp_path_factory.mktemp("secure"), zookeeper, 3, security_properties(pki), LISTENERS
    )
    try:
        add_scram_users(cluster.zookeeper_connect, USERS)
        yield cluster
    finally:
        stop_cluster(cluster, request.session.testsfailed > 0)
