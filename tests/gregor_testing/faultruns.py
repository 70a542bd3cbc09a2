"""Jepsen-style runs on dc1's cluster of the namespace topology (3 ZooKeepers, 3 brokers):
the workload (`workload.py`) produces from dc1's client host while a nemesis plays a
randomized schedule (`schedules.py`); then everything is healed and restarted, a reader
reads the topic whole, and the checker (`history.py`) reads the history.

`nox -s faults -- --runs N --seed S [--seconds T]` prints a table, a row per run, and last a
machine-readable total:
`total: runs=N acked=A lost=L duplicates=D reordered=R phantom=P unavailable_s=U`.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from gregor.devcluster import namespaces
from gregor.devcluster.netns import NetnsTopology
from gregor_testing.history import Report, check
from gregor_testing.schedules import Fault, Jepsen2013, Nemesis, jepsen_2013, schedule

DATACENTER = "dc1"
CLIENT = "dc1-client"
WORKLOAD = Path(__file__).with_name("workload.py")


@dataclass
class Run:
    number: int
    seed: int
    faults: list[Fault]
    report: Report
    history: Path
    nemesis: Nemesis
    scenario: Jepsen2013 | None = None


def workload(topology: NetnsTopology, command: str, *args: str) -> subprocess.Popen[bytes]:
    """`workload.py command` on the client host, against dc1's cluster."""
    argv = [
        *namespaces.exec_prefix(topology.namespace(CLIENT)),
        sys.executable,
        str(WORKLOAD),
        command,
        "--bootstrap",
        topology.bootstrap_servers(DATACENTER),
        *args,
    ]
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL)


def finish(process: subprocess.Popen[bytes], what: str, timeout: float) -> None:
    try:
        status = process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise RuntimeError(f"the workload's {what} did not end in {timeout} s") from None
    if status != 0:
        raise RuntimeError(f"the workload's {what} exited with status {status}")


def one_run(
    topology: NetnsTopology,
    number: int,
    seed: int,
    seconds: float,
    directory: Path,
    faults: int,
    scenario: str = "random",
) -> Run:
    """One run: the seeded random schedule, or (scenario "jepsen2013") Jepsen's 2013 one."""
    nemesis = Nemesis(topology, DATACENTER)
    plan = schedule(seed, seconds, nemesis.hosts, faults) if scenario == "random" else []
    seen: Jepsen2013 | None = None
    topic, history = f"jepsen-{number}", directory / f"history-{number}.jsonl"
    finish(workload(topology, "create", "--topic", topic), "create", 90)
    producer = workload(
        topology, "produce", "--topic", topic, "--history", str(history),
        "--seconds", str(seconds),
    )  # fmt: skip
    try:
        try:
            if scenario == "jepsen2013":
                seen = jepsen_2013(nemesis, topic)
            nemesis.play(plan, threading.Event())
        finally:
            nemesis.restore()
        finish(producer, "producers", seconds + 120)
    finally:
        if producer.poll() is None:  # only after a failure: stop it, its history stays
            producer.kill()
            producer.wait()
    finish(workload(topology, "read", "--topic", topic, "--history", str(history)), "read", 180)
    return Run(number, seed, plan, check(history), history, nemesis, seen)


def runs(
    topology: NetnsTopology, count: int, seed: int, seconds: float, directory: Path, faults: int
) -> list[Run]:
    return [one_run(topology, n, seed + n, seconds, directory, faults) for n in range(1, count + 1)]


def table(done: list[Run]) -> str:
    head = f"{'run':>4} {'seed':>6} {'sent':>6} {'acked':>6} {'errors':>6} {'lost':>4} "
    head += f"{'dup':>4} {'reord':>5} {'phant':>5} {'moved':>5} {'unavail_s':>9}  schedule"
    lines = [head]
    total = Report()
    for run in done:
        r = run.report
        total.add(r)
        lines.append(
            f"{run.number:>4} {run.seed:>6} {r.sent:>6} {r.acked:>6} {r.errors:>6} "
            f"{len(r.lost):>4} {len(r.duplicates):>4} {len(r.reordered):>5} "
            f"{len(r.phantom):>5} {len(r.misplaced):>5} {r.unavailable_s:>9.1f}  "
            + "; ".join(str(f) for f in run.faults or ["jepsen2013"])
        )
    lines.append(
        f"total: runs={len(done)} acked={total.acked} lost={len(total.lost)} "
        f"duplicates={len(total.duplicates)} reordered={len(total.reordered)} "
        f"phantom={len(total.phantom)} unavailable_s={total.unavailable_s:.1f}"
    )
    return "\n".join(lines)


def main() -> None:
    from gregor_testing.topology import topology_up

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seconds", type=float, default=45, help="each run's length")
    parser.add_argument("--faults", type=int, default=4, help="faults a run")
    parser.add_argument("--dir", type=Path, help="where the topology and histories live")
    parser.add_argument(
        "--scenario", choices=["random", "jepsen2013"], default="random", help="the faults"
    )
    args = parser.parse_args()
    directory = args.dir or Path(tempfile.mkdtemp(prefix="gregor-faults-"))
    print(f"topology and histories in {directory}", flush=True)
    done: list[Run] = []
    with topology_up(directory / "topology", datacenters=[DATACENTER]) as topology:
        for n in range(1, args.runs + 1):
            run = one_run(
                topology, n, args.seed + n, args.seconds, directory, args.faults, args.scenario
            )
            done.append(run)
            if run.scenario is not None:
                print("\n".join(run.nemesis.done), flush=True)
            print(table(done).splitlines()[-2], flush=True)
    print(table(done))
    sys.exit(0 if all(run.report.ok for run in done) else 1)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
