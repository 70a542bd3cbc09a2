"""What tests do with the two-datacenter topology in network namespaces
(`gregor.devcluster.netns`): bring it up in a folder of their own and always down, probe
whether one host reaches another, and find anything a run left behind.

The namespaces need root and `ip`/`iptables` (infra/setup.sh installs them); tests that use
them are skipped, saying why, where those are missing.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

from gregor.devcluster import disks, namespaces
from gregor.devcluster.netns import NetnsTopology
from gregor.devcluster.topology import load

DESCRIPTION = Path(__file__).parents[2] / "infra" / "topology.toml"
CLI = [sys.executable, "-m", "gregor.devcluster.netns_cli"]

requires_netns = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("iptables-restore"),
    reason="network namespaces need root, ip and iptables (infra/setup.sh)",
)


@contextmanager
def topology_up(
    directory: Path,
    services: bool = True,
    datacenters: Collection[str] | None = None,
    broker_disk_mb: int | None = None,
    mirrors: bool = False,
    mirror_settings: Mapping[str, str] | None = None,
) -> Iterator[NetnsTopology]:
    """The topology of infra/topology.toml up under `directory` (the services of
    `datacenters` only, if given; each broker's data on a tmpfs of `broker_disk_mb`, if
    given; with `mirrors`, each mirror host's gregor-mirror, `mirror_settings` over its
    mm2.properties), and down after, also when the test fails (its brokers' and
    ZooKeepers' logs stay in `directory`)."""
    topology = NetnsTopology(load(DESCRIPTION), directory, broker_disk_mb=broker_disk_mb)
    topology.up(services, datacenters=datacenters, mirrors=mirrors, mirror_settings=mirror_settings)
    try:
        yield topology
    finally:
        topology.down()


def start_cli(directory: Path, *options: str) -> subprocess.Popen[str]:
    """`nox -s topology -- up` as a user runs it, for the topology under `directory`;
    returned once it says it runs. The caller ends it (Ctrl-C, SIGTERM, or SIGKILL as a
    crash) and runs `down`."""
    argv = [*CLI, "up", "--dir", str(directory), "--description", str(DESCRIPTION), *options]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("running"):
            return process
    raise RuntimeError(f"{' '.join(argv)} exited with status {process.wait()}")


def cli_down(directory: Path) -> str:
    """`nox -s topology -- down` from a process of its own; what it printed."""
    argv = [*CLI, "down", "--dir", str(directory), "--description", str(DESCRIPTION)]
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout


def leftovers(topology: NetnsTopology) -> list[str]:
    """Whatever of this run is still on the machine: namespaces, /etc/netns folders, live
    processes started from its folder, disks mounted in it, its state file."""
    found = namespaces.namespaces(topology.prefix)
    found += [f"mount {p}" for p in disks.mounts_under(topology.directory)]
    if namespaces.NETNS_ETC.exists():
        found += [str(p) for p in namespaces.NETNS_ETC.glob(f"{topology.prefix}*")]
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            args = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if f"{topology.directory}/" in args and namespaces.alive(int(proc.name)):
            found.append(f"process {proc.name}: {args}")
    if topology.state_path.exists():
        found.append(str(topology.state_path))
    return found


@contextmanager
def listening(topology: NetnsTopology, host: str, port: int) -> Iterator[socket.socket]:
    """A TCP listener on `host`'s address (connections complete in its backlog)."""

    def listen() -> socket.socket:
        server = socket.socket()
        server.bind((str(topology.topology.hosts[host].address), port))
        server.listen(64)
        return server

    server = namespaces.call_in(topology.namespace(host), listen)
    try:
        yield server
    finally:
        server.close()


def reaches(topology: NetnsTopology, source: str, target: str, port: int) -> bool:
    """Whether a TCP connection from `source` to `target`'s port opens within a second."""
    address = str(topology.topology.hosts[target].address)

    def connect() -> bool:
        try:
            socket.create_connection((address, port), timeout=1.0).close()
        except OSError:
            return False
        return True

    return namespaces.call_in(topology.namespace(source), connect)


def datagram_arrives(topology: NetnsTopology, source: str, target: str, port: int) -> bool:
    """Whether a UDP datagram from `source` reaches `target` (within a second)."""
    address = str(topology.topology.hosts[target].address)

    def bind() -> socket.socket:
        receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        receiver.bind((address, port))
        return receiver

    def send() -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
            sender.sendto(b"ping", (address, port))

    with namespaces.call_in(topology.namespace(target), bind) as receiver:
        receiver.settimeout(1.0)
        namespaces.call_in(topology.namespace(source), send)
        try:
            return receiver.recv(16) == b"ping"
        except TimeoutError:
            return False


def run_on(
    topology: NetnsTopology, host: str, code: str, *args: str, timeout: float = 120.0
) -> subprocess.CompletedProcess[str]:
    """Python `code` run on `host` by this interpreter (its packages: confluent-kafka ...),
    resolving the topology's hostnames there."""
    argv: Sequence[str] = [*namespaces.exec_prefix(topology.namespace(host)), sys.executable]
    return subprocess.run(
        [*argv, "-c", code, *args], capture_output=True, text=True, timeout=timeout
    )
