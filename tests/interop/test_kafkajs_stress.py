"""KafkaJS's new consumer groups on fresh topics, one after another (issue 10: once a new
group's KafkaJS consumer silently received nothing for 30 s on an uncompressed topic).

On a cluster of its own, so the first group also creates `__consumer_offsets`. Each
iteration makes a topic, produces 12 records before or after a new group joins, creates the
topic with or without waiting for its leaders, and reads them from the beginning with the
KafkaJS defaults (read_committed: the consumer sees up to the last stable offset). Every
iteration must read exactly its records, without a stall; a stalled one shows its
consumer's debug log and what the coordinator logged about its group. The default run
does GREGOR_KAFKAJS_STRESS=4 iterations; `nox -s kafkajs_stress` does 100.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from gregor.devcluster import LocalCluster
from gregor_testing.cluster import unique_topic
from gregor_testing.matrix import NODE_MODULES

HERE = Path(__file__).resolve().parent
ITERATIONS = int(os.environ.get("GREGOR_KAFKAJS_STRESS", "4"))
RECORDS = 12
# How long one consumer may take to read its records: far above the ~3.5 s a new group
# takes (group.initial.rebalance.delay.ms is 3 s), far below a stall of KafkaJS's defaults
# (metadata.max.age 5 min).
DEADLINE_MS = 60_000
# A consumer slower than this stalled: the stall seen once lasted 30 s, KafkaJS's session
# timeout (a member id the client gave up on, waited for until it expires, is one way).
STALL_MS = 20_000

pytestmark = pytest.mark.skipif(
    shutil.which("node") is None or not (NODE_MODULES / "kafkajs").is_dir(),
    reason="KafkaJS is not installed (infra/setup.sh installs it into tests/interop)",
)


def test_every_new_kafkajs_group_reads_its_records(
    cluster_factory: Callable[..., LocalCluster],
) -> None:
    cluster = cluster_factory(3)
    prefix = unique_topic("js-stress")
    done = subprocess.run(
        [
            "node",
            str(HERE / "kafkajs_stress.js"),
            cluster.bootstrap_servers,
            prefix,
            str(ITERATIONS),
            str(DEADLINE_MS),
            str(STALL_MS),
        ],
        capture_output=True,
        timeout=ITERATIONS * (DEADLINE_MS / 1000 + 60),
        check=False,
        env={**os.environ, "NODE_PATH": str(NODE_MODULES)},
    )
    stderr = done.stderr.decode(errors="replace")
    assert done.returncode == 0, stderr[-5000:]
    results = [json.loads(line) for line in done.stdout.decode().splitlines()]
    assert [r["iteration"] for r in results] == list(range(ITERATIONS))
    short = {r["iteration"]: len(r["read"]) for r in results if len(r["read"]) != RECORDS}
    assert not short, f"iterations that read too little: {short}\n{stderr[-20000:]}"
    for r in results:
        i = r["iteration"]
        assert sorted(r["read"]) == sorted(f"{i}-{k}" for k in range(RECORDS))
    print("ms to read every record, per iteration:", [r["ms"] for r in results])
    stalled = [r["iteration"] for r in results if r["ms"] > STALL_MS]
    if stalled:
        groups = [f"{prefix}-{i}-group" for i in stalled]
        coordinator = [
            line
            for broker in cluster.brokers
            for line in broker.log_path.read_text(errors="replace").splitlines()
            if any(g in line for g in groups)
        ]
        pytest.fail(
            f"iterations that stalled: {stalled}\nthe coordinators' lines about their groups:\n"
            + "\n".join(coordinator)
            + f"\nthe consumers' logs:\n{stderr[-20000:]}"
        )
