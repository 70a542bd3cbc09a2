"""The deployment (`infra/topology.toml`) brought up as Linux network namespaces: one per
host, and per datacenter a gateway namespace holding the datacenter's bridge, which routes
to the other datacenter's gateway over a veth pair, the WAN.

Every namespace is named `gregor-<run id>-<host>` (gateways `gregor-<run id>-<dc>-gw`), so
topologies of other runs (a test's, a user's) live beside it untouched; the run id defaults
to a hash of the folder. Every link and address lives inside these namespaces and none in
the machine's own, so deleting them removes the whole network, firewall rules included.
ZooKeeper and the brokers run inside their host's namespace through the same launcher as
the local cluster (`ZooKeeper`, `BrokerProcess`), each with its config, data and log in
`<folder>/<host>/`. With `broker_disk_mb` each broker's data folder is a tmpfs of that size
(`disks`), for faults that fill a broker's disk.

`down` works from what is on disk and in the kernel (the state file, the namespaces with
this run's prefix and the processes inside them), so it cleans up after a harness that
crashed as well as after one that is still running; `up` does the same before it starts.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gregor.devcluster import disks, namespaces
from gregor.devcluster.broker import BrokerProcess
from gregor.devcluster.etl import EtlProcess
from gregor.devcluster.mirror import MirrorProcess, not_copying
from gregor.devcluster.supervisor import Supervised
from gregor.devcluster.topology import Host, Topology, load
from gregor.devcluster.wire import api_versions
from gregor.devcluster.zookeeper import ZooKeeper, four_letter_word

STATE_FILE = "topology-state.json"
_RUN_ID = re.compile(r"^[a-z0-9]{1,12}$")
# Stopped in this order: the clusters' clients while the brokers serve (a mirror delivers
# what it holds, the ETL stops its queries), then brokers while their ZooKeeper still runs
# (a controlled shutdown), then ZooKeeper.
_STOP_ORDER = (("mirror", "etl", "client"), ("broker",), ("zookeeper",))
_STOP_TIMEOUT = 30.0


def default_run_id(directory: Path) -> str:
    """A run id of the folder's own: two folders never share namespaces."""
    return hashlib.sha256(str(directory.absolute()).encode()).hexdigest()[:8]


@dataclass(frozen=True)
class HostStatus:
    host: Host
    namespace: str
    exists: bool
    pids: list[int]
    # None: the host runs no service of ours (or they are off); a mirror serves once it copies
    serving: bool | None


class NetnsTopology:
    """The topology's namespaces and processes for one run (`run_id`) under `directory`."""

    def __init__(
        self,
        topology: Topology,
        directory: Path,
        run_id: str | None = None,
        broker_disk_mb: int | None = None,
    ) -> None:
        self.topology = topology
        self.broker_disk_mb = broker_disk_mb
        self.directory = directory.absolute()
        self.run_id = run_id or default_run_id(self.directory)
        if not _RUN_ID.match(self.run_id):
            raise ValueError(f"run id {self.run_id!r}: 1 to 12 lowercase letters or digits")
        self.prefix = f"gregor-{self.run_id}-"
        self.processes: dict[str, Supervised] = {}
        self.services = True  # whether `up` starts ZooKeeper and the brokers
        self.mirrors = False  # and the mirrors

    def namespace(self, host: str) -> str:
        """The namespace of a host (or of a datacenter's gateway, `<dc>-gw`)."""
        return self.prefix + host

    def gateway(self, datacenter: str) -> str:
        return self.namespace(f"{datacenter}-gw")

    @property
    def state_path(self) -> Path:
        return self.directory / STATE_FILE

    def up(
        self,
        services: bool = True,
        timeout: float = 120.0,
        datacenters: Collection[str] | None = None,
        mirrors: bool = False,
        etl: bool = False,
        mirror_settings: Mapping[str, str] | None = None,
    ) -> None:
        """Build the network (after removing what an earlier run left), then start every
        ZooKeeper ensemble and broker (of `datacenters` only, if given: a test of one
        cluster spares the machine the other), and with `mirrors` each mirror host's
        gregor-mirror (`mirror_settings` over its mm2.properties); return once all serve
        and every mirror copies (RuntimeError naming what is not ready after `timeout`).
        With `etl`, the ETL host's gregor-etl starts last. On any failure, or an
        interrupt, everything is torn down again."""
        teardown(self.directory, self.prefix)
        self.services = services
        self.mirrors = False  # until start_mirrors
        self.directory.mkdir(parents=True, exist_ok=True)
        # Written first: a harness that dies from here on leaves a state `down` can read.
        self.state_path.write_text(json.dumps(self._state(), indent=2) + "\n")
        try:
            self._build_network()
            if services:
                self._start_services(timeout, datacenters)
            if services and mirrors:
                for mirror in self.start_mirrors(mirror_settings):
                    mirror.wait_ready(timeout)
            if services and etl:
                self.start_etl()
        except BaseException:
            self.down()
            raise

    def down(self) -> None:
        """Stop every process (in _STOP_ORDER), delete every namespace and /etc/netns entry."""
        for group in _STOP_ORDER:
            names = [h.name for h in self._hosts(group)]
            started = [self.processes[name] for name in names if name in self.processes]
            for process in started:
                process.terminate()
            for process in started:
                process.wait(_STOP_TIMEOUT)
        self.processes.clear()
        teardown(self.directory, self.prefix)

    def status(self) -> list[HostStatus]:
        """Each host's namespace, processes, and whether its service answers (as the state
        on disk says whether services were started)."""
        if self.state_path.exists():
            state = json.loads(self.state_path.read_text())
            self.services = bool(state.get("services", True))
            self.mirrors = bool(state.get("mirrors", False))
        return [self._host_status(host) for host in self.topology.hosts.values()]

    def bootstrap_servers(self, datacenter: str) -> str:
        return self.topology.bootstrap_servers(datacenter)

    def _state(self) -> dict[str, object]:
        return {
            "run_id": self.run_id,
            "prefix": self.prefix,
            "services": self.services,
            "mirrors": self.mirrors,
            "stop_order": [
                [self.namespace(h.name) for h in self._hosts(group)] for group in _STOP_ORDER
            ],
            "hosts": {name: str(h.address) for name, h in self.topology.hosts.items()},
        }

    def _hosts(self, services: tuple[str, ...]) -> list[Host]:
        return [h for h in self.topology.hosts.values() if h.service in services]

    def hosts_file(self) -> str:
        lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
        lines += [f"{dc.gateway}\t{name}-gw" for name, dc in self.topology.datacenters.items()]
        lines += [f"{h.address}\t{h.name}" for h in self.topology.hosts.values()]
        return "\n".join(lines) + "\n"

    def _build_network(self) -> None:
        hosts_file = self.hosts_file()
        topology = self.topology
        for name, dc in topology.datacenters.items():
            gateway = self.gateway(name)
            namespaces.create(gateway, hosts_file)
            namespaces.ip("-n", gateway, "link", "add", "br0", "type", "bridge")
            address = f"{dc.gateway}/{dc.subnet.prefixlen}"
            namespaces.ip("-n", gateway, "addr", "add", address, "dev", "br0")
            namespaces.ip("-n", gateway, "link", "set", "br0", "up")
            namespaces.call_in(gateway, _enable_forwarding)
        first, second = topology.datacenters
        namespaces.ip(
            "link", "add", "wan", "netns", self.gateway(first),
            "type", "veth", "peer", "name", "wan", "netns", self.gateway(second),
        )  # fmt: skip
        for name, other in ((first, second), (second, first)):
            gateway = self.gateway(name)
            address = f"{topology.wan_address(name)}/{topology.wan.prefixlen}"
            namespaces.ip("-n", gateway, "addr", "add", address, "dev", "wan")
            namespaces.ip("-n", gateway, "link", "set", "wan", "up")
            remote = str(topology.datacenters[other].subnet)
            via = str(topology.wan_address(other))
            namespaces.ip("-n", gateway, "route", "add", remote, "via", via)
        for host in topology.hosts.values():
            self._build_host(host, hosts_file)

    def _build_host(self, host: Host, hosts_file: str) -> None:
        """The host's namespace, its eth0 plugged into its datacenter's bridge (the bridge's
        end of the link is named after the host), its address and default route."""
        namespace, gateway = self.namespace(host.name), self.gateway(host.datacenter)
        dc = self.topology.datacenters[host.datacenter]
        namespaces.create(namespace, hosts_file)
        namespaces.ip(
            "link", "add", "eth0", "netns", namespace,
            "type", "veth", "peer", "name", host.name, "netns", gateway,
        )  # fmt: skip
        namespaces.ip("-n", gateway, "link", "set", host.name, "master", "br0", "up")
        address = f"{host.address}/{dc.subnet.prefixlen}"
        namespaces.ip("-n", namespace, "addr", "add", address, "dev", "eth0")
        namespaces.ip("-n", namespace, "link", "set", "eth0", "up")
        namespaces.ip("-n", namespace, "route", "add", "default", "via", str(dc.gateway))

    def _start_services(self, timeout: float, datacenters: Collection[str] | None) -> None:
        """Every datacenter's ZooKeeper ensemble (its members launched together), then every
        broker at once."""
        wanted = datacenters or self.topology.datacenters
        chosen = [h for h in self._hosts(("zookeeper", "broker")) if h.datacenter in wanted]
        zookeepers = [self._zookeeper(h) for h in chosen if h.service == "zookeeper"]
        brokers = [self._broker(h) for h in chosen if h.service == "broker"]
        for zookeeper in zookeepers:
            zookeeper.launch()
        for zookeeper in zookeepers:
            zookeeper.wait_ready(timeout)
        for broker in brokers:
            broker.launch()
        for broker in brokers:
            broker.wait_ready(timeout)

    def start_mirrors(self, settings: Mapping[str, str] | None = None) -> list[MirrorProcess]:
        """Start every mirror host's gregor-mirror (both datacenters' clusters must run)
        without waiting for it to copy (see MirrorProcess.wait_ready); `settings` go over
        each one's mm2.properties."""
        self._set_mirrors(True)
        started = []
        for host in self._hosts(("mirror",)):
            directory, namespace = self.directory / host.name, self.namespace(host.name)
            mirror = MirrorProcess(self.topology, host, directory, namespace, settings)
            self.processes[host.name] = mirror
            mirror.launch()
            started.append(mirror)
        return started

    def start_etl(self, **options: Any) -> EtlProcess:
        """Start the ETL host's gregor-etl on its datacenter's cluster (`options`: those of
        etl_arguments: pattern, every, batch)."""
        (host,) = self._hosts(("etl",))
        etl = EtlProcess(
            self.topology, host, self.directory / host.name, self.namespace(host.name), **options
        )
        self.processes[host.name] = etl
        etl.launch()
        return etl

    def stop_mirrors(self) -> None:
        for host in self._hosts(("mirror",)):
            mirror = self.processes.pop(host.name, None)
            if mirror is not None:
                mirror.stop(_STOP_TIMEOUT)
        self._set_mirrors(False)

    def _set_mirrors(self, running: bool) -> None:
        """Whether the mirrors run, also in the state file (for `status` elsewhere)."""
        self.mirrors = running
        self.state_path.write_text(json.dumps(self._state(), indent=2) + "\n")

    def _zookeeper(self, host: Host) -> ZooKeeper:
        server = zookeeper_for(self.topology, host, self.directory / host.name, str(host.address))
        server.namespace = self.namespace(host.name)
        self.processes[host.name] = server
        return server

    def _broker(self, host: Host) -> BrokerProcess:
        broker = broker_for(self.topology, host, self.directory / host.name, str(host.address))
        broker.namespace = self.namespace(host.name)
        if self.broker_disk_mb:
            disks.mount(broker.data_dir, self.broker_disk_mb)
        self.processes[host.name] = broker
        return broker

    def _host_status(self, host: Host) -> HostStatus:
        namespace = self.namespace(host.name)
        exists = (namespaces.NETNS_RUN / namespace).exists()
        pids = namespaces.pids(namespace) if exists else []
        serving: bool | None = None
        address, ports = str(host.address), self.topology.ports
        if not self.services:
            pass
        elif host.service == "zookeeper":
            serving = exists and bool(
                namespaces.call_in(namespace, four_letter_word, address, ports.zookeeper, "srvr")
            )
        elif host.service == "broker":
            serving = exists and (
                namespaces.call_in(namespace, api_versions, address, ports.broker, 1.0) is not None
            )
        elif host.service == "mirror" and self.mirrors:
            serving = exists and not namespaces.call_in(namespace, not_copying, self.topology, host)
        return HostStatus(host, namespace, exists, pids, serving)


def zookeeper_for(topology: Topology, host: Host, directory: Path, bind: str) -> ZooKeeper:
    """The ZooKeeper of a `zookeeper` host, listening on `bind`, keeping its data in
    `directory`: a member of its datacenter's ensemble (alone if it is the only one)."""
    ports = topology.ports
    members = topology.hosts_of(host.datacenter, "zookeeper")
    ensemble = {
        m.id: f"{m.name}:{ports.zookeeper_peer}:{ports.zookeeper_election}"
        for m in members
        if m.id is not None
    }
    return ZooKeeper(
        directory,
        ports.zookeeper,
        bind,
        server_id=host.id,
        ensemble=ensemble if len(members) > 1 else None,
    )


def broker_for(topology: Topology, host: Host, directory: Path, bind: str) -> BrokerProcess:
    """The broker of a `broker` host, listening on `bind`, advertising its hostname,
    keeping its data in `directory`."""
    assert host.id is not None and host.rack is not None
    port = topology.ports.broker
    replicas = min(3, len(topology.hosts_of(host.datacenter, "broker")))
    return BrokerProcess(
        host.id,
        directory,
        topology.zookeeper_connect(host.datacenter),
        port=port,
        host=bind,
        properties={
            # Clients anywhere in the topology reach it by its hostname.
            "advertised.listeners": f"PLAINTEXT://{host.name}:{port}",
            "broker.rack": host.rack,
            "offsets.topic.replication.factor": str(replicas),
        },
    )


def _enable_forwarding() -> None:
    # /proc/sys/net shows the network namespace of the thread that opens it.
    Path("/proc/sys/net/ipv4/ip_forward").write_text("1\n")


def teardown(directory: Path, prefix: str | None = None) -> list[str]:
    """Remove what a run under `directory` left: stop the processes inside its namespaces
    (in the state file's order: mirrors and ETL, brokers, then ZooKeeper), delete the
    namespaces and their /etc/netns folders, then the state file. The run is the state
    file's, and `prefix`'s (by default the folder's own run id). Returns the namespaces
    removed. Works whether or not the harness that made them still runs."""
    state_path = directory / STATE_FILE
    state = json.loads(state_path.read_text()) if state_path.exists() else {}
    prefixes = {str(p) for p in (state.get("prefix"), prefix) if p}
    prefixes = prefixes or {f"gregor-{default_run_id(directory)}-"}
    present = [ns for p in sorted(prefixes) for ns in namespaces.namespaces(p)]
    if present:
        groups = [[ns for ns in group if ns in present] for group in state.get("stop_order", [])]
        rest = [ns for ns in present if not any(ns in group for group in groups)]
        namespaces.stop_processes([*groups, rest], _STOP_TIMEOUT)
        for namespace in present:
            namespaces.delete(namespace)
    # A namespace already gone may have left its /etc/netns folder (a crash in between).
    etc = namespaces.NETNS_ETC
    for leftover in [f for p in prefixes for f in etc.glob(f"{p}*")] if etc.exists() else []:
        namespaces.delete(leftover.name)
    disks.unmount_under(directory)
    state_path.unlink(missing_ok=True)
    return present


@contextmanager
def running(
    description: Path, directory: Path, run_id: str | None = None, services: bool = True
) -> Iterator[NetnsTopology]:
    """The topology up for the `with` block, and down after it whatever happens."""
    topology = NetnsTopology(load(description), directory, run_id)
    topology.up(services)
    try:
        yield topology
    finally:
        topology.down()
