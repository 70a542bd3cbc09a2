"""Two real clusters, A and B (three brokers and a ZooKeeper server each, as two
datacenters have), shared by the module, and `gregor-mirror` processes between them."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from gregor.devcluster import LocalCluster
from gregor_testing.cluster import cluster_fixture
from gregor_testing.mirror import MirrorProcess

cluster_a = cluster_fixture("cluster_a", "module", {}, own_zookeeper=True)
cluster_b = cluster_fixture("cluster_b", "module", {}, own_zookeeper=True)

# Short intervals, so that tests wait seconds for what MM2 does every minutes.
FAST = {
    "refresh.topics.interval.seconds": "2",
    "refresh.groups.interval.seconds": "2",
    "sync.topic.configs.interval.seconds": "2",
    "emit.checkpoints.interval.seconds": "1",
    "sync.group.offsets.interval.seconds": "1",
    "emit.heartbeats.interval.seconds": "1",
    "sync.group.offsets.enabled": "true",
    "replication.factor": "3",
}


@pytest.fixture
def start_mirror(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Callable[..., MirrorProcess]]:
    """Start gregor-mirror processes with an mm2.properties of exactly these settings, for
    the clusters named; each is stopped at the end (its log shown if the test failed)."""
    started: list[MirrorProcess] = []

    def start(props: Mapping[str, str], clusters: list[str]) -> MirrorProcess:
        path = tmp_path / f"mm2-{len(started)}.properties"
        path.write_text("".join(f"{k} = {v}\n" for k, v in props.items()))
        mirror = MirrorProcess(path, clusters, tmp_path / f"mirror-{len(started)}.log").start()
        started.append(mirror)
        return mirror

    yield start
    failed = getattr(request.node, "report_call", None)
    for mirror in started:
        try:
            mirror.stop()
        finally:
            if failed is None or failed.failed:
                print(f"----- {mirror.log_path} -----")
                print(mirror.log_tail())


@pytest.fixture
def mirror_factory(
    start_mirror: Callable[..., MirrorProcess], cluster_a: LocalCluster, cluster_b: LocalCluster
) -> Callable[..., MirrorProcess]:
    """Start mirrors with an mm2.properties of clusters A and B plus these settings."""

    def make(settings: Mapping[str, str], clusters: list[str] = ["B"]) -> MirrorProcess:  # noqa: B006
        props = {
            "clusters": "A, B",
            "A.bootstrap.servers": cluster_a.bootstrap_servers,
            "B.bootstrap.servers": cluster_b.bootstrap_servers,
            **FAST,
            **settings,
        }
        return start_mirror(props, clusters)

    return make
