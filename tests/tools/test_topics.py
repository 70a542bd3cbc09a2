"""`gregor topics` against a real cluster: what create asked for is what describe shows
(partitions, replicas, leaders among them, ISR, config overrides), alter grows a topic and
changes its configs, delete removes it; errors are one line with a non-zero status."""

from __future__ import annotations

from tools.helpers import fails, gregor, on

from gregor.devcluster import LocalCluster
from gregor_testing.cluster import unique_topic, wait_for


def describe(cluster: LocalCluster, topic: str) -> dict[str, object]:
    [found] = on(cluster, "topics", "describe", "--topic", topic)
    assert isinstance(found, dict)
    return found


def test_create_describe_alter_delete(tools_cluster: LocalCluster) -> None:
    topic = unique_topic("cli")
    created = on(
        tools_cluster,
        "topics", "create", "--topic", topic, "--partitions", "3",
        "--replication-factor", "3", "--config", "retention.ms=3600000",
    )  # fmt: skip
    assert created == {"created": topic}
    assert topic in on(tools_cluster, "topics", "list")

    found = describe(tools_cluster, topic)
    assert (found["partition_count"], found["replication_factor"]) == (3, 3)
    assert found["configs"] == {"retention.ms": "3600000"}
    partitions = found["partitions"]
    assert isinstance(partitions, list)
    assert [p["partition"] for p in partitions] == [0, 1, 2]
    for p in partitions:
        assert sorted(p["replicas"]) == [0, 1, 2]
        assert p["leader"] in p["replicas"]
        assert sorted(p["isr"]) == [0, 1, 2] and not p["under_replicated"]

    on(
        tools_cluster,
        "topics", "alter", "--topic", topic, "--partitions", "5",
        "--config", "cleanup.policy=compact,segment.bytes=1048576",
        "--delete-config", "retention.ms",
    )  # fmt: skip
    wait_for(lambda: describe(tools_cluster, topic)["partition_count"] == 5, 30, "5 partitions")
    assert describe(tools_cluster, topic)["configs"] == {
        "cleanup.policy": "compact",
        "segment.bytes": "1048576",
    }
    human = gregor(
        "topics",
        "describe",
        "--topic",
        topic,
        "--bootstrap-server",
        tools_cluster.bootstrap_servers,
    ).stdout
    assert f"Topic: {topic}\tPartitionCount: 5\tReplicationFactor: 3" in human
    assert "cleanup.policy=compact" in human

    assert on(tools_cluster, "topics", "delete", "--topic", topic) == {"deleted": [topic]}
    wait_for(lambda: topic not in on(tools_cluster, "topics", "list"), 30, "the topic gone")


def test_create_with_a_replica_assignment(tools_cluster: LocalCluster) -> None:
    topic = unique_topic("cli-assigned")
    on(tools_cluster, "topics", "create", "--topic", topic, "--replica-assignment", "0:1,1:2,2:0")
    found = describe(tools_cluster, topic)
    partitions = found["partitions"]
    assert isinstance(partitions, list)
    assert [p["replicas"] for p in partitions] == [[0, 1], [1, 2], [2, 0]]
    # The preferred (first) replica leads a new topic.
    assert [p["leader"] for p in partitions] == [0, 1, 2]


def test_errors_are_one_line(tools_cluster: LocalCluster) -> None:
    missing = unique_topic("missing")
    assert "UNKNOWN_TOPIC_OR_PARTITION" in fails(
        tools_cluster, "topics", "describe", "--topic", missing
    )
    assert "UNKNOWN_TOPIC_OR_PARTITION" in fails(
        tools_cluster, "topics", "alter", "--topic", missing, "--partitions", "2"
    )
    topic = unique_topic("cli-twice")
    on(tools_cluster, "topics", "create", "--topic", topic, "--partitions", "1")
    assert "TOPIC_ALREADY_EXISTS" in fails(
        tools_cluster, "topics", "create", "--topic", topic, "--partitions", "1"
    )
    assert "INVALID_PARTITIONS" in fails(
        tools_cluster, "topics", "alter", "--topic", topic, "--partitions", "1"
    )
    # A cluster nobody listens on: the timeout, named.
    unreachable = gregor(
        "topics", "list", "--bootstrap-server", "127.0.0.1:1", "--timeout", "1", check=False
    )
    assert unreachable.returncode == 1
    assert unreachable.stderr.count("\n") == 1 and "127.0.0.1:1" in unreachable.stderr
    # A bad argument: argparse's status, still one line.
    bad = gregor("topics", "create", "--bootstrap-server", "x:1", "--topic", check=False)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
