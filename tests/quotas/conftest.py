"""One three-broker cluster for the quota tests (each test uses client ids of its own)."""

from gregor_testing.cluster import cluster_fixture

quota_cluster = cluster_fixture("quota_cluster", "module", {})
