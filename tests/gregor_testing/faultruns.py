"""Jepsen-style runs on dc1's cluster of the namespace topology (3 ZooKeepers, 3 brokers):
the workload (`workload.py`) produces from dc1's client host while a nemesis plays a
randomized schedule (`schedules.py`); then everything is healed and restarted, a reader
reads the topic whole, and the checker (`history.py`) reads the history.

`nox -s faults -- --runs N --seed S [--seconds T]` prints a table, a row per run, and last a
machine-readable total:
`total: runs=N acked=A lost=L duplicates=D reordered=R phantom=P unavailable_s=U`.

Run n plays the schedule of seed S + n. A long session goes in chunks (each a topology of
its own): `--first 26 --runs 25` plays runs 26-50; every run leaves its summary,
`run-<n>.json`, in `--dir`, and `--table DIR...` prints the table of every summary found.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

from gregor.devcluster import namespaces
from gregor.devcluster.netns import NetnsTopology
from gregor_testing.evidence import gather
from gregor_testing.history import Report, check
from gregor_testing.nemesis import Fault, Hosts, Nemesis
from gregor_testing.schedules import KINDS, Jepsen2013, jepsen_2013, schedule

DATACENTER = "dc1"
DISK_MB = 128  # each broker's log directory: room for a few dozen runs, quick to fill
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
    evidence: Path | None = None  # when records were read twice or out of place

    @property
    def summary(self) -> Summary:
        return Summary.of(self.number, self.seed, [str(f) for f in self.faults], self.report,
                          self.history)  # fmt: skip


@dataclass
class Summary:
    """A run's row of the table, kept as `run-<number>.json` beside its history."""

    number: int
    seed: int
    schedule: list[str]
    sent: int
    acked: int
    errors: int
    lost: int
    duplicates: int
    reordered: int
    phantom: int
    moved: int
    unavailable_s: float
    lost_ids: list[str]  # the first few, to look for in the history
    history: str

    def save(self, directory: Path) -> None:
        (directory / f"run-{self.number}.json").write_text(json.dumps(asdict(self)) + "\n")

    @classmethod
    def of(cls, number: int, seed: int, schedule: list[str], r: Report, history: Path) -> Summary:
        return cls(
            number, seed, schedule or ["jepsen2013"], r.sent, r.acked, r.errors, len(r.lost),
            len(r.duplicates), len(r.reordered), len(r.phantom), len(r.misplaced),
            round(r.unavailable_s, 1), r.lost[:20], str(history),
        )  # fmt: skip

    @classmethod
    def load(cls, path: Path) -> Summary:
        """A kept summary, its counts checked again from its history if that is still there
        (the checker may have learnt since)."""
        kept = cls(**json.loads(path.read_text()))
        history = Path(kept.history)
        if not history.exists():
            return kept
        return cls.of(kept.number, kept.seed, kept.schedule, check(history), history)


def workload_argv(
    topology: NetnsTopology,
    command: str,
    *args: str,
    host: str = CLIENT,
    datacenter: str = DATACENTER,
) -> list[str]:
    """`workload.py command` on a client host (by default dc1's), against a datacenter's
    cluster (by default dc1)."""
    return [
        *namespaces.exec_prefix(topology.namespace(host)),
        sys.executable,
        str(WORKLOAD),
        command,
        "--bootstrap",
        topology.bootstrap_servers(datacenter),
        *args,
    ]


def workload(
    topology: NetnsTopology, command: str, *args: str, log: Path | None = None
) -> subprocess.Popen[bytes]:
    """`workload.py command` on dc1's client host, against dc1's cluster; its stderr to
    `log` when given."""
    argv = workload_argv(topology, command, *args)
    if log is None:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL)
    with log.open("ab") as err:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stderr=err)


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
    kinds: tuple[str, ...] = (),
    plan: list[Fault] | None = None,
) -> Run:
    """One run: `plan`, else the seeded random schedule (of `kinds` of fault, by default
    every kind), or (scenario "jepsen2013") Jepsen's 2013 one."""
    nemesis = Nemesis(Hosts.of_topology(topology, DATACENTER))
    if plan is None:
        plan = []
        if scenario == "random":
            plan = schedule(seed, seconds, nemesis.hosts.names, faults, kinds, nemesis.brokers)
    seen: Jepsen2013 | None = None
    topic, history = f"jepsen-{number}", directory / f"history-{number}.jsonl"
    finish(workload(topology, "create", "--topic", topic), "create", 90)
    producer_log = directory / f"producer-{number}.log"
    producer = workload(
        topology, "produce", "--topic", topic, "--history", str(history),
        "--seconds", str(seconds), log=producer_log,
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
    report = check(history)
    run = Run(number, seed, plan, report, history, nemesis, seen)
    doubtful = report.duplicates or report.misplaced
    if doubtful:  # before the topology (and the brokers' disks) goes
        brokers = {h: (b.data_dir, b.log_path) for h, b in nemesis.hosts.brokers.items()}
        out = directory / f"evidence-{number}.txt"
        run.evidence = gather(out, history, doubtful, topic, brokers, producer_log)
    return run


def runs(
    topology: NetnsTopology,
    count: int,
    seed: int,
    seconds: float,
    directory: Path,
    faults: int,
    first: int = 1,
    kinds: tuple[str, ...] = (),
) -> list[Run]:
    """Runs `first` .. `first + count - 1`, run n with the schedule of seed `seed + n`."""
    return [
        one_run(topology, n, seed + n, seconds, directory, faults, kinds=kinds)
        for n in range(first, first + count)
    ]


def table(rows: list[Summary]) -> str:
    head = f"{'run':>4} {'seed':>6} {'sent':>6} {'acked':>6} {'errors':>6} {'lost':>4} "
    head += f"{'dup':>4} {'reord':>5} {'phant':>5} {'moved':>5} {'unavail_s':>9}  schedule"
    lines = [head] + [
        f"{r.number:>4} {r.seed:>6} {r.sent:>6} {r.acked:>6} {r.errors:>6} {r.lost:>4} "
        f"{r.duplicates:>4} {r.reordered:>5} {r.phantom:>5} {r.moved:>5} "
        f"{r.unavailable_s:>9.1f}  " + "; ".join(r.schedule)
        for r in rows
    ]
    lines.append(
        f"total: runs={len(rows)} acked={sum(r.acked for r in rows)} "
        f"lost={sum(r.lost for r in rows)} duplicates={sum(r.duplicates for r in rows)} "
        f"reordered={sum(r.reordered for r in rows)} phantom={sum(r.phantom for r in rows)} "
        f"unavailable_s={sum(r.unavailable_s for r in rows):.1f}"
    )
    return "\n".join(lines)


def summaries(directories: list[Path]) -> list[Summary]:
    found = [Summary.load(p) for d in directories for p in d.glob("run-*.json")]
    return sorted(found, key=lambda r: r.number)


def main() -> None:
    from gregor_testing.topology import topology_up

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--first", type=int, default=1, help="the number of the first run")
    parser.add_argument("--seconds", type=float, default=45, help="each run's length")
    parser.add_argument("--faults", type=int, default=4, help="faults a run")
    parser.add_argument("--dir", type=Path, help="where the topology, histories, summaries live")
    parser.add_argument(
        "--scenario", choices=["random", "jepsen2013"], default="random", help="the faults"
    )
    parser.add_argument(
        "--kinds", nargs="+", choices=KINDS, default=[], help="the kinds of fault (default: all)"
    )
    parser.add_argument(
        "--table", type=Path, nargs="+", help="only print the table of the summaries in these"
    )
    args = parser.parse_args()
    if args.table:
        rows = summaries(args.table)
        print(table(rows))
        sys.exit(
            0 if all(r.lost + r.duplicates + r.reordered + r.phantom == 0 for r in rows) else 1
        )
    directory = args.dir or Path(tempfile.mkdtemp(prefix="gregor-faults-"))
    directory.mkdir(parents=True, exist_ok=True)
    print(f"topology, histories and summaries in {directory}", flush=True)
    done: list[Summary] = []
    ok = True
    with topology_up(
        directory / "topology", datacenters=[DATACENTER], broker_disk_mb=DISK_MB
    ) as topology:
        for n in range(args.first, args.first + args.runs):
            run = one_run(
                topology, n, args.seed + n, args.seconds, directory, args.faults,
                args.scenario, tuple(args.kinds),
            )  # fmt: skip
            run.summary.save(directory)
            done.append(run.summary)
            ok = ok and run.report.ok
            if run.scenario is not None:
                print("\n".join(run.nemesis.done), flush=True)
            print(table(done).splitlines()[-2], flush=True)
    print(table(done))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
