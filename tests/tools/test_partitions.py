"""`gregor delete-records`, `gregor elect` and `gregor reassign` against a real cluster: the
log start offsets after a delete, the leaders after elections, the replicas after a
reassignment (throttled, verified, throttles removed), and a cancel."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tools.helpers import fails, on, produce

from gregor.devcluster import LocalCluster
from gregor_testing.cluster import create_topic, partitions_of, unique_topic, wait_for


def write(path: Path, document: Any) -> str:
    path.write_text(json.dumps(document))
    return str(path)


def described_broker(cluster: LocalCluster, broker: str) -> dict[str, Any]:
    [found] = on(
        cluster, "configs", "describe", "--entity-type", "brokers", "--entity-name", broker
    )
    configs: dict[str, Any] = found["configs"]
    return configs


def test_delete_records(tools_cluster: LocalCluster, tmp_path: Path) -> None:
    topic = unique_topic("cli-delrec")
    create_topic(tools_cluster, topic, partitions=2, replication_factor=3)
    produce(tools_cluster, topic, {0: 10, 1: 4})
    offsets = write(
        tmp_path / "offsets.json",
        {
            "version": 1,
            "partitions": [
                {"topic": topic, "partition": 0, "offset": 7},
                {"topic": topic, "partition": 1, "offset": -1},
            ],
        },
    )
    rows = on(tools_cluster, "delete-records", "--offset-json-file", offsets)
    assert {r["partition"]: r["low_watermark"] for r in rows} == {0: 7, 1: 4}
    # What a group reset to the earliest offset now finds.
    group = unique_topic("cli-delrec-g")
    done = on(
        tools_cluster, "groups", "reset-offsets", "--group", group, "--topic", topic,
        "--to-earliest", "--execute",
    )  # fmt: skip
    assert {r["partition"]: r["new_offset"] for r in done["offsets"]} == {0: 7, 1: 4}
    beyond = write(
        tmp_path / "beyond.json",
        {"partitions": [{"topic": topic, "partition": 0, "offset": 99}]},
    )
    assert "OFFSET_OUT_OF_RANGE" in fails(
        tools_cluster, "delete-records", "--offset-json-file", beyond
    )


def test_preferred_election_after_a_reassignment(
    tools_cluster: LocalCluster, tmp_path: Path
) -> None:
    topic = unique_topic("cli-move")
    create_topic(tools_cluster, topic, partitions=2, assignment={0: [0, 1], 1: [1, 2]})
    produce(tools_cluster, topic, {0: 50, 1: 50})
    topics = write(tmp_path / "topics.json", {"version": 1, "topics": [{"topic": topic}]})
    generated = on(
        tools_cluster, "reassign", "generate", "--topics-to-move-json-file", topics,
        "--broker-list", "2,0",
    )  # fmt: skip
    current = {p["partition"]: p["replicas"] for p in generated["current"]["partitions"]}
    assert current == {0: [0, 1], 1: [1, 2]}
    proposed = generated["proposed"]
    assert {p["partition"]: p["replicas"] for p in proposed["partitions"]} == {
        0: [2, 0],
        1: [0, 2],
    }
    plan = write(tmp_path / "plan.json", proposed)
    started = on(
        tools_cluster, "reassign", "execute", "--reassignment-json-file", plan,
        "--throttle", "50000000",
    )  # fmt: skip
    assert started["rollback"] == generated["current"]
    # Kafka's throttle: the moving partitions' current replicas lead-throttled, the new ones
    # follow-throttled, the rate on every broker involved (until verify removes them).
    [moving] = on(tools_cluster, "topics", "describe", "--topic", topic)
    assert moving["configs"] == {
        "follower.replication.throttled.replicas": "0:2,1:0",
        "leader.replication.throttled.replicas": "0:0,0:1,1:1,1:2",
    }
    rates = described_broker(tools_cluster, "2")
    assert rates["leader.replication.throttled.rate"]["value"] == "50000000"
    assert rates["follower.replication.throttled.rate"]["value"] == "50000000"

    def verified() -> bool:
        return bool(
            on(tools_cluster, "reassign", "verify", "--reassignment-json-file", plan)["complete"]
        )

    wait_for(verified, 60, "the reassignment complete")
    [found] = on(tools_cluster, "topics", "describe", "--topic", topic)
    assert {p["partition"]: p["replicas"] for p in found["partitions"]} == {0: [2, 0], 1: [0, 2]}
    # verify removed the throttles it set.
    assert found["configs"] == {}
    assert not any("throttled" in name for name in described_broker(tools_cluster, "2"))
    # Nothing left to cancel.
    assert on(tools_cluster, "reassign", "cancel", "--reassignment-json-file", plan) == {
        "cancelled": []
    }

    # The new preferred leaders (2 and 0) lead after a preferred election.
    rows = on(tools_cluster, "elect", "--election-type", "preferred", "--all-topic-partitions")
    assert all(r["result"] in ("elected", "not needed") for r in rows)
    wait_for(
        lambda: (
            {p: s.leader_id for p, s in partitions_of(tools_cluster, topic).items()} == {0: 2, 1: 0}
        ),
        30,
        "the preferred leaders",
    )
    again = on(
        tools_cluster, "elect", "--election-type", "preferred", "--topic", topic, "--partition", "0"
    )
    assert again == [{"topic": topic, "partition": 0, "result": "not needed"}]
