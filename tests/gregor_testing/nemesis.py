"""The nemesis of the Jepsen-style tests: it breaks a cluster's brokers and ZooKeepers, then
brings everything back and waits until every partition is whole again.

It acts on `Hosts`: the brokers and ZooKeepers by name, each a supervised process, the
network namespace each is reached from, and the network faults possible between them (and,
when a schedule names them, the services reading a topology datacenter's cluster: its ETL
and the mirror copying it into the other datacenter). Two
kinds of cluster give them: a `LocalCluster` on loopback (`Hosts.of_cluster`: process and
disk-less faults only) and one datacenter of the namespace topology (`Hosts.of_topology`:
every fault).

Two ways to use it:
- `play` a schedule of `Fault`s (`schedules.schedule` draws one from a seed), each from
  its time for its length, several overlapping, then `restore`; the kinds:
  - on any host, or on the controller (the broker that is the controller when the fault
    starts): `kill` (SIGKILL, started again at the end), `pause` (SIGSTOP, SIGCONT at the
    end), `restart` (a clean stop: a controlled shutdown for a broker, started at the end);
  - network faults (`gregor.devcluster.netfaults`): `isolate` a host, `split` the
    datacenter in two (`hosts`: one side), `one_way` (the first host's packets never reach
    the second), `wan` (the WAN between the datacenters cut; no hosts);
  - on a broker or the controller: `expire` its ZooKeeper session while the process lives
    (cut from every ZooKeeper past the session timeout: once healed, kazoo finds the session
    expired and starts a new one, the broker registers again, a controller resigns and
    another is elected), and `disk_full` (its log directory's tmpfs filled: it halts, as
    Kafka does once every log dir is offline; freed and started again at the end).
- `strike` the broker that plays a role now (`roles`: a transaction coordinator, a
  partition's leader, the controller, as the test finds them): SIGKILL it, wait until the
  cluster has moved its roles to others, start it again and wait until it is whole.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from gregor.devcluster import BrokerProcess, LocalCluster, namespaces
from gregor.devcluster import disks as disk_faults
from gregor.devcluster.netfaults import NetworkFaults
from gregor.devcluster.netns import NetnsTopology
from gregor.devcluster.supervisor import Supervised
from gregor.devcluster.wire import send_request
from gregor.protocol.apis.metadata import MetadataRequest, MetadataResponse
from gregor.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

CONTROLLER = "controller"
# Which broker plays a role now (its id): the roles `strike` goes after.
Role = Callable[[], int]


@dataclass(frozen=True)
class Fault:
    at: float
    seconds: float
    kind: str
    hosts: tuple[str, ...]  # for `split`: one side

    def __str__(self) -> str:
        return f"{self.at:.0f}s+{self.seconds:.0f}s {self.kind}({','.join(self.hosts)})"


@dataclass(frozen=True)
class Strike:
    role: str
    broker_id: int
    seconds: float  # from the kill until the cluster was whole again


@dataclass
class Hosts:
    """What a nemesis acts on."""

    brokers: dict[str, BrokerProcess]
    zookeepers: dict[str, Supervised]
    namespaces: dict[str, str] = field(default_factory=dict)  # host -> where it is reached from
    network: NetworkFaults | None = None  # None: no network faults (one loopback)
    datacenter: str = ""
    disks: bool = False  # whether each broker's log dir is a disk of its own to fill
    # The services that read the datacenter's cluster and run (its ETL, the mirrors that
    # copy it elsewhere): faults hit them when a schedule names them, and `restore` resumes
    # them and starts them again.
    services: dict[str, Supervised] = field(default_factory=dict)

    @classmethod
    def of_cluster(cls, cluster: LocalCluster) -> Hosts:
        brokers = {f"broker{b.broker_id}": b for b in cluster.brokers}
        zookeepers: dict[str, Supervised] = {}
        if cluster.zookeeper is not None:
            zookeepers["zookeeper"] = cluster.zookeeper
        return cls(brokers, zookeepers)

    @classmethod
    def of_topology(cls, topology: NetnsTopology, datacenter: str) -> Hosts:
        """The ZooKeepers and brokers of one datacenter of a running namespace topology."""

        hosts_of = topology.topology.hosts_of
        brokers = {h.name: topology.processes[h.name] for h in hosts_of(datacenter, "broker")}
        zookeepers = {h.name: topology.processes[h.name] for h in hosts_of(datacenter, "zookeeper")}
        # What reads its cluster: its ETL, and the mirrors that copy it into other datacenters.
        services = {
            h.name: topology.processes[h.name]
            for h in topology.topology.hosts.values()
            if h.name in topology.processes
            and ((h.service == "etl" and h.datacenter == datacenter) or h.source == datacenter)
        }
        return cls(
            brokers,  # type: ignore[arg-type]
            zookeepers,
            {h: topology.namespace(h) for h in [*brokers, *zookeepers]},
            NetworkFaults(topology),
            datacenter,
            bool(topology.broker_disk_mb),
            services,
        )

    @property
    def names(self) -> list[str]:
        return [*self.zookeepers, *self.brokers]

    def process(self, host: str) -> Supervised:
        return self.brokers.get(host) or self.zookeepers.get(host) or self.services[host]

    def broker_named(self, broker_id: int) -> str:
        return next(h for h, b in self.brokers.items() if b.broker_id == broker_id)

    def metadata(self, host: str) -> MetadataResponse | None:
        """A broker's Metadata of every topic, asked from where it is reached (None: no
        answer)."""
        broker = self.brokers[host]

        def ask() -> MetadataResponse | None:
            try:
                response = send_request(
                    broker.host, broker.port, MetadataRequest(topics=None), 1, 3
                )
            except Exception:
                return None
            return response if isinstance(response, MetadataResponse) else None

        namespace = self.namespaces.get(host)
        return namespaces.call_in(namespace, ask) if namespace else ask()


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout} s")
        time.sleep(0.2)


class Nemesis:
    """`done` says what it did and when; `faults`, the strikes."""

    def __init__(
        self, hosts: Hosts, roles: Mapping[str, Role] | None = None, timeout: float = 120.0
    ) -> None:
        self.hosts = hosts
        self.roles = dict(roles or {})
        self.timeout = timeout
        self.brokers = list(hosts.brokers)
        self.zookeepers = list(hosts.zookeepers)
        self.done: list[str] = []
        self.faults: list[Strike] = []
        self._partitioned: list[Fault] = []

    @property
    def network(self) -> NetworkFaults:
        if self.hosts.network is None:
            raise ValueError("network faults need the namespace topology")
        return self.hosts.network

    def process(self, host: str) -> Supervised:
        return self.hosts.process(host)

    def note(self, what: str) -> None:
        self.done.append(f"{time.strftime('%H:%M:%S')} {what}")
        log.info("nemesis: %s", what)

    # -- what the cluster looks like -----------------------------------------------------------

    def controller(self) -> str | None:
        """The broker that is the controller as the first broker that answers says."""
        for host in self.brokers:
            seen = self.hosts.metadata(host)
            if seen is not None and seen.controller_id >= 0:
                return self.hosts.broker_named(seen.controller_id)
        return None

    def live(self) -> list[str]:
        return [h for h in self.brokers if self.process(h).is_running()]

    def whole(self) -> bool:
        """Every live broker answers, and shows every partition led and its ISR complete."""
        return self.not_whole() is None

    def not_whole(self) -> str | None:
        """What keeps the cluster from being whole, as the first broker that shows it says
        (None: whole)."""
        for host in self.live():
            seen = self.hosts.metadata(host)
            if seen is None:
                return f"{host} does not answer Metadata"
            for topic in seen.topics:
                if topic.error_code != ErrorCode.NONE:
                    return f"{host}: {topic.name}: {ErrorCode(topic.error_code).name}"
                for p in topic.partitions:
                    if p.leader_id < 0 or sorted(p.isr_nodes) != sorted(p.replica_nodes):
                        return (
                            f"{host}: {topic.name}-{p.partition_index} leader {p.leader_id}, "
                            f"replicas {p.replica_nodes}, isr {p.isr_nodes}"
                        )
        return None

    def moved_away(self, broker_id: int) -> bool:
        """A live broker shows `broker_id` leading nothing, every partition led, and a
        controller that is another broker."""
        seen = self.hosts.metadata(self.live()[0])
        if seen is None or seen.controller_id in (broker_id, -1):
            return False
        return all(p.leader_id not in (broker_id, -1) for t in seen.topics for p in t.partitions)

    # -- strikes -------------------------------------------------------------------------------

    def next_role(self) -> str:
        names = list(self.roles)
        return names[len(self.faults) % len(names)]

    def strike(self, role: str | None = None) -> Strike:
        """SIGKILL the broker playing `role` (by default the next, round robin), wait until
        its roles moved, start it again, wait until every partition is whole."""
        role = role or self.next_role()
        broker_id = self.roles[role]()
        host = self.hosts.broker_named(broker_id)
        started = time.monotonic()
        self.note(f"SIGKILL {host} ({role})")
        self.process(host).kill()
        wait_until(
            lambda: self.moved_away(broker_id),
            self.timeout,
            f"broker {broker_id}'s roles ({role} among them) to move",
        )
        self.restore(self.timeout)
        strike = Strike(role, broker_id, time.monotonic() - started)
        self.faults.append(strike)
        self.note(f"{host} back ({role}, {strike.seconds:.1f} s)")
        return strike

    # -- schedules -----------------------------------------------------------------------------

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

        def begin() -> None:
            hosts = list(fault.hosts)
            if hosts == [CONTROLLER]:
                hosts = [self.controller() or self.brokers[0]]
            resolved.append(Fault(fault.at, fault.seconds, fault.kind, tuple(hosts)))
            self.note(f"{fault.kind} {','.join(hosts)}")
            if fault.kind == "kill":
                self.process(hosts[0]).kill()
            elif fault.kind == "pause":
                self.process(hosts[0]).pause()
            elif fault.kind == "restart":
                self.process(hosts[0]).stop(30)
            elif fault.kind == "disk_full":
                filled = disk_faults.fill(self.data_dir(hosts[0]))
                self.note(f"{hosts[0]}'s disk filled ({filled >> 20} MiB)")
            else:
                self._partitioned.append(resolved[0])
                self._apply(resolved[0])

        def end() -> None:
            hosts = resolved[0].hosts
            self.note(f"end {fault.kind} {','.join(hosts)}")
            if fault.kind in ("kill", "restart"):
                self.process(hosts[0]).launch()  # type: ignore[attr-defined]
            elif fault.kind == "pause":
                self.process(hosts[0]).resume()
            elif fault.kind == "disk_full":
                disk_faults.free(self.data_dir(hosts[0]))
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
            self.network.split_datacenter(self.hosts.datacenter, fault.hosts)
        elif fault.kind == "wan":
            self.network.cut_wan()
        else:
            self.network.one_way([fault.hosts[0]], [fault.hosts[1]])

    def data_dir(self, broker: str) -> Path:
        if not self.hosts.disks:
            raise ValueError("disk_full needs brokers with disks of their own (broker_disk_mb)")
        return self.hosts.brokers[broker].data_dir

    # -- back to whole ------------------------------------------------------------------------

    def restore(self, timeout: float = 120.0) -> None:
        """Heal, resume, free the disks, start what is down; return once every partition has
        a leader and a full ISR as every broker sees it."""
        self._partitioned.clear()
        if self.hosts.network is not None:
            self.network.heal()
        deadline = time.monotonic() + timeout
        for host in self.hosts.names:
            self.process(host).resume()
        for host in self.brokers if self.hosts.disks else []:
            disk_faults.free(self.data_dir(host))
        for host in self.hosts.names:
            self._serving(host, deadline)

        def whole() -> bool:
            # A broker started again may still exit once serving: when it registers, its old
            # ZooKeeper session may still hold its id. It is started again until it stays.
            for host in self.hosts.names:
                if not self.process(host).is_running():
                    self._serving(host, deadline)
            return self.whole()

        try:
            wait_until(whole, max(0.0, deadline - time.monotonic()), "every partition whole")
        except TimeoutError as e:
            raise TimeoutError(f"{e}: {self.not_whole()}\n{self.state()}") from None
        for service in self.hosts.services.values():
            service.resume()
            if not service.is_running():
                service.launch()  # type: ignore[attr-defined]

    def state(self) -> str:
        """Each host's process, and the end of each broker's log: for a failure's message."""
        lines = [f"{h}: {'running' if self.process(h).is_running() else 'down'}"
                 for h in self.hosts.names]  # fmt: skip
        for host in self.brokers:
            lines += [f"--- the end of {host}'s log:", self.process(host).log_tail(4000)]
        return "\n".join(lines)

    def _serving(self, host: str, deadline: float) -> None:
        """Start the host's process until it serves: a broker killed and started again
        within the ZooKeeper session timeout exits (its old session still holds its broker
        id, as in Kafka), so it is started again once that session has expired."""
        process = self.process(host)
        while True:
            if not process.is_running():
                process.launch()  # type: ignore[attr-defined]
            try:
                process.wait_ready(max(1.0, deadline - time.monotonic()))  # type: ignore[attr-defined]
                return
            except RuntimeError:
                if process.is_running() or time.monotonic() > deadline:
                    raise
                log.info("nemesis: %s exited while starting; again", host)
                time.sleep(1.0)
