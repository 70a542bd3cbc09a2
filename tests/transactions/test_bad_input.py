"""Requests a transaction coordinator must refuse, on the wire, each with Kafka's error code
and nothing half-applied; and zombie fencing with two confluent-kafka producers of one
transactional id."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaException, Producer
from groups.test_bad_input import join, join_request, stable_member
from transactions.helpers import read_all

from gregor.devcluster import LocalCluster
from gregor.protocol.apis.add_partitions_to_txn import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnTopic,
)
from gregor.protocol.apis.describe_transactions import DescribeTransactionsRequest
from gregor.protocol.apis.end_txn import EndTxnRequest
from gregor.protocol.apis.init_producer_id import InitProducerIdRequest
from gregor.protocol.apis.offset_fetch import OffsetFetchRequest, OffsetFetchRequestTopic
from gregor.protocol.apis.txn_offset_commit import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
)
from gregor.protocol.errors import ErrorCode
from gregor_testing.cluster import WireClient, create_topic, unique_topic
from gregor_testing.faults import GROUP_KEY, TRANSACTION_KEY, find_coordinator

E = ErrorCode


def init(conn: WireClient, tid: str, timeout_ms: int = 60000) -> tuple[int, int, int]:
    """(error, producer id, epoch), retrying while the coordinator loads."""
    for _ in range(100):
        r = conn.request(
            InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=timeout_ms), 1
        )
        if r.error_code not in (E.COORDINATOR_LOAD_IN_PROGRESS, E.CONCURRENT_TRANSACTIONS):
            return r.error_code, r.producer_id, r.producer_epoch
    raise AssertionError("the coordinator never answered")


def describe(conn: WireClient, tid: str):  # type: ignore[no-untyped-def]
    return conn.request(DescribeTransactionsRequest(transactional_ids=[tid]), 0).transaction_states[
        0
    ]


def test_bad_requests(txn_cluster: LocalCluster) -> None:
    topic = unique_topic("txn-bad")
    create_topic(txn_cluster, topic, partitions=1, replication_factor=3)
    tid = unique_topic("tid-bad")
    with WireClient(find_coordinator(txn_cluster, tid, TRANSACTION_KEY)) as conn:
        # A transaction timeout of 0, or over transaction.max.timeout.ms: nothing is created.
        assert init(conn, tid, 0)[0] == E.INVALID_TRANSACTION_TIMEOUT
        assert init(conn, tid, 900_001)[0] == E.INVALID_TRANSACTION_TIMEOUT
        assert describe(conn, tid).error_code == E.TRANSACTIONAL_ID_NOT_FOUND
        # AddPartitionsToTxn for a producer id the coordinator never gave.
        add = AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=tid,
            v3_and_below_producer_id=123456,
            v3_and_below_producer_epoch=0,
            v3_and_below_topics=[AddPartitionsToTxnTopic(topic, [0])],
        )
        result = conn.request(add, 3).results_by_topic_v3_and_below
        assert [
            (t.name, [(p.partition_index, p.partition_error_code) for p in t.results_by_partition])
            for t in result
        ] == [(topic, [(0, E.INVALID_PRODUCER_ID_MAPPING)])]
        assert describe(conn, tid).error_code == E.TRANSACTIONAL_ID_NOT_FOUND
        # Two inits: the second bumps the epoch; the first epoch is stale.
        error, pid, epoch = init(conn, tid)
        assert error == E.NONE
        error, pid2, epoch2 = init(conn, tid)
        assert (error, pid2, epoch2) == (E.NONE, pid, epoch + 1)
        stale = EndTxnRequest(
            transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=True
        )
        assert conn.request(stale, 1).error_code == E.INVALID_PRODUCER_EPOCH
        assert conn.request(stale, 3).error_code == E.PRODUCER_FENCED
        # EndTxn without a transaction.
        current = EndTxnRequest(
            transactional_id=tid, producer_id=pid, producer_epoch=epoch2, committed=True
        )
        assert conn.request(current, 3).error_code == E.INVALID_TXN_STATE
        state = describe(conn, tid)
        assert (state.transaction_state, state.producer_epoch, state.topics) == (
            "Empty",
            epoch2,
            [],
        )


def test_txn_offset_commit_for_a_gone_generation(txn_cluster: LocalCluster) -> None:
    topic = unique_topic("txn-gen")
    create_topic(txn_cluster, topic, partitions=1, replication_factor=3)
    group = unique_topic("g-gone")
    with WireClient(find_coordinator(txn_cluster, group, GROUP_KEY)) as conn:
        commit = TxnOffsetCommitRequest(
            transactional_id="whoever",
            group_id=group,
            producer_id=1,
            producer_epoch=0,
            generation_id=7,
            member_id="",
            topics=[TxnOffsetCommitRequestTopic(topic, [TxnOffsetCommitRequestPartition(0, 10)])],
        )
        for _ in range(100):
            r = conn.request(commit, 3)
            error = r.topics[0].partitions[0].error_code
            if error != E.COORDINATOR_LOAD_IN_PROGRESS:
                break
        assert error == E.ILLEGAL_GENERATION
        fetch = OffsetFetchRequest(group_id=group, topics=[OffsetFetchRequestTopic(topic, [0])])
        fetched = conn.request(fetch, 5).topics[0].partitions[0]
        assert (fetched.committed_offset, fetched.error_code) == (-1, E.NONE)
    # A live group whose generation moved on: its member's commit of the old one is refused.
    live = unique_topic("g-moved-on")
    coordinator = find_coordinator(txn_cluster, live, GROUP_KEY)
    first = stable_member(coordinator, live)
    again = join(coordinator, join_request(live, first.member_id))  # the leader rejoins
    assert (again.error_code, again.generation_id) == (E.NONE, first.generation_id + 1)
    with WireClient(coordinator) as conn:
        stale = TxnOffsetCommitRequest(
            transactional_id="whoever",
            group_id=live,
            producer_id=1,
            producer_epoch=0,
            generation_id=first.generation_id,
            member_id=first.member_id,
            topics=[TxnOffsetCommitRequestTopic(topic, [TxnOffsetCommitRequestPartition(0, 10)])],
        )
        refused = conn.request(stale, 3).topics[0].partitions[0].error_code
        assert refused == E.ILLEGAL_GENERATION
        fetch = OffsetFetchRequest(group_id=live, topics=[OffsetFetchRequestTopic(topic, [0])])
        fetched = conn.request(fetch, 5).topics[0].partitions[0]
        assert (fetched.committed_offset, fetched.error_code) == (-1, E.NONE)


def test_zombie_producer_is_fenced(txn_cluster: LocalCluster) -> None:
    topic = unique_topic("txn-zombie")
    create_topic(txn_cluster, topic, partitions=1, replication_factor=3)
    tid = unique_topic("tid-zombie")
    config = {"bootstrap.servers": txn_cluster.bootstrap_servers, "transactional.id": tid}
    zombie = Producer(config)
    zombie.init_transactions(60)
    zombie.begin_transaction()
    zombie.produce(topic, value=b"zombie-1", partition=0)
    assert zombie.flush(30) == 0
    # A new instance with the same id: the zombie's open transaction is aborted.
    fresh = Producer(config)
    fresh.init_transactions(60)
    fresh.begin_transaction()
    fresh.produce(topic, value=b"fresh-1", partition=0)
    fresh.commit_transaction(60)
    # The zombie's next write is refused with the old epoch: librdkafka reports itself
    # fenced (a fatal error) at the produce, the flush or the commit, whichever comes first.
    with pytest.raises(KafkaException) as raised:
        zombie.produce(topic, value=b"zombie-2", partition=0)
        zombie.flush(10)
        zombie.commit_transaction(30)
    assert raised.value.args[0].fatal()
    assert read_all(txn_cluster, topic, 1, "read_committed")[0] == [b"fresh-1"]
