"""Jepsen-style runs on dc1's cluster of the namespace topology (3 ZooKeepers, 3 brokers):
the workload (`workload.py`) produces from dc1's client host while a nemesis plays a
randomized schedule (`schedules.py`); then everything is healed and restarted, a reader
reads the topic whole, and the checker (`history.py`) reads the history.

`nox -s faults -- --runs N --seed S [--seconds T]` prints a table, a row per run, and last a
machine-readable total:
`total: runs=N acked=A lost=L duplicates=D reordered=R phantom=P unavailable_s=U resent=S`.
`resent` counts records read twice that the brokers could not have told apart: librdkafka
sent them again under a new producer epoch (`evidence.resent_across_epochs`,
librdkafka#4953). They are shown, with their evidence, and do not fail a run.

Run n plays the schedule of seed S + n. A long session goes in chunks (each a topology of
its own): `--first 26 --runs 25` plays runs 26-50; every run leaves its summary,
`run-<n>.json`, in `--dir`, and `--table DIR...` prints the table of every summary found.

`--two-datacenters` (`nox -s faults_two_dc`) brings up both datacenters with their mirrors
(exactly once) and dc1's ETL (`gregor-etl` loading the runs' topics into its warehouse).
Each schedule then also strikes what reads dc1 (`schedules.service_schedule`): dc2's
mirror (killed, paused, restarted), the ETL (killed mid-batch, paused, cut off) and the WAN (cut);
dc1's faults are its process and network faults (the disk and session faults stay with
the one-datacenter runs). After each run the copies are checked too (`copies.py`): dc2's
`dc1.<topic>` read_committed, and the warehouse, each against dc1's acknowledgements: none
lost, none twice, none out of order, none never sent. The table gains their counts, and
the total line `mirror_lost=.. mirror_duplicates=.. ... etl_phantom=..`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from gregor.devcluster.etl import EtlProcess
from gregor.devcluster.netns import NetnsTopology
from gregor_testing import copies
from gregor_testing.clienthosts import DATACENTER, finish, workload
from gregor_testing.evidence import gather, resent_across_epochs
from gregor_testing.history import Report, check
from gregor_testing.nemesis import Fault, Hosts, Nemesis, wait_until
from gregor_testing.schedules import (
    KINDS,
    NETWORK_FAULTS,
    PROCESS_FAULTS,
    Jepsen2013,
    jepsen_2013,
    schedule,
    service_schedule,
)

DISK_MB = 128  # each broker's log directory: room for a few dozen runs, quick to fill
# Two-datacenter runs: dc1's faults, the mirrors' mode, what the ETL loads, and how.
TWO_DC_KINDS = PROCESS_FAULTS + NETWORK_FAULTS
EXACTLY_ONCE = {"exactly.once.support": "enabled"}
ETL_OPTIONS = {"pattern": r"jepsen-\d+", "every": 2.0, "batch": 1000}
COPIES = ("mirror", "etl")


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
    copies: dict[str, Report] = field(default_factory=dict)  # "mirror", "etl": their checks

    @property
    def ok(self) -> bool:
        return self.report.ok and all(r.ok for r in self.copies.values())

    @property
    def summary(self) -> Summary:
        return Summary.of(self.number, self.seed, [str(f) for f in self.faults], self.report,
                          self.history, self.copies)  # fmt: skip


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
    # The copies' counts (two-datacenter runs): {"mirror": {"lost": 0, ...}, "etl": ...}
    copies: dict[str, dict[str, int]] = field(default_factory=dict)
    # Read twice because the client sent them again under a new producer epoch (history.py)
    resent_ids: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        counts = [self.lost, self.duplicates, self.reordered, self.phantom]
        counts += [c[k] for c in self.copies.values() for k in COPY_COUNTS]
        return not any(counts)

    def save(self, directory: Path) -> None:
        (directory / f"run-{self.number}.json").write_text(json.dumps(asdict(self)) + "\n")

    @classmethod
    def of(
        cls, number: int, seed: int, schedule: list[str], r: Report, history: Path,
        copies: dict[str, Report] | None = None,
    ) -> Summary:  # fmt: skip
        return cls(
            number, seed, schedule or ["jepsen2013"], r.sent, r.acked, r.errors, len(r.lost),
            len(r.duplicates), len(r.reordered), len(r.phantom), len(r.misplaced),
            round(r.unavailable_s, 1), r.lost[:20], str(history),
            {name: copy_counts(c) for name, c in (copies or {}).items()}, r.resent,
        )  # fmt: skip

    @classmethod
    def load(cls, path: Path) -> Summary:
        """A kept summary, its counts checked again from its history if that is still there
        (the checker may have learnt since)."""
        kept = cls(**json.loads(path.read_text()))
        history = Path(kept.history)
        if not history.exists():
            return kept
        found = {name: copy_history(history, name) for name in kept.copies}
        checked = {name: check(p) for name, p in found.items() if p.exists()}
        report = check(history)
        for r in [report, *checked.values()]:
            r.set_aside(kept.resent_ids)  # what the brokers' logs showed, gone since
        return cls.of(kept.number, kept.seed, kept.schedule, report, history, checked)


COPY_COUNTS = ("lost", "duplicates", "reordered", "phantom")


def copy_counts(report: Report) -> dict[str, int]:
    return {"read": report.read, **{k: len(getattr(report, k)) for k in COPY_COUNTS}}


def copy_history(history: Path, name: str) -> Path:
    """Where a run's copy (`name`: mirror or etl) is checked: `history-<n>.<name>.jsonl`."""
    return history.with_suffix(f".{name}.jsonl")


def mirror_of(topology: NetnsTopology) -> str | None:
    """The mirror host that copies dc1 (into dc2), if its gregor-mirror runs."""
    found = [h.name for h in topology.topology.hosts.values() if h.source == DATACENTER]
    return next((h for h in found if h in topology.processes), None)


def etl_of(topology: NetnsTopology) -> EtlProcess | None:
    return next((p for p in topology.processes.values() if isinstance(p, EtlProcess)), None)


def check_copies(topology: NetnsTopology, topic: str, history: Path) -> dict[str, Report]:
    """The mirror's copy of the topic and the ETL's, where they run (see `copies`)."""
    checked: dict[str, Report] = {}
    if mirror_of(topology) is not None:
        checked["mirror"] = copies.mirrored(
            topology, topic, history, copy_history(history, "mirror")
        )
    etl = etl_of(topology)
    if etl is not None:
        checked["etl"] = copies.loaded(topology, etl, topic, history, copy_history(history, "etl"))
    return checked


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
    service_faults: int = 0,
) -> Run:
    """One run: `plan`, else the seeded random schedule (of `kinds` of fault, by default
    every kind; and `service_faults` on the services reading dc1 and the WAN), or (scenario
    "jepsen2013") Jepsen's 2013 one. Where a mirror copies dc1, or the ETL loads it, their
    copies are checked too."""
    nemesis = Nemesis(Hosts.of_topology(topology, DATACENTER))
    nemesis.restore()  # whole before the run, whatever a run before it left behind
    if plan is None:
        plan = []
        if scenario == "random":
            plan = schedule(seed, seconds, nemesis.hosts.names, faults, kinds, nemesis.brokers)
            services = {h: topology.topology.hosts[h].service for h in nemesis.hosts.services}
            extra = service_schedule(seed, seconds, services, service_faults)
            plan = sorted(plan + extra, key=lambda f: f.at) if service_faults else plan
    seen: Jepsen2013 | None = None
    topic, history = f"jepsen-{number}", directory / f"history-{number}.jsonl"
    finish(workload(topology, "create", "--topic", topic), "create", 90)
    etl = etl_of(topology)
    if etl is not None:  # from here on a batch of the topic is under way while it lags
        wait_until(lambda: copies.loading(etl, topic), 120, f"the ETL to load {topic}")
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
    copied = check_copies(topology, topic, history)
    run = Run(number, seed, plan, report, history, nemesis, seen, copies=copied)
    brokers = {h: (b.data_dir, b.log_path) for h, b in nemesis.hosts.brokers.items()}
    if report.duplicates:  # before the topology (and the brokers' disks) goes
        data_dirs = [data_dir for data_dir, _ in brokers.values()]
        resent = resent_across_epochs(history, report.duplicates, topic, data_dirs, producer_log)
        for r in [report, *copied.values()]:
            r.set_aside(resent)
    doubtful = report.duplicates or report.misplaced or report.resent
    if doubtful:
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
    service_faults: int = 0,
) -> list[Run]:
    """Runs `first` .. `first + count - 1`, run n with the schedule of seed `seed + n`."""
    return [
        one_run(
            topology,
            n,
            seed + n,
            seconds,
            directory,
            faults,
            kinds=kinds,
            service_faults=service_faults,
        )
        for n in range(first, first + count)
    ]


@contextmanager
def two_datacenters(directory: Path) -> Iterator[NetnsTopology]:
    """Both datacenters up under `directory`, with their mirrors copying exactly once, and
    dc1's ETL serving (it loads each run's topic once it appears)."""
    from gregor_testing.topology import topology_up

    with topology_up(directory, mirrors=True, mirror_settings=EXACTLY_ONCE) as topology:
        etl = topology.start_etl(**ETL_OPTIONS)
        log = etl.log_path
        wait_until(lambda: "gregor-etl: serving" in log.read_text(), 240, "the ETL to serve")
        yield topology


def table(rows: list[Summary]) -> str:
    """A row per run, then the total line (`resent`: read twice, sent again by the client
    under a new producer epoch, not failed). Where runs checked copies, each copy's lost,
    twice, out of order and never sent (`m:` the mirror's, `e:` the ETL's) come before the
    schedule, and their totals at the end of the total line."""
    names = [n for n in COPIES if any(n in r.copies for r in rows)]
    head = f"{'run':>4} {'seed':>6} {'sent':>6} {'acked':>6} {'errors':>6} {'lost':>4} "
    head += f"{'dup':>4} {'resent':>6} {'reord':>5} {'phant':>5} {'moved':>5} {'unavail_s':>9}  "
    head += "".join(f"{n[0]}:lost/dup/reord/phant " for n in names)

    def copied(r: Summary) -> str:
        counts = [r.copies.get(n) for n in names]
        cells = ["/".join(str(c[k]) for k in COPY_COUNTS) if c else "-" for c in counts]
        return "".join(f"{cell:>22} " for cell in cells)

    lines = [head + "schedule"] + [
        f"{r.number:>4} {r.seed:>6} {r.sent:>6} {r.acked:>6} {r.errors:>6} {r.lost:>4} "
        f"{r.duplicates:>4} {len(r.resent_ids):>6} {r.reordered:>5} {r.phantom:>5} {r.moved:>5} "
        f"{r.unavailable_s:>9.1f}  " + copied(r) + "; ".join(r.schedule)
        for r in rows
    ]
    total = (
        f"total: runs={len(rows)} acked={sum(r.acked for r in rows)} "
        f"lost={sum(r.lost for r in rows)} duplicates={sum(r.duplicates for r in rows)} "
        f"reordered={sum(r.reordered for r in rows)} phantom={sum(r.phantom for r in rows)} "
        f"unavailable_s={sum(r.unavailable_s for r in rows):.1f} "
        f"resent={sum(len(r.resent_ids) for r in rows)}"
    )
    for n in names:
        total += f" {n}_read={sum(r.copies[n]['read'] for r in rows if n in r.copies)}"
        total += "".join(
            f" {n}_{k}={sum(r.copies[n][k] for r in rows if n in r.copies)}" for k in COPY_COUNTS
        )
    return "\n".join([*lines, total])


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
    parser.add_argument(
        "--two-datacenters", action="store_true",
        help="both datacenters, the mirrors and dc1's ETL, with their faults and checks",
    )  # fmt: skip
    parser.add_argument(
        "--service-faults", type=int, default=2,
        help="with --two-datacenters: faults a run on the mirror, the ETL and the WAN",
    )  # fmt: skip
    args = parser.parse_args()
    if args.table:
        rows = summaries(args.table)
        print(table(rows))
        sys.exit(0 if all(r.ok for r in rows) else 1)
    directory = args.dir or Path(tempfile.mkdtemp(prefix="gregor-faults-"))
    directory.mkdir(parents=True, exist_ok=True)
    print(f"topology, histories and summaries in {directory}", flush=True)
    done: list[Summary] = []
    ok = True
    kinds, service_faults = tuple(args.kinds), 0
    if args.two_datacenters:
        up = two_datacenters(directory / "topology")
        kinds, service_faults = kinds or TWO_DC_KINDS, args.service_faults
    else:
        up = topology_up(directory / "topology", datacenters=[DATACENTER], broker_disk_mb=DISK_MB)
    with up as topology:
        for n in range(args.first, args.first + args.runs):
            run = one_run(
                topology, n, args.seed + n, args.seconds, directory, args.faults,
                args.scenario, kinds, service_faults=service_faults,
            )  # fmt: skip
            run.summary.save(directory)
            done.append(run.summary)
            ok = ok and run.ok
            if run.scenario is not None:
                print("\n".join(run.nemesis.done), flush=True)
            print(table(done).splitlines()[-2], flush=True)
    print(table(done))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
