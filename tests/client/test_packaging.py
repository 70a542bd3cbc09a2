"""`pip install gregor-client` alone is enough: build the gregor-client wheel (and
gregor-protocol's, which it needs) as a user does, install them in a fresh venv with nothing
else of Gregor, and run a produce and consume round trip against a real broker from there."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from gregor.devcluster import LocalCluster
from gregor_testing.builds import Built, fresh_venv, run
from gregor_testing.cluster import create_topic, unique_topic

pytestmark = pytest.mark.slow

ROUND_TRIP = textwrap.dedent(
    """
    import json, sys
    from gregor.client import Consumer, Producer, TopicPartition

    bootstrap, topic = sys.argv[1], sys.argv[2]
    with Producer({"bootstrap.servers": bootstrap}) as producer:
        for i in range(10):
            producer.produce(topic, b"value-%d" % i, key=b"key-%d" % i, partition=0)
        producer.flush(60)
    with Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest"}) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        got = []
        while len(got) < 10:
            got += consumer.consume(10, timeout=30)
    print(json.dumps([[r.offset, r.key.decode(), r.value.decode()] for r in got]))
    """
)


def test_the_client_wheel_works_alone(
    tmp_path: Path, shared_cluster: LocalCluster, distributions: Callable[[str], Built]
) -> None:
    wheel = distributions("client").wheel
    python = fresh_venv(tmp_path / "venv", wheel, links=wheel.parent)
    installed = run(sys.executable, "-m", "pip", "--python", python, "list", "--format=json")
    names = {p["name"] for p in json.loads(installed.stdout)}
    assert {"gregor-client", "gregor-protocol", "trio", "attrs"} <= names
    assert not {n for n in names if n.startswith("gregor-")} - {"gregor-client", "gregor-protocol"}
    for absent in ("gregor.broker", "gregor.storage"):
        probe = subprocess.run(
            [python, "-c", f"import {absent}"], capture_output=True, cwd=tmp_path
        )
        assert probe.returncode != 0, f"{absent} is importable in the fresh venv"
    # The wheels carry their C extensions (this machine has a compiler), and they find each
    # other: the producer's per-record path uses gregor-protocol's through its capsule.
    native = run(
        python,
        "-c",
        "from gregor.client.producer import accumulator; print(accumulator._native_append)",
        cwd=tmp_path,
    )
    assert "built-in function append" in native.stdout
    topic = unique_topic("wheel")
    create_topic(shared_cluster, topic, partitions=1, replication_factor=3)
    script = tmp_path / "round_trip.py"
    script.write_text(ROUND_TRIP)
    out = run(python, script, shared_cluster.bootstrap_servers, topic, cwd=tmp_path).stdout
    assert json.loads(out) == [[i, f"key-{i}", f"value-{i}"] for i in range(10)]
