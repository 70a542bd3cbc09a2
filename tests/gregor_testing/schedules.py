"""Randomized fault schedules for one datacenter's cluster of the namespace topology, and the
nemesis that plays them.

A schedule (`schedule(seed, seconds, ...)`, the same for the same seed) is a list of
`Fault`s, each from `at` for `seconds`, several overlapping:
- process faults on a ZooKeeper node or a broker, or on the controller (the broker that is
  the controller when the fault starts): `kill` (SIGKILL, restarted at the end), `pause`
  (SIGSTOP past the ZooKeeper session timeout, then SIGCONT), `restart` (a clean stop, then
  started again at the end);
- network faults (`gregor.devcluster.netfaults`): `isolate` a host, `split` the datacenter
  in two, `one_way` (the first host's packets never reach the second);
- on a broker or the controller: `expire` its ZooKeeper session while the process lives
  (its packets to and from every ZooKeeper dropped past the session timeout: once healed,
  kazoo finds the session expired and starts a new one, the broker registers again, and a
  controller resigns and another is elected), and `disk_full` (its log directory's tmpfs
  filled: it halts, as Kafka does once every log dir is offline; freed and started again
  at the end; needs a topology with `broker_disk_mb`).

`Nemesis.play` runs the schedule against the clock; `restore` then heals the network,
resumes and starts every process, and waits until every partition is whole again.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from gregor.devcluster import disks, namespaces
from gregor.devcluster.broker import BrokerProcess
from gregor.devcluster.netfaults import NetworkFaults
from gregor.devcluster.netns import NetnsTopology
from gregor.devcluster.supervisor import Supervised
from gregor.devcluster.wire import send_request
from gregor.protocol.apis.metadata import MetadataRequest, MetadataResponse

log = logging.getLogger(__name__)

PROCESS_FAULTS = ("kill", "pause", "restart")
NETWORK_FAULTS = ("isolate", "split", "one_way")
BROKER_FAULTS = ("expire", "disk_full")  # on a broker (or the controller) only
KINDS = PROCESS_FAULTS + NETWORK_FAULTS + BROKER_FAULTS
LONG_FAULTS = ("pause", "expire")  # past the session timeout
CONTROLLER = "controller"
PAUSE_AT_LEAST = 8.0  # seconds: past the brokers' zookeeper.session.timeout.ms (6 s)


@dataclass(frozen=True)
class Fault:
    at: float
    seconds: float
    kind: str
    hosts: tuple[str, ...]  # for `split`: one side

    def __str__(self) -> str:
        return f"{self.at:.0f}s+{self.seconds:.0f}s {self.kind}({','.join(self.hosts)})"


def schedule(
    seed: int,
    seconds: float,
    hosts: list[str],
    faults: int = 3,
    kinds: tuple[str, ...] = (),
    brokers: list[str] | None = None,
) -> list[Fault]:
    """`faults` faults over the first 80% of `seconds` (the rest lets the cluster settle
    while the producers still send), among `hosts` (ZooKeepers and brokers) and the
    controller; the broker faults among `brokers` (by default, `hosts`)."""
    rng = random.Random(seed)
    kinds = kinds or KINDS
    planned: list[Fault] = []
    for _ in range(faults):
        kind = rng.choice(kinds)
        length = rng.uniform(PAUSE_AT_LEAST, 12) if kind in LONG_FAULTS else rng.uniform(3, 10)
        length = min(length, seconds * 0.8)
        at = rng.uniform(0, seconds * 0.8 - length)
        if kind in PROCESS_FAULTS:
            targets = (rng.choice([*hosts, CONTROLLER]),)
        elif kind in BROKER_FAULTS:
            targets = (rng.choice([*(brokers or hosts), CONTROLLER]),)
        elif kind == "split":
            targets = tuple(sorted(rng.sample(hosts, rng.randint(1, len(hosts) // 2))))
        elif kind == "one_way":
            targets = tuple(rng.sample(hosts, 2))
        else:
            targets = (rng.choice(hosts),)
        planned.append(Fault(at, length, kind, targets))
    return sorted(planned, key=lambda f: f.at)


def metadata(topology: NetnsTopology, host: str) -> MetadataResponse | None:
    """A broker's Metadata of every topic, asked from its own host (None: no answer)."""
    address, port = str(topology.topology.hosts[host].address), topology.topology.ports.broker

    def ask() -> MetadataResponse | None:
        try:
            response = send_request(address, port, MetadataRequest(topics=None), 1, 3.0)
        except Exception:
            return None
        return response if isinstance(response, MetadataResponse) else None

    return namespaces.call_in(topology.namespace(host), ask)


class Nemesis:
    """Plays a schedule on one datacenter's ZooKeepers and brokers; `done` is what it did."""

    def __init__(self, topology: NetnsTopology, datacenter: str) -> None:
        self.topology = topology
        self.network = NetworkFaults(topology)
        self.datacenter = datacenter
        self.brokers = [h.name for h in topology.topology.hosts_of(datacenter, "broker")]
        self.zookeepers = [h.name for h in topology.topology.hosts_of(datacenter, "zookeeper")]
        self.hosts = self.zookeepers + self.brokers
        self.done: list[str] = []
        self._partitioned: list[Fault] = []

    def controller(self) -> str | None:
        for host in self.brokers:
            seen = metadata(self.topology, host)
            if seen is not None and seen.controller_id >= 0:
                for broker in self.brokers:
                    if self.topology.topology.hosts[broker].id == seen.controller_id:
                        return broker
        return None

    def process(self, host: str) -> Supervised:
        return self.topology.processes[host]

    def data_dir(self, broker: str) -> Path:
        if not self.topology.broker_disk_mb:
            raise ValueError("disk_full needs a topology whose brokers have disks (broker_disk_mb)")
        return cast(BrokerProcess, self.process(broker)).data_dir

    def play(self, faults: list[Fault], stop: threading.Event) -> None:
        """Each fault's start and end at its time from now (until `stop` is set)."""
        started = time.monotonic()
        steps: list[tuple[float, int, Callable[[], None]]] = []
        for n, fault in enumerate(faults):
            begin, end = self._actions(fault)
            steps += [(fault.at, n, begin), (fault.at + fault.seconds, n, end)]
        for at, _, action in sorted(steps, key=lambda s: (s[0], s[1])):
            if stop.wait(max(0.0, started + at - time.monotonic())):
                return
            action()

    def _actions(self, fault: Fault) -> tuple[Callable[[], None], Callable[[], None]]:
        resolved: list[Fault] = []  # the fault on the hosts it hit (the controller named)

        def note(what: str) -> None:
            self.done.append(f"{time.strftime('%H:%M:%S')} {what}")
            log.info("nemesis: %s", what)

        def begin() -> None:
            hosts = list(fault.hosts)
            if hosts == [CONTROLLER]:
                hosts = [self.controller() or self.brokers[0]]
            resolved.append(Fault(fault.at, fault.seconds, fault.kind, tuple(hosts)))
            note(f"{fault.kind} {','.join(hosts)}")
            if fault.kind == "kill":
                self.process(hosts[0]).kill()
            elif fault.kind == "pause":
                self.process(hosts[0]).pause()
            elif fault.kind == "restart":
                self.process(hosts[0]).stop(30)
            elif fault.kind == "disk_full":
                filled = disks.fill(self.data_dir(hosts[0]))
                note(f"{hosts[0]}'s disk filled ({filled >> 20} MiB)")
            else:
                self._partitioned.append(resolved[0])
                self._apply(resolved[0])

        def end() -> None:
            hosts = resolved[0].hosts
            note(f"end {fault.kind} {','.join(hosts)}")
            if fault.kind in ("kill", "restart"):
                self.process(hosts[0]).launch()  # type: ignore[attr-defined]
            elif fault.kind == "pause":
                self.process(hosts[0]).resume()
            elif fault.kind == "disk_full":
                disks.free(self.data_dir(hosts[0]))
                self.process(hosts[0]).launch()  # type: ignore[attr-defined]
            else:
                self._partitioned.remove(resolved[0])
                self.network.heal()
                for other in self._partitioned:
                    self._apply(other)

        return begin, end

    def _apply(self, fault: Fault) -> None:
        if fault.kind == "isolate":
            self.network.isolate(fault.hosts[0])
        elif fault.kind == "expire":
            self.network.partition(fault.hosts, self.zookeepers)
        elif fault.kind == "split":
            self.network.split_datacenter(self.datacenter, fault.hosts)
        else:
            self.network.one_way([fault.hosts[0]], [fault.hosts[1]])

    def restore(self, timeout: float = 120.0) -> None:
        """Heal, resume, start what is down; return once every partition has a leader and a
        full ISR as every broker sees it."""
        self._partitioned.clear()
        self.network.heal()
        deadline = time.monotonic() + timeout
        for host in self.hosts:
            self.process(host).resume()
        for host in self.brokers if self.topology.broker_disk_mb else []:
            disks.free(self.data_dir(host))
        for host in self.hosts:
            self._serving(host, deadline)
        while not self.whole():
            if time.monotonic() > deadline:
                raise TimeoutError(f"the cluster of {self.datacenter} not whole in {timeout} s")
            time.sleep(0.5)

    def _serving(self, host: str, deadline: float) -> None:
        """Start the host's process until it serves: a broker killed and started again
        within the ZooKeeper session timeout exits (its old session still holds its broker
        id, as in Kafka), so it is started again once that session has expired."""
        process: Any = self.process(host)
        while True:
            if not process.is_running():
                process.launch()
            try:
                process.wait_ready(max(1.0, deadline - time.monotonic()))
                return
            except RuntimeError:
                if process.is_running() or time.monotonic() > deadline:
                    raise
                log.info("nemesis: %s exited while starting; again", host)
                time.sleep(1.0)

    def whole(self) -> bool:
        for host in self.brokers:
            seen = metadata(self.topology, host)
            if seen is None:
                return False
            for topic in seen.topics:
                for p in topic.partitions:
                    if p.leader_id < 0 or sorted(p.isr_nodes) != sorted(p.replica_nodes):
                        return False
        return True


@dataclass(frozen=True)
class Jepsen2013:
    """What the 2013 scenario saw: the leader of the partition, its ISR when it was killed,
    and the partition's leader while it was dead and its followers reachable again."""

    leader: str
    isr_at_kill: list[int]
    leader_while_dead: int


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout} s")
        time.sleep(0.5)


def partition_state(nemesis: Nemesis, topic: str, partition: int) -> tuple[int, list[int]]:
    """(leader id, ISR) of a partition as the controller sees it (its cache is the first
    to know; a broker cut from it may lag), else the first broker that answers."""
    controller = nemesis.controller()
    for host in sorted(nemesis.brokers, key=lambda h: h != controller):
        if not nemesis.process(host).is_running():
            continue
        seen = metadata(nemesis.topology, host)
        for t in seen.topics if seen is not None else []:
            for p in t.partitions if t.name == topic else []:
                if p.partition_index == partition:
                    return p.leader_id, sorted(p.isr_nodes)
    return -1, []


def jepsen_2013(nemesis: Nemesis, topic: str, partition: int = 0) -> Jepsen2013:
    """Jepsen's 2013 Kafka scenario: the partition's leader is cut from its followers (and
    only from them) until the ISR shrinks to the leader alone, then the leader dies. Kafka
    0.8 then elected a follower that lacked acknowledged records; here min.insync.replicas=2
    refuses writes the ISR of one would take, and with unclean election off no follower
    leads while the leader is dead, even once the network heals. Then the leader restarts."""
    hosts = nemesis.topology.topology.hosts
    leader_id, _ = partition_state(nemesis, topic, partition)
    leader = next(h for h in nemesis.brokers if hosts[h].id == leader_id)
    followers = [h for h in nemesis.brokers if h != leader]
    nemesis.done.append(f"cut {leader} (leader of {topic}-{partition}) from {followers}")
    nemesis.network.partition([leader], followers)
    wait_until(
        lambda: partition_state(nemesis, topic, partition)[1] == [leader_id],
        60,
        f"the ISR of {topic}-{partition} to shrink to {leader}",
    )
    isr = partition_state(nemesis, topic, partition)[1]
    nemesis.done.append(f"kill {leader} with ISR {isr}")
    nemesis.process(leader).kill()
    nemesis.network.heal()
    nemesis.done.append("heal")
    # The controller sees the leader gone once its ZooKeeper session expires; with
    # unclean election off it leaves the partition without a leader.
    wait_until(
        lambda: partition_state(nemesis, topic, partition)[0] != leader_id,
        60,
        f"the controller to notice {leader} gone",
    )
    leader_while_dead = partition_state(nemesis, topic, partition)[0]
    nemesis.done.append(
        f"leader of {topic}-{partition} while {leader} is dead: {leader_while_dead}"
    )
    nemesis.process(leader).launch()  # type: ignore[attr-defined]
    nemesis.done.append(f"restart {leader}")
    return Jepsen2013(leader, isr, leader_while_dead)
