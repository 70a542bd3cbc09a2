"""The package's cluster: three brokers with every kind of listener (see
gregor_testing.security), replicating over SASL_SSL, with SCRAM users in ZooKeeper."""

from __future__ import annotations

import gc
import warnings
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer as CkConsumer
from confluent_kafka import Producer as CkProducer
from confluent_kafka.admin import AdminClient as CkAdmin

from gregor.devcluster import LocalCluster, ZooKeeper
from gregor_testing.security import Pki, pki_fixture, running_secure_cluster

pki = pki_fixture()


@pytest.fixture(scope="package")
def secure_cluster(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    zookeeper: ZooKeeper,
    pki: Pki,
) -> Iterator[LocalCluster]:
    directory = tmp_path_factory.mktemp("secure")
    with running_secure_cluster(request, directory, zookeeper, pki, 3) as cluster:
        yield cluster


def _librdkafka_clients() -> set[int]:
    return {id(o) for o in gc.get_objects() if isinstance(o, (CkProducer, CkConsumer, CkAdmin))}


@pytest.fixture(autouse=True)
def no_leaked_librdkafka_clients(request: pytest.FixtureRequest) -> Iterator[None]:
    """A librdkafka client still alive after its test goes on reconnecting and logging for
    the rest of the session: each test closes or drops its own (fixtures' aside). One that
    only a reference cycle holds (a kept traceback) is collected here; one still reachable
    after that is reported as a warning (test_confluent_kafka_matrix leaves two, not yet
    understood)."""
    before = _librdkafka_clients()
    yield
    fixtures = {id(v) for v in getattr(request.node, "funcargs", {}).values()}
    leaked = _librdkafka_clients() - before - fixtures
    if leaked:
        gc.collect()
        leaked &= _librdkafka_clients()
        if leaked:
            warnings.warn(f"{len(leaked)} librdkafka clients outlive the test", stacklevel=1)
