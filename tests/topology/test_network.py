"""The topology's network as namespaces, without its services: every host reaches every
other (across the WAN too) by hostname, `down` leaves nothing, also after a harness that
died, and each network fault cuts exactly the traffic it should until `heal`."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from gregor.devcluster.netfaults import NetworkFaults
from gregor.devcluster.netns import NetnsTopology, teardown
from gregor.devcluster.topology import load
from gregor_testing.topology import (
    DESCRIPTION,
    cli_down,
    datagram_arrives,
    leftovers,
    listening,
    reaches,
    requires_netns,
    run_on,
    start_cli,
    topology_up,
)

pytestmark = requires_netns
PORT = 7000
HOSTS = ["dc1-broker1", "dc1-broker2", "dc1-zk1", "dc1-client", "dc2-broker1", "dc2-client"]


@pytest.fixture(scope="module")
def network(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetnsTopology]:
    with topology_up(tmp_path_factory.mktemp("network"), services=False) as topology:
        yield topology


@pytest.fixture
def faults(network: NetnsTopology) -> Iterator[NetworkFaults]:
    """A listener on each of HOSTS, and the faults healed after the test."""
    faults = NetworkFaults(network)
    with (
        listening(network, "dc1-broker1", PORT),
        listening(network, "dc1-broker2", PORT),
        listening(network, "dc1-zk1", PORT),
        listening(network, "dc1-client", PORT),
        listening(network, "dc2-broker1", PORT),
        listening(network, "dc2-client", PORT),
    ):
        try:
            yield faults
        finally:
            faults.heal()


ALL = {(a, b) for a in HOSTS for b in HOSTS if a != b}


def reachable(network: NetnsTopology) -> set[tuple[str, str]]:
    """The pairs (a, b) of HOSTS where a opens a connection to b (tried all at once)."""
    pairs = sorted(ALL)
    with ThreadPoolExecutor(len(pairs)) as pool:
        opened = pool.map(lambda pair: reaches(network, *pair, PORT), pairs)
        return {pair for pair, ok in zip(pairs, opened, strict=True) if ok}


def test_every_host_reaches_every_other_by_name(faults: NetworkFaults) -> None:
    network = faults.topology
    assert reachable(network) == ALL
    # Hostnames resolve inside (ip netns exec shows /etc/netns/<ns>/hosts as /etc/hosts).
    resolve = "import socket, sys; print(socket.gethostbyname(sys.argv[1]))"
    done = run_on(network, "dc2-client", resolve, "dc1-broker3")
    assert done.stdout.strip() == "10.151.1.23", done.stderr


def test_isolating_a_host_cuts_it_from_everyone_until_heal(faults: NetworkFaults) -> None:
    network = faults.topology
    faults.isolate("dc1-broker1")
    assert reachable(network) == {(a, b) for a, b in ALL if "dc1-broker1" not in (a, b)}
    faults.heal()
    assert reachable(network) == ALL


def test_splitting_a_datacenter_leaves_each_half_whole(faults: NetworkFaults) -> None:
    network = faults.topology
    faults.split_datacenter("dc1", ["dc1-broker1", "dc1-zk1"])
    side = {"dc1-broker1", "dc1-zk1"}
    rest = {"dc1-broker2", "dc1-client"}
    cut = {(a, b) for a, b in ALL if (a in side and b in rest) or (a in rest and b in side)}
    assert reachable(network) == ALL - cut  # both halves still reach dc2
    faults.heal()
    assert reachable(network) == ALL


def test_cutting_the_wan_keeps_each_datacenter_working(faults: NetworkFaults) -> None:
    network = faults.topology
    faults.cut_wan()
    assert reachable(network) == {(a, b) for a, b in ALL if a[:3] == b[:3]}
    faults.heal()
    assert reachable(network) == ALL


def test_a_one_way_partition_drops_one_direction(faults: NetworkFaults) -> None:
    network = faults.topology
    faults.one_way(["dc1-client"], ["dc2-broker1"])
    assert not datagram_arrives(network, "dc1-client", "dc2-broker1", PORT + 1)
    assert datagram_arrives(network, "dc2-broker1", "dc1-client", PORT + 1)
    # TCP needs both directions: no connection either way, everyone else unaffected.
    pair = {("dc1-client", "dc2-broker1"), ("dc2-broker1", "dc1-client")}
    assert reachable(network) == ALL - pair
    faults.heal()
    assert datagram_arrives(network, "dc1-client", "dc2-broker1", PORT + 1)
    assert reachable(network) == ALL


def test_faults_add_up_until_heal(faults: NetworkFaults) -> None:
    network = faults.topology
    faults.cut_wan()
    faults.isolate("dc1-client")
    assert reachable(network) == {
        (a, b) for a, b in ALL if a[:3] == b[:3] and "dc1-client" not in (a, b)
    }
    faults.heal()
    assert reachable(network) == ALL


def test_faults_name_unknown_hosts(faults: NetworkFaults) -> None:
    with pytest.raises(ValueError, match="'dc3-broker1' is not a host"):
        faults.isolate("dc3-broker1")
    with pytest.raises(ValueError, match=r"\['dc2-client'\] are not hosts of dc1"):
        faults.split_datacenter("dc1", ["dc2-client"])


def test_down_after_a_crashed_harness_and_up_over_leftovers(tmp_path: Path) -> None:
    """`up` killed outright (a crash: no `down` of its own) leaves the network behind; a
    second `up` in the same folder starts over, and `down` from a fresh process (reading
    the state on disk) removes everything."""
    topology = NetnsTopology(load(DESCRIPTION), tmp_path)
    try:
        for _ in range(2):
            cli = start_cli(tmp_path, "--network-only")
            cli.kill()
            cli.wait()
            assert len(leftovers(topology)) == 17 + 17 + 1  # namespaces, /etc/netns, state
        assert cli_down(tmp_path).strip() == "removed 17 namespaces and their processes"
        assert leftovers(topology) == []
    finally:
        teardown(tmp_path)
