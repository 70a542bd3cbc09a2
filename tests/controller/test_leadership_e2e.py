"""Leadership and replica placement on real brokers: a partition reassignment moves data to
a new broker and retires an old replica; a preferred leader election (confluent-kafka's
AdminClient) puts leadership back where it belongs."""

from __future__ import annotations

from collections.abc import Callable

from confluent_kafka import ElectionType, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient

from gregor.devcluster import LocalCluster, send_request
from gregor.protocol.apis.alter_partition_reassignments import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    ReassignablePartition,
    ReassignableTopic,
)
from gregor.protocol.apis.list_partition_reassignments import (
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)
from gregor_testing.cluster import create_topic, metadata, partitions_of, wait_for, wait_for_topic


def produce(cluster: LocalCluster, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    for i in range(count):
        producer.produce(topic, value=f"v{i}".encode(), partition=0)
    assert producer.flush(60) == 0


def controller_address(cluster: LocalCluster) -> tuple[str, int]:
    broker = cluster.broker(metadata(cluster, []).controller_id)
    return broker.host, broker.port


def test_reassignment_moves_a_replica_to_another_broker(
    cluster_factory: Callable[..., LocalCluster],
) -> None:
    cluster = cluster_factory(3)
    topic = "moving"
    create_topic(cluster, topic, assignment={0: [0, 1]})
    produce(cluster, topic, 500)
    host, port = controller_address(cluster)
    request = AlterPartitionReassignmentsRequest(
        topics=[ReassignableTopic(topic, [ReassignablePartition(0, [2, 1])])]
    )
    response = send_request(host, port, request, 0)
    assert isinstance(response, AlterPartitionReassignmentsResponse)
    assert response.error_code == 0
    assert [(p.partition_index, p.error_code) for p in response.responses[0].partitions] == [(0, 0)]

    def done() -> bool:
        listed = send_request(host, port, ListPartitionReassignmentsRequest(topics=None), 0)
        assert isinstance(listed, ListPartitionReassignmentsResponse)
        state = partitions_of(cluster, topic)[0]
        return not listed.topics and state.replica_nodes == [2, 1]

    wait_for(done, 90, "the reassignment to complete")
    wait_for_topic(cluster, topic, 1)
    state = partitions_of(cluster, topic, broker_id=2)[0]
    assert state.leader_id == 2  # the first target replica leads once it is in sync
    assert sorted(state.isr_nodes) == [1, 2]
    # Broker 2 has the data; broker 0's replica was deleted (renamed for removal).
    wait_for(
        lambda: not (cluster.broker(0).data_dir / f"{topic}-0").exists(), 30, "the old replica gone"
    )
    assert any((cluster.broker(2).data_dir / f"{topic}-0").glob("*.log"))


def test_preferred_leader_election_through_the_admin_client(
    cluster_factory: Callable[..., LocalCluster],
) -> None:
    cluster = cluster_factory(3)
    topic = "elect"
    create_topic(cluster, topic, assignment={0: [0, 1, 2]})
    produce(cluster, topic, 100)
    # The preferred leader goes away and comes back: leadership stays where it moved.
    cluster.broker(0).kill()
    wait_for(lambda: partitions_of(cluster, topic, 1)[0].leader_id == 1, 60, "leader 1")
    cluster.broker(0).start()
    wait_for_topic(cluster, topic, 1)
    assert partitions_of(cluster, topic, 1)[0].leader_id == 1
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    future = admin.elect_leaders(ElectionType.PREFERRED, [KafkaTopicPartition(topic, 0)])
    results = future.result(timeout=60)
    assert {(tp.topic, tp.partition): error for tp, error in results.items()} == {(topic, 0): None}
    # The answer comes once the controller's own metadata shows the new leader (as in
    # Kafka); the other brokers hear of it right after.
    wait_for(
        lambda: all(partitions_of(cluster, topic, b)[0].leader_id == 0 for b in (0, 1, 2)),
        30,
        "every broker to see leader 0",
    )
    again = admin.elect_leaders(ElectionType.PREFERRED, [KafkaTopicPartition(topic, 0)])
    error = next(iter(again.result(timeout=60).values()))
    assert error is not None and error.code() == 84  # ELECTION_NOT_NEEDED
