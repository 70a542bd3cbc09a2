"""The transaction coordinator's broker is SIGKILLed mid-transaction: the partition's new
leader loads `__transaction_state` and takes over. A producer that goes on commits its
transaction through the new coordinator; a transaction whose producer is gone is aborted
by the new coordinator at its timeout (its epoch fenced), so read_committed readers move
past it. Then the killed broker comes back as a follower, its producer state and
`.txnindex` recovered and caught up: no transaction open, the aborted one indexed."""

from __future__ import annotations

import struct
from collections.abc import Callable

from confluent_kafka import Producer
from transactions.helpers import read_all
from transactions.test_wire_views import describe_producers

from gregor.devcluster import LocalCluster
from gregor.protocol.errors import ErrorCode as E
from gregor_testing.cluster import (
    create_topic,
    partitions_of,
    unique_topic,
    wait_for,
    wait_unregistered,
)
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
    # The killed broker recovers its replicas of the topic from an unclean shutdown and
    # catches up: its producer state has both producers with no transaction open, and its
    # .txnindex names the aborted transaction.
    in_sync = {victim.broker_id}
    wait_for(
        lambda: all(in_sync <= set(p.isr_nodes) for p in partitions_of(cluster, topic).values()),
        120,
        "the restarted broker back in sync",
    )

    def settled() -> bool:
        found = describe_producers(victim, {topic: [0, 1]})
        return all(
            error == E.NONE and len(active) == 2 and {s[5] for s in active} == {-1}
            for error, active in found.values()
        )

    wait_for(settled, 60, "both producers' transactions ended on the restarted broker")
    aborted = {  # (partition, producer id, first offset) of each aborted transaction
        (p, entry[1], entry[2])
        for p in range(2)
        for index in (victim.data_dir / f"{topic}-{p}").glob("*.txnindex")
        for entry in struct.iter_unpack(">hqqqq", index.read_bytes())
    }
    described = describe_producers(victim, {topic: [0, 1]})
    pids = {s[0] for _, active in described.values() for s in active}
    # One producer's transaction, from offset 0 (the lost-* records) in both partitions.
    assert {(p, first) for p, _, first in aborted} == {(0, 0), (1, 0)}, aborted
    [pid] = {pid for _, pid, _ in aborted}
    assert pid in pids, (pid, pids)
