"""The group coordinator at the wire, fed what well-behaved clients never send: each gets the
error Kafka answers with, and the coordinator goes on serving the other groups.

Requests are sent raw (gregor-protocol's messages over a socket) to the group's coordinator;
members that must be in a rebalance together send their JoinGroups from threads.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from broker.test_describe_configs import TOPIC, describe
from groups.helpers import find_coordinator

from gregor.broker.coordinator.partitioning import partition_for
from gregor.devcluster import BrokerProcess, LocalCluster
from gregor.protocol.apis.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from gregor.protocol.apis.heartbeat import HeartbeatRequest
from gregor.protocol.apis.join_group import (
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    JoinGroupResponse,
)
from gregor.protocol.apis.leave_group import LeaveGroupRequest, MemberIdentity
from gregor.protocol.apis.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from gregor.protocol.apis.offset_fetch import (
    OffsetFetchRequest,
    OffsetFetchRequestTopic,
)
from gregor.protocol.apis.sync_group import (
    SyncGroupRequest,
    SyncGroupRequestAssignment,
    SyncGroupResponse,
)
from gregor.protocol.consumer_protocol import ConsumerProtocolSubscription, encode_subscription
from gregor.protocol.errors import ErrorCode
from gregor_testing.cluster import WireClient, create_topic, partitions_of, unique_topic, wait_for
from gregor_testing.processes import zookeeper_client

E = ErrorCode
JOIN_VERSION = 3  # no MEMBER_ID_REQUIRED round trip (v4+)
SESSION_MS = 6000


def subscription(topic: str = "t") -> bytes:
    return encode_subscription(ConsumerProtocolSubscription(topics=[topic]))


def join_request(
    group: str,
    member_id: str = "",
    *,
    protocol_type: str = "consumer",
    protocols: list[tuple[str, bytes]] | None = None,
    session_ms: int = SESSION_MS,
    instance: str | None = None,
) -> JoinGroupRequest:
    if protocols is None:
        protocols = [("range", subscription())]
    return JoinGroupRequest(
        group_id=group,
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=10_000,
        member_id=member_id,
        group_instance_id=instance,
        protocol_type=protocol_type,
        protocols=[JoinGroupRequestProtocol(name, meta) for name, meta in protocols],
    )


def join(
    broker: BrokerProcess, request: JoinGroupRequest, version: int = JOIN_VERSION
) -> JoinGroupResponse:
    with WireClient(broker) as conn:
        response: JoinGroupResponse = conn.request(request, version)
    return response


def sync(
    broker: BrokerProcess, group: str, member_id: str, generation: int, assignment: dict[str, bytes]
) -> SyncGroupResponse:
    with WireClient(broker) as conn:
        return conn.request(
            SyncGroupRequest(
                group_id=group,
                generation_id=generation,
                member_id=member_id,
                assignments=[SyncGroupRequestAssignment(m, a) for m, a in assignment.items()],
            ),
            3,
        )


def heartbeat(broker: BrokerProcess, group: str, member_id: str, generation: int) -> int:
    with WireClient(broker) as conn:
        response = conn.request(
            HeartbeatRequest(group_id=group, generation_id=generation, member_id=member_id), 3
        )
    return response.error_code


def commit(
    broker: BrokerProcess, group: str, member_id: str, generation: int, topic: str, offset: int = 1
) -> int:
    with WireClient(broker) as conn:
        response = conn.request(
            OffsetCommitRequest(
                group_id=group,
                generation_id_or_member_epoch=generation,
                member_id=member_id,
                topics=[
                    OffsetCommitRequestTopic(
                        topic, [OffsetCommitRequestPartition(0, offset, -1, -1, "")]
                    )
                ],
            ),
            8,
        )
    return response.topics[0].partitions[0].error_code


@pytest.fixture(scope="module")
def topic(group_cluster: LocalCluster) -> str:
    name = unique_topic("bad-input")
    create_topic(group_cluster, name, partitions=1, replication_factor=3)
    return name


def stable_member(broker: BrokerProcess, group: str) -> JoinGroupResponse:
    """A one-member group, synced (generation 1)."""
    joined = join(broker, join_request(group))
    assert joined.error_code == E.NONE, joined
    synced = sync(broker, group, joined.member_id, joined.generation_id, {joined.member_id: b"a"})
    assert (synced.error_code, synced.assignment) == (E.NONE, b"a")
    return joined


def test_find_coordinator_for_groups_and_transactions(group_cluster: LocalCluster) -> None:
    broker = group_cluster.broker(0)
    find_coordinator(group_cluster, "some-group")  # __consumer_offsets exists from here on
    with WireClient(broker) as conn:
        old = conn.request(FindCoordinatorRequest(key="some-group"), 0)
        assert old.error_code == E.NONE
        expected = partitions_of(group_cluster, "__consumer_offsets")[
            partition_for("some-group", 50)
        ]
        assert old.node_id == expected.leader_id
        assert (old.host, old.port) == (
            group_cluster.broker(old.node_id).host,
            group_cluster.broker(old.node_id).port,
        )
        batched = conn.request(
            FindCoordinatorRequest(key_type=0, coordinator_keys=["a", "b", "some-group"]), 4
        )
        assert [(c.key, c.error_code) for c in batched.coordinators] == [
            ("a", E.NONE),
            ("b", E.NONE),
            ("some-group", E.NONE),
        ]
        assert batched.coordinators[2].node_id == old.node_id
        # Transactional ids: __transaction_state is created on first use.
        answers: list[FindCoordinatorResponse] = []

        def transaction_coordinator() -> bool:
            answers.append(conn.request(FindCoordinatorRequest(key="txn-1", key_type=1), 3))
            return answers[-1].error_code != E.COORDINATOR_NOT_AVAILABLE

        wait_for(transaction_coordinator, 60, "the transaction coordinator")
        found = answers[-1]
        assert found.error_code == E.NONE, found
        assert found.error_message == "NONE"
        state = partitions_of(group_cluster, "__transaction_state")
        assert len(state) == 50
        assert found.node_id == state[partition_for("txn-1", 50)].leader_id
        assert all(len(p.replica_nodes) == 3 for p in state.values())
        # Both internal topics with the configs Kafka gives them.
        keys = ("cleanup.policy", "segment.bytes", "min.insync.replicas", "compression.type")
        internal = {
            name: {k: c.value for k, c in describe(group_cluster, TOPIC, name, *keys).items()}
            for name in ("__consumer_offsets", "__transaction_state")
        }
        assert internal["__transaction_state"] == {
            "cleanup.policy": "compact",
            "segment.bytes": "104857600",
            "min.insync.replicas": "2",
            "compression.type": "uncompressed",
        }
        assert internal["__consumer_offsets"] == {
            "cleanup.policy": "compact",
            "segment.bytes": "104857600",
            "min.insync.replicas": "1",
            "compression.type": "producer",
        }
        unknown_type = conn.request(FindCoordinatorRequest(key="x", key_type=2), 3)
        assert (unknown_type.error_code, unknown_type.node_id) == (E.INVALID_REQUEST, -1)


def test_protocol_errors(group_cluster: LocalCluster, topic: str) -> None:
    group = unique_topic("g-protocols")
    broker = find_coordinator(group_cluster, group)
    first = join(broker, join_request(group), version=4)
    assert first.error_code == E.MEMBER_ID_REQUIRED and first.member_id
    # Bad members are turned away without touching the group.
    assert join(broker, join_request(group, session_ms=500)).error_code == E.INVALID_SESSION_TIMEOUT
    assert join(broker, join_request(group, protocol_type="")).error_code == (
        E.INCONSISTENT_GROUP_PROTOCOL
    )
    assert join(broker, join_request(group, protocols=[])).error_code == (
        E.INCONSISTENT_GROUP_PROTOCOL
    )
    joined = join(broker, join_request(group, first.member_id), version=4)
    assert (joined.error_code, joined.generation_id, joined.leader) == (
        E.NONE,
        1,
        first.member_id,
    )
    assert sync(broker, group, first.member_id, 1, {first.member_id: b"x"}).error_code == E.NONE
    # Unknown protocol types, and protocols no member shares.
    connect = join(broker, join_request(group, protocol_type="connect"))
    assert (connect.error_code, connect.member_id) == (E.INCONSISTENT_GROUP_PROTOCOL, "")
    other = join(broker, join_request(group, protocols=[("my-own-assignor", b"\x00")]))
    assert other.error_code == E.INCONSISTENT_GROUP_PROTOCOL
    # The member and its generation are what they were.
    assert heartbeat(broker, group, first.member_id, 1) == E.NONE


def test_stale_generations_and_unknown_members(group_cluster: LocalCluster, topic: str) -> None:
    group = unique_topic("g-stale")
    broker = find_coordinator(group_cluster, group)
    member = stable_member(broker, group)
    assert heartbeat(broker, group, member.member_id, 0) == E.ILLEGAL_GENERATION
    assert sync(broker, group, member.member_id, 0, {}).error_code == E.ILLEGAL_GENERATION
    assert commit(broker, group, member.member_id, 0, topic) == E.ILLEGAL_GENERATION
    assert commit(broker, group, member.member_id, 1, topic) == E.NONE
    assert heartbeat(broker, group, "nobody", 1) == E.UNKNOWN_MEMBER_ID
    assert sync(broker, group, "nobody", 1, {}).error_code == E.UNKNOWN_MEMBER_ID
    assert commit(broker, group, "nobody", 1, topic) == E.UNKNOWN_MEMBER_ID
    assert (
        commit(broker, group, "", -1, topic) == E.UNKNOWN_MEMBER_ID
    )  # only members, while it has some
    assert join(broker, join_request(group, "nobody")).error_code == E.UNKNOWN_MEMBER_ID
    with WireClient(broker) as conn:
        left = conn.request(
            LeaveGroupRequest(group_id=group, members=[MemberIdentity("nobody", None)]), 3
        )
        assert (left.error_code, [m.error_code for m in left.members]) == (
            E.NONE,
            [E.UNKNOWN_MEMBER_ID],
        )
        old_left = conn.request(LeaveGroupRequest(group_id=group, member_id="nobody"), 0)
        assert old_left.error_code == E.UNKNOWN_MEMBER_ID
    # A group that does not exist at all.
    assert heartbeat(broker, unique_topic("g-none"), "nobody", 1) in (
        E.UNKNOWN_MEMBER_ID,
        E.NOT_COORDINATOR,
    )
    # Another broker is not the coordinator.
    elsewhere = next(b for b in group_cluster.brokers if b is not broker)
    assert heartbeat(elsewhere, group, member.member_id, 1) == E.NOT_COORDINATOR
    assert join(elsewhere, join_request(group)).error_code == E.NOT_COORDINATOR
    assert heartbeat(broker, group, member.member_id, 1) == E.NONE


def same_coordinator_group(cluster: LocalCluster, broker: BrokerProcess, prefix: str) -> str:
    for _ in range(200):
        candidate = unique_topic(prefix)
        if find_coordinator(cluster, candidate).broker_id == broker.broker_id:
            return candidate
    raise AssertionError(f"no group of broker {broker.broker_id} found")


def test_oversized_member_metadata(group_cluster: LocalCluster, topic: str) -> None:
    group = unique_topic("g-huge")
    broker = find_coordinator(group_cluster, group)
    neighbour = same_coordinator_group(group_cluster, broker, "g-neighbour")
    neighbour_member = stable_member(broker, neighbour)
    # 2 MB of metadata: more than one record of __consumer_offsets may hold.
    huge = join(broker, join_request(group, protocols=[("range", b"\x00\x00" + b"m" * 2_000_000)]))
    assert huge.error_code == E.NONE
    assert len(huge.members[0].metadata) == 2_000_002
    with ThreadPoolExecutor(2) as pool:
        # While the leader's sync fails, the neighbour group heartbeats and commits.
        synced = pool.submit(sync, broker, group, huge.member_id, 1, {huge.member_id: b"x"})
        assert heartbeat(broker, neighbour, neighbour_member.member_id, 1) == E.NONE
        assert synced.result(timeout=60).error_code == E.UNKNOWN_SERVER_ERROR
    assert commit(broker, neighbour, neighbour_member.member_id, 1, topic, offset=7) == E.NONE
    assert heartbeat(broker, neighbour, neighbour_member.member_id, 1) == E.NONE
    # The failed write sends the big group back to rebalancing.
    assert heartbeat(broker, group, huge.member_id, 1) == E.REBALANCE_IN_PROGRESS


def test_two_members_rebalance_over_the_wire(group_cluster: LocalCluster, topic: str) -> None:
    group = unique_topic("g-two")
    broker = find_coordinator(group_cluster, group)
    with ThreadPoolExecutor(2) as pool:
        joins = [
            pool.submit(join, broker, join_request(group, protocols=protocols))
            for protocols in (
                [("roundrobin", b"r1"), ("range", b"g1")],
                [("range", b"g2"), ("roundrobin", b"r2")],
            )
        ]
        a, b = (f.result(timeout=60) for f in joins)
    assert {a.error_code, b.error_code} == {E.NONE}
    assert a.generation_id == b.generation_id == 1
    assert a.leader == b.leader
    leader, follower = (a, b) if a.member_id == a.leader else (b, a)
    # Both support both, each prefers another: one protocol, the same for both.
    assert a.protocol_name == b.protocol_name
    assert sorted(m.member_id for m in leader.members) == sorted([a.member_id, b.member_id])
    assert follower.members == []
    with ThreadPoolExecutor(1) as pool:
        parked = pool.submit(sync, broker, group, follower.member_id, 1, {})
        done = sync(
            broker,
            group,
            leader.member_id,
            1,
            {leader.member_id: b"for-leader", follower.member_id: b"for-follower"},
        )
        assert (done.error_code, done.assignment) == (E.NONE, b"for-leader")
        got = parked.result(timeout=30)
    assert (got.error_code, got.assignment) == (E.NONE, b"for-follower")


def test_offsets_of_version_0_live_in_zookeeper(group_cluster: LocalCluster, topic: str) -> None:
    group = unique_topic("g-zk")
    broker = group_cluster.broker(1)
    with WireClient(broker) as conn:
        committed = conn.request(
            OffsetCommitRequest(
                group_id=group,
                topics=[
                    OffsetCommitRequestTopic(topic, [OffsetCommitRequestPartition(0, 42)]),
                    OffsetCommitRequestTopic("no-such-topic", [OffsetCommitRequestPartition(0, 1)]),
                ],
            ),
            0,
        )
        assert [(t.name, t.partitions[0].error_code) for t in committed.topics] == [
            (topic, E.NONE),
            ("no-such-topic", E.UNKNOWN_TOPIC_OR_PARTITION),
        ]
        fetched = conn.request(
            OffsetFetchRequest(group_id=group, topics=[OffsetFetchRequestTopic(topic, [0])]), 0
        )
        [partition] = fetched.topics[0].partitions
        assert (partition.committed_offset, partition.error_code) == (42, E.NONE)
    with zookeeper_client(group_cluster.zookeeper_connect) as client:
        data, _ = client.get(f"/consumers/{group}/offsets/{topic}/0")
    assert data == b"42"
