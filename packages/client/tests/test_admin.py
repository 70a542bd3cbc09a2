"""The blocking AdminClient against scripted brokers: each operation reaches the right
broker, and results and errors come back with the resource named."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from client_scripted import DEFAULT_VERSIONS, ScriptedCluster, scripted_cluster

from gregor.client.admin import (
    AdminClient,
    ConfigResource,
    ConfigSource,
    ElectionType,
    NewTopic,
    ResourceType,
)
from gregor.client.consumer import Consumer
from gregor.client.types import OffsetAndTimestamp, TopicPartition
from gregor.protocol.errors import (
    ElectionNotNeededError,
    GroupIdNotFoundError,
    InvalidPartitionsError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from gregor.protocol.records import BatchBuilder


@pytest.fixture
def two() -> Iterator[ScriptedCluster]:
    with scripted_cluster(2, auto_create_partitions=None) as cluster:
        cluster.controller = 1
        yield cluster


def admin(cluster: ScriptedCluster, **config: Any) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.bootstrap, **config})


def test_topics_are_created_at_the_controller_and_described(two: ScriptedCluster) -> None:
    with admin(two) as a:
        a.create_topics(
            [
                NewTopic("orders", 3, 1, config={"retention.ms": "1000"}),
                NewTopic("pinned", replica_assignment={0: [1], 1: [0]}),
            ]
        )
        assert {b for b, _, _ in two.sent("CreateTopics")} == {1}
        described = a.describe_topics(["orders", "pinned"])
        assert [p.leader for p in described["pinned"].partitions] == [1, 0]
        assert len(described["orders"].partitions) == 3
        assert a.list_topics() == ["orders", "pinned"]
        with pytest.raises(
            TopicAlreadyExistsError, match=r"creating topic 'orders'.*already exists"
        ):
            a.create_topics([NewTopic("orders", 1)])
        a.create_topics([NewTopic("dry", 1)], validate_only=True)
        assert "dry" not in two.topics
        a.create_partitions({"orders": 5})
        assert len(two.topics["orders"]) == 5
        with pytest.raises(InvalidPartitionsError, match="adding partitions to 'orders'"):
            a.create_partitions({"orders": 2})
        a.delete_topics(["pinned"])
        assert "pinned" not in two.topics
        with pytest.raises(UnknownTopicOrPartitionError, match="deleting topic 'pinned'"):
            a.delete_topics(["pinned"])


@pytest.mark.parametrize("version", [0, 5, 6])
def test_topics_are_deleted_by_name_at_every_version(version: int) -> None:
    # v6 moved the names from `topic_names` to `topics`: a request that filled only one of
    # them asked a v6 broker to delete nothing, and the broker rightly answered nothing.
    versions = {**DEFAULT_VERSIONS, 20: (0, version)}
    with scripted_cluster(1, versions=versions, auto_create_partitions=None) as cluster:
        for name in "abc":
            cluster.create_topic(name)
        with admin(cluster) as a:
            a.delete_topics(["a", "c"])
            assert sorted(cluster.topics) == ["b"]
            [(_, sent_version, _)] = cluster.sent("DeleteTopics")
            assert sent_version == version


def test_a_moved_controller_is_followed(two: ScriptedCluster) -> None:
    with admin(two, **{"retry.backoff.ms": 10}) as a:
        a.describe_cluster()
        two.controller = 0  # the client still believes it is broker 1
        a.create_topics([NewTopic("t", 1)])
        assert [b for b, _, _ in two.sent("CreateTopics")] == [1, 0]


def test_configs_are_described_and_altered_incrementally(two: ScriptedCluster) -> None:
    two.create_topic("t", 1)
    topic = ConfigResource(ResourceType.TOPIC, "t")
    with admin(two) as a:
        a.alter_configs({topic: {"retention.ms": "5000", "segment.ms": "100"}})
        a.alter_configs({topic: {"segment.ms": None}})
        configs = a.describe_configs([topic])[topic]
        assert configs["retention.ms"].value == "5000"
        assert configs["retention.ms"].source is ConfigSource.DYNAMIC_TOPIC_CONFIG
        assert "segment.ms" not in configs
        assert configs["cleanup.policy"].is_default
        with pytest.raises(UnknownTopicOrPartitionError, match="describing configs of"):
            a.describe_configs([ConfigResource(ResourceType.TOPIC, "missing")])


def test_requests_to_any_broker_stay_with_one_so_a_change_is_read_back() -> None:
    """A broker serves ACLs, quotas and configs from what it has heard from ZooKeeper, so
    another broker may not have a change yet: what goes to "any broker" goes to the same one,
    also after a request to the controller opened a connection to another."""
    with scripted_cluster(3, auto_create_partitions=None) as three:
        three.controller = 2
        three.create_topic("t", 1)
        topic = ConfigResource(ResourceType.TOPIC, "t")
        for _ in range(4):  # the broker first chosen is random: 4 clients, 4 chances to stray
            three.requests.clear()
            with admin(three) as a:
                a.alter_configs({topic: {"retention.ms": "5000"}})
                a.create_topics([NewTopic("u", 1)])
                a.describe_configs([topic])
                a.describe_configs([topic])
            anywhere = ("Metadata", "IncrementalAlterConfigs", "DescribeConfigs")
            assert len({b for b, api, _, _ in three.requests if api in anywhere}) == 1
            assert {b for b, _, _ in three.sent("CreateTopics")} == {2}
            three.topics.pop("u", None)


def test_offsets_and_record_deletion(two: ScriptedCluster) -> None:
    two.create_topic("t", 1, leaders=[1])
    builder = BatchBuilder()
    for n in range(10):
        builder.append(b"%d" % n, timestamp=1000 + n)
    two.append("t", 0, builder.build())
    tp = TopicPartition("t", 0)
    with admin(two) as a:
        assert a.list_offsets({tp: "latest"}) == {tp: OffsetAndTimestamp(10, -1, 0)}
        assert a.list_offsets({tp: 1004})[tp].offset == 4
        assert a.delete_records({tp: 6}) == {tp: 6}
        assert a.list_offsets({tp: "earliest"})[tp].offset == 6
        assert {b for b, _, _ in two.sent("DeleteRecords")} == {1}


def test_groups_offsets_and_lag(two: ScriptedCluster) -> None:
    two.create_topic("t", 2)
    builder = BatchBuilder()
    for n in range(8):
        builder.append(b"%d" % n)
    two.append("t", 0, builder.build())
    with Consumer(
        {"bootstrap.servers": two.bootstrap, "group.id": "readers", "enable.auto.commit": False}
    ) as c:
        c.subscribe(["t"])
        while not c.assignment():
            c.poll(0.2)
        c.commit({TopicPartition("t", 0): 3, TopicPartition("t", 1): 0})
        with admin(two) as a:
            assert [g.group_id for g in a.list_groups()] == ["readers"]
            group = a.describe_groups(["readers"])["readers"]
            assert group.state == "Stable" and len(group.members) == 1
            assert set(group.members[0].assignment) == {
                TopicPartition("t", 0),
                TopicPartition("t", 1),
            }
            offsets = a.list_group_offsets("readers")
            assert offsets[TopicPartition("t", 0)].committed.offset == 3
            assert offsets[TopicPartition("t", 0)].lag == 5
            assert offsets[TopicPartition("t", 1)].lag == 0
    with admin(two) as a:
        two.call(lambda: two.groups["readers"].members.clear())
        a.delete_groups(["readers"])
        with pytest.raises(GroupIdNotFoundError, match="deleting group 'readers'"):
            a.delete_groups(["readers"])


def test_cluster_leadership_and_reassignment(two: ScriptedCluster) -> None:
    two.create_topic("t", 2)
    with admin(two) as a:
        cluster = a.describe_cluster()
        assert (cluster.cluster_id, cluster.controller_id) == ("scripted", 1)
        assert [b.node_id for b in cluster.brokers] == [0, 1]
        results = a.elect_leaders(ElectionType.PREFERRED, [TopicPartition("t", 0)])
        assert isinstance(results[TopicPartition("t", 0)], ElectionNotNeededError)
        a.alter_partition_reassignments({TopicPartition("t", 1): [1, 0]})
        ongoing = a.list_partition_reassignments()
        assert ongoing[TopicPartition("t", 1)].replicas == (1, 0)
        a.alter_partition_reassignments({TopicPartition("t", 1): None})
        assert a.list_partition_reassignments() == {}
