"""A KafkaJS (Node.js) consumer group: two members share a topic, commit every record, and
the coordinator describes the group while both are in it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from groups.helpers import committed_offsets, produce

from gregor.devcluster import LocalCluster
from gregor_testing.cluster import create_topic, unique_topic

HERE = Path(__file__).resolve().parent
NODE_MODULES = HERE.parent / "interop" / "node_modules"
PARTITIONS = 4
COUNT = 200

pytestmark = pytest.mark.skipif(
    shutil.which("node") is None or not (NODE_MODULES / "kafkajs").is_dir(),
    reason="KafkaJS is not installed (infra/setup.sh installs it into tests/interop)",
)


@pytest.mark.interop("kafkajs", "groups")
def test_kafkajs_consumer_group(group_cluster: LocalCluster) -> None:
    topic = unique_topic("kafkajs-group")
    create_topic(group_cluster, topic, partitions=PARTITIONS, replication_factor=3)
    values = [f"js-{i}".encode() for i in range(COUNT)]
    produce(group_cluster, topic, values, PARTITIONS)
    group = unique_topic("g-kafkajs")
    done = subprocess.run(
        [
            "node",
            str(HERE / "kafkajs_group.js"),
            group_cluster.bootstrap_servers,
            topic,
            group,
            str(COUNT),
        ],
        capture_output=True,
        timeout=180,
        check=False,
        env={**os.environ, "NODE_PATH": str(NODE_MODULES)},
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    result = json.loads(done.stdout)
    consumed = result["consumed"]
    assert sorted(value.encode() for _, _, _, value in consumed) == sorted(values)
    assert result["described"] == {
        "state": "Stable",
        "protocolType": "consumer",
        "protocol": "RoundRobinAssigner",
        "members": 2,
    }
    per_partition = COUNT // PARTITIONS
    assert sorted(result["committed"]) == [[p, per_partition] for p in range(PARTITIONS)]
    assert committed_offsets(group_cluster, group) == {
        (topic, p): per_partition for p in range(PARTITIONS)
    }
