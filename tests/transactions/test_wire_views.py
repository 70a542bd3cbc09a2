"""What the wire shows of transactions while they are open and once they end, each with
Kafka's answer: offsets of TxnOffsetCommit pending until the transaction's marker
(OffsetFetch with and without require_stable), the last stable offset against the high
watermark (ListOffsets by isolation level), a partition's producers (DescribeProducers, from
its leader, a follower and a broker without a replica), a coordinator's transactions
(ListTransactions with its filters), and AddOffsetsToTxn with good and bad producers.

Requests are sent raw (gregor-protocol's messages over a socket); the open transaction of
the ListOffsets test is confluent-kafka's (`Transactions`).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import Producer
from groups.test_bad_input import commit
from transactions.helpers import read_all
from transactions.test_bad_input import describe, init
from transactions.test_produce_verification import add_partition, produce

from gregor.broker.coordinator.partitioning import partition_for
from gregor.devcluster import BrokerProcess, LocalCluster
from gregor.protocol.apis.add_offsets_to_txn import AddOffsetsToTxnRequest
from gregor.protocol.apis.describe_producers import DescribeProducersRequest, TopicRequest
from gregor.protocol.apis.end_txn import EndTxnRequest
from gregor.protocol.apis.init_producer_id import InitProducerIdRequest
from gregor.protocol.apis.list_offsets import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from gregor.protocol.apis.list_transactions import ListTransactionsRequest
from gregor.protocol.apis.offset_fetch import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopic,
    OffsetFetchRequestTopics,
)
from gregor.protocol.apis.produce import PartitionProduceData, ProduceRequest, TopicProduceData
from gregor.protocol.apis.txn_offset_commit import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
)
from gregor.protocol.errors import ErrorCode
from gregor.protocol.records import BatchBuilder
from gregor_testing.cluster import WireClient, create_topic, leader_of, unique_topic, wait_for
from gregor_testing.faults import GROUP_KEY, TRANSACTION_KEY, find_coordinator
from gregor_testing.transactions import Transactions, values

E = ErrorCode
CONSUMER_OFFSETS = "__consumer_offsets"
OFFSETS_PARTITIONS = 50  # offsets.topic.num.partitions: Kafka's default
LATEST = -1  # ListOffsets' timestamp for the end of the log
READ_UNCOMMITTED, READ_COMMITTED = 0, 1
# A coordinator still loading its partition, or a transaction still writing its markers.
BUSY = (E.COORDINATOR_LOAD_IN_PROGRESS, E.CONCURRENT_TRANSACTIONS)


def settled(ask: Callable[[], int], what: str, timeout: float = 60.0) -> int:
    """`ask()`'s error code, asked again while a coordinator answers BUSY."""
    answers: list[int] = []

    def answered() -> bool:
        answers.append(ask())
        return answers[-1] not in BUSY

    wait_for(answered, timeout, what)
    return answers[-1]


def add_offsets(conn: WireClient, tid: str, pid: int, epoch: int, group: str, version: int) -> int:
    request = AddOffsetsToTxnRequest(
        transactional_id=tid, producer_id=pid, producer_epoch=epoch, group_id=group
    )
    return int(conn.request(request, version).error_code)


def end_txn(conn: WireClient, tid: str, pid: int, epoch: int, committed: bool) -> int:
    request = EndTxnRequest(
        transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=committed
    )
    return int(conn.request(request, 3).error_code)


def fetch_offset(
    conn: WireClient, group: str, topic: str, require_stable: bool, version: int
) -> tuple[int, int]:
    """(committed offset, error) of partition 0 as OffsetFetch `version` answers it (v7:
    one group; v8+: the groups array)."""
    if version < 8:
        request = OffsetFetchRequest(
            group_id=group,
            topics=[OffsetFetchRequestTopic(topic, [0])],
            require_stable=require_stable,
        )
        response = conn.request(request, version)
        assert response.error_code == E.NONE
        [found] = response.topics[0].partitions
    else:
        request = OffsetFetchRequest(
            groups=[OffsetFetchRequestGroup(group, topics=[OffsetFetchRequestTopics(topic, [0])])],
            require_stable=require_stable,
        )
        [answer] = conn.request(request, version).groups
        assert (answer.group_id, answer.error_code) == (group, E.NONE)
        [found] = answer.topics[0].partitions
    assert (found.partition_index, found.metadata, found.committed_leader_epoch) == (0, "", -1)
    return int(found.committed_offset), int(found.error_code)


def fetched(conn: WireClient, group: str, topic: str) -> dict[tuple[int, bool], tuple[int, int]]:
    """fetch_offset by (version, require_stable), for v7 and v8."""
    return {
        (version, stable): fetch_offset(conn, group, topic, stable, version)
        for version in (7, 8)
        for stable in (False, True)
    }


def while_pending(previous: int) -> dict[tuple[int, bool], tuple[int, int]]:
    """What `fetched` answers while a transaction's offset is pending: the committed offset
    read uncommitted, UNSTABLE_OFFSET_COMMIT (offset -1) for the partition read stable."""
    return {
        (version, stable): (-1, E.UNSTABLE_OFFSET_COMMIT) if stable else (previous, E.NONE)
        for version in (7, 8)
        for stable in (False, True)
    }


def stable_at(offset: int) -> dict[tuple[int, bool], tuple[int, int]]:
    return {(version, stable): (offset, E.NONE) for version in (7, 8) for stable in (False, True)}


def txn_commit_offset(
    conn: WireClient, tid: str, pid: int, epoch: int, group: str, topic: str, offset: int
) -> int:
    request = TxnOffsetCommitRequest(
        transactional_id=tid,
        group_id=group,
        producer_id=pid,
        producer_epoch=epoch,
        topics=[TxnOffsetCommitRequestTopic(topic, [TxnOffsetCommitRequestPartition(0, offset)])],
    )
    [answer] = conn.request(request, 3).topics
    assert answer.name == topic
    return int(answer.partitions[0].error_code)


def test_txn_offsets_stay_pending_until_the_marker(txn_cluster: LocalCluster) -> None:
    topic = unique_topic("txn-pending")
    create_topic(txn_cluster, topic, partitions=1, replication_factor=3)
    group = unique_topic("g-pending")
    tid = unique_topic("tid-pending")
    group_broker = find_coordinator(txn_cluster, group, GROUP_KEY)
    # An offset committed outside any transaction first.
    assert settled(lambda: commit(group_broker, group, "", -1, topic, 3), "a plain commit") == (
        E.NONE
    )
    with (
        WireClient(find_coordinator(txn_cluster, tid, TRANSACTION_KEY)) as coordinator,
        WireClient(group_broker) as offsets,
    ):
        assert fetched(offsets, group, topic) == stable_at(3)
        error, pid, epoch = init(coordinator, tid)
        assert error == E.NONE
        # (offset sent, whether the transaction commits, committed before, committed after)
        for offset, commits, before, after in ((5, True, 3, 5), (9, False, 5, 5)):
            assert settled(
                lambda: add_offsets(coordinator, tid, pid, epoch, group, 3), "AddOffsetsToTxn"
            ) == (E.NONE)
            assert txn_commit_offset(offsets, tid, pid, epoch, group, topic, offset) == E.NONE
            assert fetched(offsets, group, topic) == while_pending(before)
            assert end_txn(coordinator, tid, pid, epoch, committed=commits) == E.NONE
            # The marker reaches __consumer_offsets after EndTxn's answer: committed, the
            # offset is the new one for both; aborted, the old one stays.
            wait_for(
                lambda: fetched(offsets, group, topic) == stable_at(after),  # noqa: B023
                30,
                f"offset {after} after the marker",
            )
            ended = ("CompleteCommit" if commits else "CompleteAbort", pid, epoch)
            wait_for(
                lambda: transaction_of(coordinator, tid) == ended,  # noqa: B023
                30,
                f"the transaction to be {ended[0]}",
            )


def transaction_of(conn: WireClient, tid: str) -> tuple[str, int, int]:
    """DescribeTransactions: (state, producer id, epoch)."""
    state = describe(conn, tid)
    assert state.error_code == E.NONE
    return state.transaction_state, state.producer_id, state.producer_epoch


def latest_offset(
    broker: BrokerProcess, topic: str, isolation: int, version: int
) -> tuple[int, int, int]:
    """(error, timestamp, offset) of ListOffsets for the latest offset of partition 0."""
    request = ListOffsetsRequest(
        replica_id=-1,
        isolation_level=isolation,
        topics=[ListOffsetsTopic(topic, [ListOffsetsPartition(0, timestamp=LATEST)])],
    )
    with WireClient(broker) as conn:
        [answer] = conn.request(request, version).topics[0].partitions
    return int(answer.error_code), int(answer.timestamp), int(answer.offset)


def test_list_offsets_by_isolation_level(txn_cluster: LocalCluster) -> None:
    topic = unique_topic("txn-lso")
    create_topic(txn_cluster, topic, partitions=1, replication_factor=3)
    leader = leader_of(txn_cluster, topic, 0)
    txns = Transactions(txn_cluster, topic)
    txns.write(values("c", 3), "commit")  # offsets 0-2, its marker 3
    txns.write(values("o", 2), None)  # offsets 4-5, open
    for version in (2, 5, 8):
        assert latest_offset(leader, topic, READ_COMMITTED, version) == (E.NONE, -1, 4)
        assert latest_offset(leader, topic, READ_UNCOMMITTED, version) == (E.NONE, -1, 6)
    txns.producer.commit_transaction(60)
    wait_for(
        lambda: latest_offset(leader, topic, READ_COMMITTED, 5) == (E.NONE, -1, 7),
        30,
        "the last stable offset after the commit marker",
    )
    assert latest_offset(leader, topic, READ_UNCOMMITTED, 5) == (E.NONE, -1, 7)


def describe_producers(
    broker: BrokerProcess, topics: dict[str, list[int]]
) -> dict[tuple[str, int], tuple[int, set[tuple[int, ...]]]]:
    """DescribeProducers: by partition, (error, the active producers as tuples of
    (id, epoch, last sequence, last timestamp, coordinator epoch, transaction start))."""
    request = DescribeProducersRequest(topics=[TopicRequest(t, ps) for t, ps in topics.items()])
    with WireClient(broker) as conn:
        response = conn.request(request, 0)
    return {
        (topic.name, p.partition_index): (
            int(p.error_code),
            {
                (
                    s.producer_id,
                    s.producer_epoch,
                    s.last_sequence,
                    s.last_timestamp,
                    s.coordinator_epoch,
                    s.current_txn_start_offset,
                )
                for s in p.active_producers
            },
        )
        for topic in response.topics
        for p in topic.partitions
    }


def list_transactions(
    conn: WireClient,
    states: list[str] | None = None,
    pids: list[int] | None = None,
    duration_ms: int = -1,
) -> tuple[list[str], list[tuple[str, int, str]]]:
    """ListTransactions v1: (unknown state filters, [(transactional id, producer id, state)])."""
    request = ListTransactionsRequest(
        state_filters=states or [], producer_id_filters=pids or [], duration_filter=duration_ms
    )
    response = conn.request(request, 1)
    assert response.error_code == E.NONE
    listed = [
        (t.transactional_id, t.producer_id, t.transaction_state)
        for t in response.transaction_states
    ]
    return list(response.unknown_state_filters), listed


def test_describe_producers_and_list_transactions(txn_cluster: LocalCluster) -> None:
    topic = unique_topic("txn-producers")
    create_topic(txn_cluster, topic, assignment={0: [0, 1]})
    leader = leader_of(txn_cluster, topic, 0)
    follower = txn_cluster.broker(1 - leader.broker_id)
    outsider = txn_cluster.broker(2)
    # An idempotent producer: one batch of three records, sequences 0-2, at offsets 0-2.
    with WireClient(leader) as conn:
        idempotent = conn.request(InitProducerIdRequest(transactional_id=None), 1)
        assert (idempotent.error_code, idempotent.producer_epoch) == (E.NONE, 0)
        stamp = int(time.time() * 1000)
        batch = BatchBuilder(producer_id=idempotent.producer_id, producer_epoch=0, base_sequence=0)
        for i in range(3):
            batch.append(b"idempotent-%d" % i, timestamp=stamp + i)
        request = ProduceRequest(
            acks=-1,
            timeout_ms=10_000,
            topic_data=[TopicProduceData(topic, [PartitionProduceData(0, batch.build())])],
        )
        written = conn.request(request, 9).responses[0].partition_responses[0]
        assert (written.error_code, written.base_offset) == (E.NONE, 0)
    # A transactional producer: sequences 0 and 1 at offsets 3 and 4, its transaction open.
    tid = unique_topic("tid-producers")
    coordinator_broker = find_coordinator(txn_cluster, tid, TRANSACTION_KEY)
    with WireClient(coordinator_broker) as coordinator:
        error, pid, epoch = init(coordinator, tid)
        assert error == E.NONE
        assert add_partition(coordinator, tid, pid, epoch, topic, 0) == E.NONE
        before = int(time.time() * 1000)
        offsets = [produce(txn_cluster, tid, topic, 0, pid, epoch, seq) for seq in (0, 1)]
        after = int(time.time() * 1000)
        assert [(o.error_code, o.base_offset) for o in offsets] == [(E.NONE, 3), (E.NONE, 4)]

        error, producers = describe_producers(leader, {topic: [0]})[(topic, 0)]
        assert error == E.NONE
        by_id = {p[0]: p for p in producers}
        assert set(by_id) == {idempotent.producer_id, pid}
        assert by_id[idempotent.producer_id] == (idempotent.producer_id, 0, 2, stamp + 2, -1, -1)
        transactional = by_id[pid]
        assert transactional[:3] + transactional[4:] == (pid, epoch, 1, -1, 3)
        assert before <= transactional[3] <= after
        # A follower answers from its own replica, as Kafka's do; a broker without a replica
        # and a partition or topic that does not exist get errors.
        wait_for(
            lambda: describe_producers(follower, {topic: [0]})[(topic, 0)] == (E.NONE, producers),
            30,
            "the follower's producers",
        )
        assert describe_producers(outsider, {topic: [0]}) == {
            (topic, 0): (E.NOT_LEADER_OR_FOLLOWER, set())
        }
        assert describe_producers(leader, {topic: [7], "no-such-topic": [0]}) == {
            (topic, 7): (E.UNKNOWN_TOPIC_OR_PARTITION, set()),
            ("no-such-topic", 0): (E.UNKNOWN_TOPIC_OR_PARTITION, set()),
        }

        # The coordinator lists the open transaction; its filters select it or not.
        ongoing = (tid, pid, "Ongoing")
        assert ongoing in list_transactions(coordinator)[1]
        assert list_transactions(coordinator, pids=[pid]) == ([], [ongoing])
        assert list_transactions(coordinator, ["Ongoing"], [pid]) == ([], [ongoing])
        assert list_transactions(coordinator, ["CompleteCommit", "Empty"], [pid]) == ([], [])
        assert list_transactions(coordinator, ["Bogus"]) == (["Bogus"], [])
        assert list_transactions(coordinator, ["Bogus", "Ongoing"], [pid]) == (
            ["Bogus"],
            [ongoing],
        )
        # Open for less than an hour: not listed with a duration filter of one hour.
        assert list_transactions(coordinator, pids=[pid], duration_ms=3_600_000) == ([], [])
        # Each broker lists the transactions it coordinates, no others.
        for broker in txn_cluster.brokers:
            if broker is not coordinator_broker:
                with WireClient(broker) as other:
                    assert tid not in [t for t, _, _ in list_transactions(other)[1]]

        assert end_txn(coordinator, tid, pid, epoch, committed=True) == E.NONE
        wait_for(
            lambda: (
                list_transactions(coordinator, pids=[pid]) == ([], [(tid, pid, "CompleteCommit")])
            ),
            30,
            "the transaction to complete",
        )
        assert list_transactions(coordinator, ["CompleteCommit"], [pid]) == (
            [],
            [(tid, pid, "CompleteCommit")],
        )
        assert list_transactions(coordinator, ["Ongoing"], [pid]) == ([], [])
    # The marker ends the producer's transaction on the partition.
    error, producers = describe_producers(leader, {topic: [0]})[(topic, 0)]
    assert error == E.NONE
    [ended] = [p for p in producers if p[0] == pid]
    assert (ended[:3], ended[5]) == ((pid, epoch, 1), -1)
    assert ended[4] >= 0  # the coordinator epoch of the marker


def test_add_offsets_to_txn(txn_cluster: LocalCluster) -> None:
    group = unique_topic("g-add-offsets")
    tid = unique_topic("tid-add-offsets")
    find_coordinator(txn_cluster, group, GROUP_KEY)  # as a client does: __consumer_offsets exists
    coordinator_broker = find_coordinator(txn_cluster, tid, TRANSACTION_KEY)
    with WireClient(coordinator_broker) as coordinator:
        # A transactional id never initialised, at every version.
        for version in range(4):
            assert add_offsets(coordinator, tid, 4242, 0, group, version) == (
                E.INVALID_PRODUCER_ID_MAPPING
            )
        error, pid, epoch = init(coordinator, tid)
        assert error == E.NONE
        # Another producer id than the transactional id's: refused, nothing added.
        for version in range(4):
            assert add_offsets(coordinator, tid, pid + 1, epoch, group, version) == (
                E.INVALID_PRODUCER_ID_MAPPING
            )
        state = describe(coordinator, tid)
        assert (state.transaction_state, state.topics) == ("Empty", [])
        # The group's offsets partition joins the transaction, which begins; again: NONE.
        assert add_offsets(coordinator, tid, pid, epoch, group, 3) == E.NONE
        assert add_offsets(coordinator, tid, pid, epoch, group, 0) == E.NONE
        state = describe(coordinator, tid)
        assert (state.transaction_state, [(t.topic, t.partitions) for t in state.topics]) == (
            "Ongoing",
            [(CONSUMER_OFFSETS, [partition_for(group, OFFSETS_PARTITIONS)])],
        )
        assert end_txn(coordinator, tid, pid, epoch, committed=False) == E.NONE
        # A newer epoch fences the old one: PRODUCER_FENCED from v2, INVALID_PRODUCER_EPOCH
        # before.
        error, pid2, epoch2 = init(coordinator, tid)
        assert (error, pid2, epoch2) == (E.NONE, pid, epoch + 1)
        fenced = [add_offsets(coordinator, tid, pid, epoch, group, v) for v in range(4)]
        assert fenced == [E.INVALID_PRODUCER_EPOCH] * 2 + [E.PRODUCER_FENCED] * 2
        assert add_offsets(coordinator, tid, pid, epoch2, group, 3) == E.NONE
        assert end_txn(coordinator, tid, pid, epoch2, committed=True) == E.NONE
    # Only the coordinator of the transactional id answers for it.
    elsewhere = next(b for b in txn_cluster.brokers if b is not coordinator_broker)
    with WireClient(elsewhere) as conn:
        assert add_offsets(conn, tid, pid, epoch2, group, 3) == E.NOT_COORDINATOR


def test_idle_producers_expire(cluster_factory: Callable[..., LocalCluster]) -> None:
    """producer.id.expiration.ms: an idempotent producer idle longer than that leaves the
    partition's producer state (DescribeProducers lists it no more); writing again, it is
    accepted as a producer the partition does not know, and nothing is written twice."""
    cluster = cluster_factory(
        1,
        offsets_topic_replication_factor=1,
        transaction_state_log_replication_factor=1,
        transaction_state_log_min_isr=1,
        producer_id_expiration_ms=3000,
        producer_id_expiration_check_interval_ms=500,
    )
    topic = unique_topic("txn-expiry")
    create_topic(cluster, topic, partitions=1, replication_factor=1)
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap_servers, "enable.idempotence": True}
    )
    for i in range(3):
        producer.produce(topic, b"before-%d" % i, partition=0)
    assert producer.flush(30) == 0
    [(error, active)] = describe_producers(cluster.broker(0), {topic: [0]}).values()
    assert error == E.NONE and [s[2] for s in active] == [2]  # its last sequence
    wait_for(
        lambda: describe_producers(cluster.broker(0), {topic: [0]})[(topic, 0)] == (E.NONE, set()),
        60,
        "the idle producer to expire",
    )
    producer.produce(topic, b"after", partition=0)
    assert producer.flush(30) == 0
    assert read_all(cluster, topic, 1, "read_uncommitted") == {
        0: [b"before-0", b"before-1", b"before-2", b"after"]
    }
