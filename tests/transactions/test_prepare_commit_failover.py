"""The coordinator's broker dies after PrepareCommit is written but before every marker is:
the new coordinator finds the transaction prepared when it loads `__transaction_state`,
writes the markers and completes the commit, and read_committed readers see its records.

The markers are held back by the transaction's own partition: it has one replica, on a
broker killed before the commit, so its COMMIT marker cannot be written until that broker
is back, and by then the coordinator that wrote PrepareCommit is dead.
"""

from __future__ import annotations

from collections.abc import Callable

from confluent_kafka import Producer
from transactions.helpers import read_all
from transactions.test_bad_input import describe

from gregor.broker.topic_names import TRANSACTION_STATE
from gregor.devcluster import LocalCluster
from gregor_testing.cluster import (
    WireClient,
    create_topic,
    log_mark,
    partitions_of,
    unique_topic,
    wait_for,
    wait_for_log,
    wait_unregistered,
)
from gregor_testing.faults import TRANSACTION_KEY, find_coordinator

PROPERTIES = {"transaction.state.log.num.partitions": "3", "replica.lag.time.max.ms": "3000"}


def state_of(cluster: LocalCluster, tid: str) -> str:
    with WireClient(find_coordinator(cluster, tid, TRANSACTION_KEY)) as conn:
        return str(describe(conn, tid).transaction_state)


def test_prepare_commit_is_completed_by_the_next_coordinator(
    cluster_factory: Callable[..., LocalCluster],
) -> None:
    cluster = cluster_factory(3, **PROPERTIES)
    tid = unique_topic("tid-prepared")
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": tid})
    producer.init_transactions(60)
    first = find_coordinator(cluster, tid, TRANSACTION_KEY)
    stranded, survivor = (
        cluster.broker((first.broker_id + k) % 3) for k in (1, 2)
    )  # the partition's only replica; the next coordinator
    held, replicated = unique_topic("txn-held"), unique_topic("txn-replicated")
    create_topic(cluster, held, assignment={0: [stranded.broker_id]})
    create_topic(cluster, replicated, partitions=1, replication_factor=3)
    values = [f"v-{i}".encode() for i in range(10)]
    producer.begin_transaction()
    for value in values:
        producer.produce(held, value, partition=0)
        producer.produce(replicated, value, partition=0)
    assert producer.flush(30) == 0

    stranded.kill()
    wait_unregistered(cluster, stranded.broker_id)
    # The controller takes it out of the ISRs with a new leader epoch, which is a new
    # coordinator epoch: an EndTxn racing that would be answered NOT_COORDINATOR after its
    # PrepareCommit was written, and its retry CONCURRENT_TRANSACTIONS until the held
    # marker is.
    wait_for(
        lambda: all(
            stranded.broker_id not in p.isr_nodes
            for p in partitions_of(cluster, TRANSACTION_STATE, first.broker_id).values()
        ),
        60,
        f"broker {stranded.broker_id} out of the ISRs of {TRANSACTION_STATE}",
    )
    # EndTxn is answered once PrepareCommit is written; the held partition's marker waits.
    producer.commit_transaction(60)
    assert state_of(cluster, tid) == "PrepareCommit"
    # The markers are written after the answer: the live partition's comes soon.
    wait_for(
        lambda: read_all(cluster, replicated, 1, "read_committed") == {0: values},
        30,
        "the replicated partition's marker",
    )
    assert state_of(cluster, tid) == "PrepareCommit"  # the held one's cannot be written

    mark = log_mark(survivor)
    first.kill()
    wait_unregistered(cluster, first.broker_id)
    wait_for_log(survivor, "was left in PrepareCommit; completing it", mark, timeout=60)
    stranded.start()
    wait_for(lambda: state_of(cluster, tid) == "CompleteCommit", 60, "the commit completed")
    assert find_coordinator(cluster, tid, TRANSACTION_KEY) is not first
    assert read_all(cluster, held, 1, "read_committed") == {0: values}
    assert read_all(cluster, replicated, 1, "read_committed") == {0: values}
    # The first coordinator comes back as a follower and changes nothing.
    first.start()
    producer.begin_transaction()
    producer.produce(held, b"after", partition=0)
    producer.commit_transaction(60)
    assert read_all(cluster, held, 1, "read_committed") == {0: [*values, b"after"]}
