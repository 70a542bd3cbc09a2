"""The transaction suites' cluster: three brokers shared by the modules here that need no
cluster of their own (each test uses topics, groups and transactional ids of its own), with
fewer `__transaction_state` partitions than Kafka's 50 so the cluster is ready sooner, and a
short initial rebalance delay."""

from __future__ import annotations

from gregor_testing.cluster import cluster_fixture

TXN_PROPERTIES = {
    "transaction.state.log.num.partitions": "5",
    "group.initial.rebalance.delay.ms": "300",
}

txn_cluster = cluster_fixture("txn_cluster", "package", TXN_PROPERTIES)
