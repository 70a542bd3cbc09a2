"""Jepsen-style runs in the default suite: dc1's cluster of the namespace topology (3
ZooKeepers, 3 brokers) takes randomized, overlapping process and network faults (the
controller among the targets) while idempotent acks=all producers write to an RF=3,
min.insync.replicas=2 topic; after each run a reader reads it whole and the checker finds
no acknowledged record lost, none twice, none out of order, none never sent.

`nox -s faults -- --runs N --seed S` is the long variant (longer runs, more of them)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from gregor.devcluster.netns import NetnsTopology
from gregor_testing.faultruns import DATACENTER, DISK_MB, Run, one_run, runs, table
from gregor_testing.nemesis import CONTROLLER, Fault
from gregor_testing.topology import requires_netns, topology_up

pytestmark = [requires_netns, pytest.mark.slow]

RUNS = int(os.environ.get("GREGOR_FAULT_RUNS", "5"))
SEED = int(os.environ.get("GREGOR_FAULT_SEED", "1000"))
SECONDS = 14.0  # each run: room for two overlapping faults, a pause past the session timeout


@pytest.fixture(scope="module")
def dc1(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetnsTopology]:
    directory = tmp_path_factory.mktemp("faults")
    with topology_up(directory, datacenters=[DATACENTER], broker_disk_mb=DISK_MB) as topology:
        yield topology


def assert_nothing_lost(run: Run) -> None:
    r = run.report
    assert r.acked > 0
    assert (r.lost, r.duplicates, r.reordered, r.phantom, r.misplaced) == ([], [], [], [], [])


def log_of(topology: NetnsTopology, host: str) -> str:
    return topology.processes[host].log_path.read_text(errors="replace")


def test_no_acknowledged_record_is_lost_through_faults(dc1: NetnsTopology, tmp_path: Path) -> None:
    done = runs(dc1, RUNS, SEED, SECONDS, tmp_path, faults=2)
    rows = table([run.summary for run in done])
    print(rows)
    assert all(run.report.acked > 0 for run in done), rows
    for run in done:
        r = run.report
        where = f"run {run.number} (seed {run.seed}, history {run.history})"
        if run.evidence is not None:  # the brokers' batches and logs, kept for the reader
            where += "\n" + run.evidence.read_text()[-20_000:]
        assert r.lost == [], f"{where}: acknowledged, never read: {r.lost[:20]}"
        assert r.duplicates == [], f"{where}: read twice: {r.duplicates[:20]}"
        assert r.reordered == [], f"{where}: out of order: {r.reordered[:20]}"
        assert r.phantom == [], f"{where}: never sent: {r.phantom[:20]}"
        assert r.misplaced == [], f"{where}: not where acknowledged: {r.misplaced[:20]}"
        assert r.incomplete == [], f"{where}: {r.incomplete}"


def test_jepsen_2013_the_isr_shrinks_to_the_leader_and_the_leader_dies(
    dc1: NetnsTopology, tmp_path: Path
) -> None:
    """Kafka 0.8 lost acknowledged writes here (Jepsen, 2013): with min.insync.replicas=2
    and unclean election off, Gregor keeps every one, and no follower that lacks them leads
    while the leader is dead."""
    run = one_run(dc1, 100, SEED, 30, tmp_path, 0, scenario="jepsen2013")
    print(table([run.summary]), *run.nemesis.done, sep="\n")
    seen = run.scenario
    assert seen is not None
    leader_id = dc1.topology.hosts[seen.leader].id
    assert seen.isr_at_kill == [leader_id]
    assert seen.leader_while_dead == -1
    assert_nothing_lost(run)


def test_the_controller_s_zookeeper_session_expires_while_it_runs(
    dc1: NetnsTopology, tmp_path: Path
) -> None:
    """The controller is cut from every ZooKeeper past its session timeout, then healed: the
    same process finds its session expired, starts a new one and registers again; another
    controller was elected meanwhile; nothing acknowledged is lost."""
    nemesis_plan = [Fault(2, 12, "expire", (CONTROLLER,))]
    pids = {host: dc1.processes[host].pid for host in dc1.processes}
    run = one_run(dc1, 101, SEED, 24, tmp_path, 0, plan=nemesis_plan)
    print(table([run.summary]), *run.nemesis.done, sep="\n")
    victim = run.nemesis.done[0].split()[-1]
    assert dc1.processes[victim].pid == pids[victim]  # the same process throughout
    log = log_of(dc1, victim)
    assert "expired" in log and "new ZooKeeper session" in log, log[-3000:]
    assert_nothing_lost(run)


def test_a_full_disk_halts_its_broker_and_loses_nothing(dc1: NetnsTopology, tmp_path: Path) -> None:
    """A broker's log directory fills up: the broker halts (its only log directory is
    offline), the others lead; the disk is freed and the broker started again, recovers its
    log and catches up; nothing acknowledged is lost."""
    victim = "dc1-broker2"
    pid = dc1.processes[victim].pid
    run = one_run(dc1, 102, SEED, 24, tmp_path, 0, plan=[Fault(2, 8, "disk_full", (victim,))])
    print(table([run.summary]), *run.nemesis.done, sep="\n")
    assert dc1.processes[victim].pid != pid  # it halted and was started again
    assert "every log directory" in log_of(dc1, victim)
    assert_nothing_lost(run)
