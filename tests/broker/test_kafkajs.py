"""KafkaJS (Node.js) produces to and reads from a real cluster."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from gregor.devcluster import LocalCluster
from gregor_testing.cluster import create_topic, unique_topic

INTEROP = Path(__file__).resolve().parents[1] / "interop"

pytestmark = pytest.mark.skipif(
    shutil.which("node") is None or not (INTEROP / "node_modules" / "kafkajs").is_dir(),
    reason="KafkaJS is not installed (infra/setup.sh installs it into tests/interop)",
)


@pytest.mark.interop("kafkajs", "fetch")
def test_kafkajs_produces_and_reads_back(shared_cluster: LocalCluster) -> None:
    topic = unique_topic("kafkajs")
    create_topic(shared_cluster, topic, partitions=2, replication_factor=3)
    count = 200
    done = subprocess.run(
        [
            "node",
            str(INTEROP / "kafkajs_roundtrip.js"),
            shared_cluster.bootstrap_servers,
            topic,
            str(count),
        ],
        capture_output=True,
        timeout=120,
        check=False,
        cwd=INTEROP,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    result = json.loads(done.stdout)
    assert sorted(map(tuple, result["produced"])) == [(0, 0), (1, 0)]
    expected = [[p, i, f"k{i}", f"kafkajs {p} {i}", str(i)] for p in (0, 1) for i in range(count)]
    assert result["consumed"] == expected
