"""The consumer group suites' cluster: three brokers shared by every module here that needs
no cluster of its own (tests use groups and topics of their own), with Kafka's defaults but a
short initial rebalance delay and session timeouts the tests can afford."""

from __future__ import annotations

from gregor_testing.cluster import cluster_fixture

GROUP_PROPERTIES = {
    "group.initial.rebalance.delay.ms": "500",
    "group.min.session.timeout.ms": "1000",
    # KIP-848 groups: members heartbeat (and so learn of changes) twice a second.
    "group.consumer.heartbeat.interval.ms": "500",
    "group.consumer.session.timeout.ms": "6000",
}


group_cluster = cluster_fixture("group_cluster", "package", GROUP_PROPERTIES)
