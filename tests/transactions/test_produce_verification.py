"""A partition leader verifies a transactional batch that would start a transaction on its
partition with the transaction coordinator (KIP-890 part 1): a produce to a partition the
producer never added is refused with INVALID_TXN_STATE and nothing is appended. Transactional
batches in a Produce without a transactional id are refused as Kafka refuses them
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED), so they cannot skip the check."""

from __future__ import annotations

from typing import Any

from transactions.helpers import read_all
from transactions.test_bad_input import init

from gregor.devcluster import LocalCluster
from gregor.protocol.apis.add_partitions_to_txn import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnTopic,
)
from gregor.protocol.apis.end_txn import EndTxnRequest
from gregor.protocol.apis.list_offsets import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from gregor.protocol.apis.produce import PartitionProduceData, ProduceRequest, TopicProduceData
from gregor.protocol.errors import ErrorCode
from gregor.protocol.records import BatchBuilder
from gregor_testing.cluster import WireClient, create_topic, leader_of, unique_topic
from gregor_testing.faults import TRANSACTION_KEY, find_coordinator

E = ErrorCode


def produce(
    cluster: LocalCluster,
    tid: str | None,
    topic: str,
    partition: int,
    pid: int,
    epoch: int,
    seq: int,
) -> Any:
    builder = BatchBuilder(
        producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True
    )
    builder.append(f"{partition}-{seq}".encode())
    request = ProduceRequest(
        transactional_id=tid,
        acks=-1,
        timeout_ms=10_000,
        topic_data=[TopicProduceData(topic, [PartitionProduceData(partition, builder.build())])],
    )
    with WireClient(leader_of(cluster, topic, partition)) as conn:
        return conn.request(request, 9).responses[0].partition_responses[0]


def add_partition(
    coordinator: WireClient, tid: str, pid: int, epoch: int, topic: str, partition: int
) -> int:
    """AddPartitionsToTxn v3 of one partition; its error code."""
    add = AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=tid,
        v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[AddPartitionsToTxnTopic(topic, [partition])],
    )
    [added] = coordinator.request(add, 3).results_by_topic_v3_and_below
    return int(added.results_by_partition[0].partition_error_code)


def end_offset(cluster: LocalCluster, topic: str, partition: int) -> int:
    request = ListOffsetsRequest(
        replica_id=-1,
        topics=[ListOffsetsTopic(topic, [ListOffsetsPartition(partition, timestamp=-1)])],
    )
    with WireClient(leader_of(cluster, topic, partition)) as conn:
        answer = conn.request(request, 5).topics[0].partitions[0]
    assert answer.error_code == E.NONE
    return int(answer.offset)


def test_produce_to_a_partition_not_in_the_transaction(txn_cluster: LocalCluster) -> None:
    topic = unique_topic("txn-verify")
    create_topic(txn_cluster, topic, partitions=2, replication_factor=3)
    tid = unique_topic("tid-verify")
    with WireClient(find_coordinator(txn_cluster, tid, TRANSACTION_KEY)) as coord:
        error, pid, epoch = init(coord, tid)
        assert error == E.NONE
        assert add_partition(coord, tid, pid, epoch, topic, 0) == E.NONE
        # Partition 1 was never added: refused, its log untouched.
        before = end_offset(txn_cluster, topic, 1)
        refused = produce(txn_cluster, tid, topic, 1, pid, epoch, 0)
        assert refused.error_code == E.INVALID_TXN_STATE
        anonymous = produce(txn_cluster, None, topic, 1, pid, epoch, 0)
        assert anonymous.error_code == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        assert produce(txn_cluster, None, topic, 0, pid, epoch, 0).error_code == (
            E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        )
        assert end_offset(txn_cluster, topic, 1) == before
        # Partition 0 was added: its first batch is verified, the next one simply appended.
        assert produce(txn_cluster, tid, topic, 0, pid, epoch, 0).error_code == E.NONE
        second = produce(txn_cluster, tid, topic, 0, pid, epoch, 1)
        assert (second.error_code, second.base_offset) == (E.NONE, 1)
        commit = EndTxnRequest(
            transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=True
        )
        assert coord.request(commit, 3).error_code == E.NONE
    assert read_all(txn_cluster, topic, 2, "read_committed") == {0: [b"0-0", b"0-1"], 1: []}
