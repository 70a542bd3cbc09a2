"""Two real clusters, A and B (three brokers each, each in a ZooKeeper chroot of its own),
shared by the module, and `gregor-mirror` processes between them."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from gregor.devcluster import LocalCluster
from gregor_testing.cluster import cluster_fixture
from gregor_testing.mirror import MirrorProcess

cluster_a = cluster_fixture("cluster_a", "module", {})
cluster_b = cluster_fixture("cluster_b", "module", {})

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
def mirror_factory(
    request: pytest.FixtureRequest, tmp_path: Path, cluster_a: LocalCluster, cluster_b: LocalCluster
) -> Iterator[Callable[..., MirrorProcess]]:
    """Start mirrors with an mm2.properties of clusters A and B plus these settings."""
    started: list[MirrorProcess] = []

    def make(settings: Mapping[str, str], clusters: list[str] = ["B"]) -> MirrorProcess:  # noqa: B006
        props = {
            "clusters": "A, B",
            "A.bootstrap.servers": cluster_a.bootstrap_servers,
            "B.bootstrap.servers": cluster_b.bootstrap_servers,
            **FAST,
            **settings,
        }
        path = tmp_path / f"mm2-{len(started)}.properties"
        path.write_text("".join(f"{k} = {v}\n" for k, v in props.items()))
        mirror = MirrorProcess(path, clusters, tmp_path / f"mirror-{len(started)}.log").start()
        started.append(mirror)
        return mirror

    yield make
    failed = getattr(request.node, "report_call", None)
    for mirror in started:
        try:
            mirror.stop()
        finally:
            if failed is None or failed.failed:
                print(f"----- {mirror.log_path} -----")
                print(mirror.log_tail())
