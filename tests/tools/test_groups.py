"""`gregor groups` against a real cluster: a live group's members, assignment and lag per
partition (log end offset minus committed), resets by every strategy checked against the
offsets the group then holds, and delete."""

from __future__ import annotations

from typing import Any

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CkTopicPartition
from tools.helpers import fails, gregor, on, produce

from gregor.devcluster import LocalCluster
from gregor_testing.cluster import create_topic, unique_topic, wait_for

COUNTS = {0: 10, 1: 6}
# Record i of each partition is stamped T0 + i seconds: 2023-11-14T22:13:20Z + i s.
T0 = 1_700_000_000_000


def offsets(cluster: LocalCluster, group: str) -> dict[int, Any]:
    [found] = on(cluster, "groups", "describe", "--group", group)
    return {o["partition"]: o for o in found["offsets"]}


def committed(cluster: LocalCluster, group: str) -> dict[int, int]:
    return {p: o["current_offset"] for p, o in offsets(cluster, group).items()}


def reset(cluster: LocalCluster, group: str, topic: str, *how: str) -> dict[int, int]:
    """reset-offsets --execute; the new offsets it printed, checked against the group's."""
    done = on(cluster, "groups", "reset-offsets", "--group", group, "--topic", topic, *how)
    printed = {row["partition"]: row["new_offset"] for row in done["offsets"]}
    if "--execute" in how:
        now = committed(cluster, group)
        assert {p: now[p] for p in printed} == printed
    return printed


def test_describe_lag_reset_and_delete(tools_cluster: LocalCluster) -> None:
    topic = unique_topic("cli-groups")
    group = unique_topic("cli-g")
    create_topic(tools_cluster, topic, partitions=2, replication_factor=3)
    produce(tools_cluster, topic, COUNTS, first_timestamp=T0)

    member = Consumer(
        {
            "bootstrap.servers": tools_cluster.bootstrap_servers,
            "group.id": group,
            "client.id": "cli-member",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
        }
    )
    try:
        member.subscribe([topic])
        wait_for(
            lambda: member.poll(0.2) is None and len(member.assignment()) == 2, 60, "2 partitions"
        )
        member.commit(
            offsets=[CkTopicPartition(topic, 0, 4), CkTopicPartition(topic, 1, 6)],
            asynchronous=False,
        )
        [live] = on(tools_cluster, "groups", "describe", "--group", group)
        assert live["state"] == "Stable"
        [m] = live["members"]
        assert m["client_id"] == "cli-member"
        assert m["assignment"] == [f"{topic}-0", f"{topic}-1"]
        rows = {o["partition"]: o for o in live["offsets"]}
        assert {
            p: (o["current_offset"], o["log_end_offset"], o["lag"]) for p, o in rows.items()
        } == {
            0: (4, 10, 6),
            1: (6, 6, 0),
        }
        assert {o["member_id"] for o in rows.values()} == {m["member_id"]}
        listed = {g["group"]: g for g in on(tools_cluster, "groups", "list")}
        assert listed[group]["state"] == "Stable"
        human = gregor(
            "groups", "describe", "--group", group, "--members",
            "--bootstrap-server", tools_cluster.bootstrap_servers,
        ).stdout  # fmt: skip
        assert "cli-member" in human and f"{topic}-0,{topic}-1" in human

        # Not while the group has a member.
        assert "inactive" in fails(
            tools_cluster, "groups", "reset-offsets", "--group", group, "--topic", topic,
            "--to-earliest", "--execute",
        )  # fmt: skip
    finally:
        member.close()
    wait_for(
        lambda: on(tools_cluster, "groups", "describe", "--group", group)[0]["state"] == "Empty",
        30,
        "the group empty",
    )

    # A dry run prints the plan and commits nothing.
    assert reset(tools_cluster, group, topic, "--to-earliest", "--dry-run") == {0: 0, 1: 0}
    assert committed(tools_cluster, group) == {0: 4, 1: 6}
    assert reset(tools_cluster, group, topic, "--to-earliest", "--execute") == {0: 0, 1: 0}
    assert reset(tools_cluster, group, topic, "--to-latest", "--execute") == COUNTS
    assert reset(tools_cluster, group, topic, "--shift-by", "-3", "--execute") == {0: 7, 1: 3}
    # Shifting and explicit offsets stay within the log.
    assert reset(tools_cluster, group, topic, "--shift-by", "-5", "--execute") == {0: 2, 1: 0}
    assert reset(tools_cluster, group, f"{topic}:0", "--to-offset", "99", "--execute") == {0: 10}
    assert committed(tools_cluster, group) == {0: 10, 1: 0}
    # The first record at or after T0 + 5 s, in each partition.
    when = "2023-11-14T22:13:25+00:00"
    assert reset(tools_cluster, group, topic, "--to-datetime", when, "--execute") == {0: 5, 1: 5}
    lag = {p: o["lag"] for p, o in offsets(tools_cluster, group).items()}
    assert lag == {0: 5, 1: 1}

    assert on(tools_cluster, "groups", "delete", "--group", group) == {"deleted": [group]}
    assert "does not exist" in fails(tools_cluster, "groups", "describe", "--group", group)
    assert "GROUP_ID_NOT_FOUND" in fails(tools_cluster, "groups", "delete", "--group", group)
