"""One three-broker cluster for the `gregor` command's tests (each uses topics and groups of
its own), with a short initial rebalance delay so that groups form quickly."""

from __future__ import annotations

from gregor_testing.cluster import cluster_fixture

tools_cluster = cluster_fixture(
    "tools_cluster",
    "package",
    {"group.initial.rebalance.delay.ms": "300", "group.min.session.timeout.ms": "1000"},
)
