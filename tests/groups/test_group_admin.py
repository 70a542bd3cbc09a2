"""The group admin APIs through admin clients: confluent-kafka's AdminClient lists and
describes a live group (decoding each member's assignment), refuses to delete it while it has
members, alters and lists its offsets once it is empty, and deletes it; kafka-python's admin
client deletes offsets (OffsetDelete) and removes a static member by its instance id."""

from __future__ import annotations

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from groups.helpers import SESSION, assignment_of, committed_offsets, poll_until
from kafka import KafkaAdminClient
from kafka import TopicPartition as KpTopicPartition
from kafka.admin import MemberToRemove
from kafka.errors import GroupSubscribedToTopicError, NoError

from gregor.devcluster import LocalCluster
from gregor_testing.cluster import create_topic, unique_topic

PARTITIONS = 4


def consumer(cluster: LocalCluster, group: str, **conf: object) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **SESSION,
            **conf,
        }
    )


@pytest.mark.interop("confluent", "admin")
@pytest.mark.interop("kafka-python", "admin")
def test_admin_clients_manage_groups(group_cluster: LocalCluster) -> None:
    topic = unique_topic("admin")
    create_topic(group_cluster, topic, partitions=PARTITIONS, replication_factor=3)
    group = unique_topic("g-admin")
    admin = AdminClient({"bootstrap.servers": group_cluster.bootstrap_servers})
    kp_admin = KafkaAdminClient(bootstrap_servers=group_cluster.bootstrap_servers)
    member = consumer(group_cluster, group, **{"group.instance.id": "admin-instance"})
    try:
        member.subscribe([topic])
        poll_until([member], lambda: len(assignment_of(member)) == PARTITIONS, 60, "the assignment")

        listed = admin.list_consumer_groups().result(timeout=30)
        mine = [g for g in listed.valid if g.group_id == group]
        assert [(g.state, g.is_simple_consumer_group) for g in mine] == [
            (ConsumerGroupState.STABLE, False)
        ]
        described = admin.describe_consumer_groups([group])[group].result(timeout=30)
        assert (described.state, described.partition_assignor) == (
            ConsumerGroupState.STABLE,
            "range",
        )
        [described_member] = described.members
        assert described_member.group_instance_id == "admin-instance"
        assert sorted(tp.partition for tp in described_member.assignment.topic_partitions) == list(
            range(PARTITIONS)
        )
        # Not while it has a member.
        try:
            admin.delete_consumer_groups([group])[group].result(timeout=30)
            raise AssertionError("a group with a member was deleted")
        except KafkaException as exc:
            assert exc.args[0].name() == "NON_EMPTY_GROUP"
        member.commit(
            offsets=[TopicPartition(topic, p, 5) for p in range(PARTITIONS)], asynchronous=False
        )
        refused = kp_admin.delete_group_offsets(group, [KpTopicPartition(topic, 0)])
        assert refused == {KpTopicPartition(topic, 0): GroupSubscribedToTopicError}
        # A static member leaves only when removed by its instance id.
        kp_admin.remove_group_members(group, [MemberToRemove(group_instance_id="admin-instance")])
    finally:
        member.close()

    request = ConsumerGroupTopicPartitions(
        group, [TopicPartition(topic, p, 100 + p) for p in range(PARTITIONS)]
    )
    admin.alter_consumer_group_offsets([request])[group].result(timeout=30)
    assert committed_offsets(group_cluster, group) == {
        (topic, p): 100 + p for p in range(PARTITIONS)
    }
    deleted = kp_admin.delete_group_offsets(group, [KpTopicPartition(topic, 0)])
    assert deleted == {KpTopicPartition(topic, 0): NoError}
    listed_offsets = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(PARTITIONS)])]
    )[group].result(timeout=30)
    assert {tp.partition: tp.offset for tp in listed_offsets.topic_partitions} == {
        0: -1001,
        1: 101,
        2: 102,
        3: 103,
    }
    admin.delete_consumer_groups([group])[group].result(timeout=30)
    assert committed_offsets(group_cluster, group) == {}
    remaining = admin.list_consumer_groups().result(timeout=30)
    assert group not in {g.group_id for g in remaining.valid}
    kp_admin.close()
