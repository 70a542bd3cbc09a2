"""The transaction coordinator's broker is SIGKILLed mid-transaction: the partition's new
leader loads `__transaction_state` and takes over. A producer that goes on commits its
transaction through the new coordinator; a transaction whose producer is gone is aborted
by the new coordinator at its timeout (its epoch fenced), so read_committed readers move
past it. Then the killed broker comes back as a follower."""

from __future__ import annotations

from collections.abc import Callable

from confluent_kafka import Producer
from transactions.helpers import read_all

from gregor.devcluster import LocalCluster
from gregor_testing.cluster import create_topic, unique_topic, wait_unregistered
from gregor_testing.faults import TRANSACTION_KEY, find_coordinator

FAILOVER_PROPERTIES = {
    "transaction.state.log.num.partitions": "3",
    "replica.lag.time.max.ms": "3000",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
}


def test_coordinator_killed_mid_transaction(cluster_factory: Callable[..., LocalCluster]) -> None:
    cluster = cluster_factory(3, **FAILOVER_PROPERTIES)
    topic = unique_topic("txn-failover")
    create_topic(cluster, topic, partitions=2, replication_factor=3)
    tid, abandoned_tid = unique_topic("tid-goes-on"), unique_topic("tid-abandoned")
    goes_on = Producer({"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": tid})
    goes_on.init_transactions(60)
    victim = find_coordinator(cluster, tid, TRANSACTION_KEY)
    abandoned = None
    # An abandoned transaction on the same coordinator, if its id lands there.
    for i in range(50):
        candidate = f"{abandoned_tid}-{i}"
        if find_coordinator(cluster, candidate, TRANSACTION_KEY) is victim:
            abandoned = Producer(
                {
                    "bootstrap.servers": cluster.bootstrap_servers,
                    "transactional.id": candidate,
                    "transaction.timeout.ms": 5000,
                }
            )
            break
    assert abandoned is not None
    abandoned.init_transactions(60)
    abandoned.begin_transaction()
    for i in range(10):
        abandoned.produce(topic, value=f"lost-{i}".encode(), partition=i % 2)
    assert abandoned.flush(30) == 0
    goes_on.begin_transaction()
    for i in range(10):
        goes_on.produce(topic, value=f"kept-{i}".encode(), partition=i % 2)
    assert goes_on.flush(30) == 0

    victim.kill()
    wait_unregistered(cluster, victim.broker_id)
    # The producer finds the new coordinator and commits there.
    goes_on.commit_transaction(120)
    assert find_coordinator(cluster, tid, TRANSACTION_KEY) is not victim
    # The abandoned transaction is aborted at its timeout: read_committed gets to the end.
    seen = read_all(cluster, topic, 2, "read_committed", timeout=120)
    assert seen == {p: [f"kept-{i}".encode() for i in range(p, 10, 2)] for p in range(2)}
    everything = read_all(cluster, topic, 2, "read_uncommitted")
    assert sorted(v for vs in everything.values() for v in vs) == sorted(
        [f"kept-{i}".encode() for i in range(10)] + [f"lost-{i}".encode() for i in range(10)]
    )
    victim.start()
