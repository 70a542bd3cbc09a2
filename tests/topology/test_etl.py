"""gregor-etl on the topology's ETL host (dc1-etl): a Spark service loading dc1's topic
(which it finds once it appears) into its Parquet warehouse while dc1's client host
produces to it (idempotent, acks=all, RF=3, min.insync.replicas=2) and a nemesis strikes
dc1: the controller killed, the ETL host cut
from its cluster, the ETL's driver (with its JVM and Python workers) SIGKILLed and started
again, then paused. Once healed, the warehouse holds every acknowledged record exactly
once, nothing that was never sent, and every offset of the topic once.

GREGOR_ETL_TOPOLOGY_SECONDS is how long the producers run; from the ETL's first committed
batch on, the nemesis plays its round of faults, once per ROUND seconds of that (at least
once). `nox -s topology_etl_faults` runs it for 5 minutes: 6 rounds. The default suite
leaves it to that session: its short variant is the two-datacenter fault runs
(tests/faults/test_two_datacenters.py), whose schedules strike the same ETL service (killed
mid-batch, paused, its host cut off) and check its warehouse the same way.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gregor.devcluster.etl import EtlProcess
from gregor.devcluster.netns import NetnsTopology
from gregor.spark.etl import checkpoint_offsets, committed_files
from gregor_testing.clienthosts import finish, workload, workload_argv
from gregor_testing.copies import warehouse_reads
from gregor_testing.history import check
from gregor_testing.nemesis import CONTROLLER, Fault, Hosts, Nemesis, wait_until
from gregor_testing.topology import requires_netns, topology_up

pytestmark = [
    requires_netns,
    pytest.mark.slow,
    pytest.mark.skipif(
        "GREGOR_ETL_TOPOLOGY_SECONDS" not in os.environ,
        reason="nox -s topology_etl_faults runs it; the default suite's two-datacenter fault "
        "runs strike the ETL service",
    ),
]

TOPIC = "events"
SECONDS = float(os.environ.get("GREGOR_ETL_TOPOLOGY_SECONDS", "30"))
ETL = "dc1-etl"
ROUND = 45.0
# A round, from its start: the controller killed, the ETL host cut from its cluster, the
# ETL's driver SIGKILLed (with its JVM and workers) and started again, then paused.
FAULTS = [
    Fault(0, 12, "kill", (CONTROLLER,)),
    Fault(6, 12, "isolate", (ETL,)),
    Fault(22, 8, "kill", (ETL,)),
    Fault(34, 6, "pause", (ETL,)),
]
PLAN = [
    Fault(f.at + ROUND * n, f.seconds, f.kind, f.hosts)
    for n in range(max(1, int(SECONDS // ROUND)))
    for f in FAULTS
]


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetnsTopology]:
    with topology_up(tmp_path_factory.mktemp("etl"), datacenters=["dc1"]) as topology:
        yield topology


def high_watermarks(topology: NetnsTopology) -> dict[tuple[str, int], int]:
    argv = workload_argv(topology, "ends", "--topic", TOPIC)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return {(TOPIC, int(p)): high for p, high in json.loads(done.stdout).items()}


def test_etl_loads_every_record_once_through_faults(
    topology: NetnsTopology, tmp_path: Path
) -> None:
    history = tmp_path / "history.jsonl"
    # Serving before the topic exists: the service finds it when it appears.
    etl: EtlProcess = topology.start_etl(pattern=TOPIC, every=2.0, batch=1000)
    wait_until(lambda: "gregor-etl: serving" in etl.log_path.read_text(), 240, "the ETL to serve")
    finish(workload(topology, "create", "--topic", TOPIC), "create", 90)
    table = etl.warehouse / TOPIC
    producer = workload(
        topology, "produce", "--topic", TOPIC, "--history", str(history),
        "--seconds", str(SECONDS),
    )  # fmt: skip
    nemesis = Nemesis(Hosts.of_topology(topology, "dc1"))
    try:
        try:
            wait_until(lambda: bool(committed_files(table)), 240, "the ETL's first batch")
            nemesis.play(PLAN, threading.Event())
        finally:
            nemesis.restore()
        finish(producer, "producers", SECONDS + 120)
        # The service loads the rest; the checkpoint reaches the topic's end.
        ends = high_watermarks(topology)
        checkpoint = etl.warehouse / "_checkpoints" / TOPIC
        wait_until(lambda: checkpoint_offsets(checkpoint) == ends, 300, f"the ETL to load {ends}")
        assert etl.stop(60) == 0, etl.log_tail()
    finally:
        if producer.poll() is None:
            producer.kill()
            producer.wait()
        print("\n".join(nemesis.done))
    shutil.copy(history, tmp_path / "etl.jsonl")
    log = etl.log_path.read_text()
    assert f"gregor-etl: loading {TOPIC} too" in log
    restarts = log.count("starting over in")
    rows = warehouse_reads(table, tmp_path / "etl.jsonl")  # as a reader's reads
    report = check(tmp_path / "etl.jsonl")
    print(
        f"acked {report.acked} of {report.sent} sent; in the warehouse {report.read} rows: "
        f"lost {len(report.lost)}, duplicates {len(report.duplicates)}, phantom "
        f"{len(report.phantom)}, reordered {len(report.reordered)}; queries started over "
        f"{restarts} times; ends {ends}"
    )
    assert report.acked > 0
    assert report.lost == [], report.lost[:20]
    assert report.duplicates == [], report.duplicates[:20]
    assert report.phantom == [] and report.reordered == [] and report.misplaced == []
    offsets = sorted((TOPIC, r["partition"], r["offset"]) for r in rows)
    assert offsets == [(t, p, o) for (t, p), end in sorted(ends.items()) for o in range(end)]
