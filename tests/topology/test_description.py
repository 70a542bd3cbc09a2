"""infra/topology.toml, the deployment's one description: what it holds, and what the loader
refuses (with a message naming the place)."""

from __future__ import annotations

import re
import tomllib
from ipaddress import IPv4Address
from typing import Any

import pytest

from gregor.devcluster.topology import TopologyError, load, parse
from gregor_testing.topology import DESCRIPTION


def test_the_deployment_of_issue_15() -> None:
    topology = load(DESCRIPTION)
    assert list(topology.datacenters) == ["dc1", "dc2"]
    services = {dc: sorted(h.service for h in topology.hosts_of(dc)) for dc in topology.datacenters}
    assert services == {
        "dc1": ["broker"] * 3 + ["client", "etl", "mirror"] + ["zookeeper"] * 3,
        "dc2": ["broker"] * 3 + ["client", "mirror", "zookeeper"],
    }
    for dc in topology.datacenters:
        brokers = topology.hosts_of(dc, "broker")
        assert sorted(b.id for b in brokers if b.id) == [1, 2, 3]
        assert len({b.rack for b in brokers}) == 3  # rack-aware placement has racks to use
        (mirror,) = topology.hosts_of(dc, "mirror")
        assert mirror.source != dc  # it writes into its own datacenter, from the other
    assert topology.zookeeper_connect("dc1") == "dc1-zk1:2181,dc1-zk2:2181,dc1-zk3:2181"
    assert topology.bootstrap_servers("dc2") == (
        "dc2-broker1:9092,dc2-broker2:9092,dc2-broker3:9092"
    )
    assert topology.datacenters["dc1"].gateway == IPv4Address("10.151.1.1")
    assert [topology.wan_address(dc) for dc in topology.datacenters] == [
        IPv4Address("10.151.0.1"),
        IPv4Address("10.151.0.2"),
    ]


def _raw() -> dict[str, Any]:
    return tomllib.loads(DESCRIPTION.read_text())


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda r: r["hosts"]["dc1-zk1"].update(address="10.151.2.99"), "not a host address"),
        (lambda r: r["hosts"]["dc1-zk1"].update(address="10.151.1.1"), "its gateway"),
        (lambda r: r["hosts"]["dc1-zk2"].update(address="10.151.1.11"), "share an address"),
        (lambda r: r["hosts"]["dc1-zk2"].update(id=1), "share an id"),
        (lambda r: r["hosts"]["dc1-broker1"].pop("rack"), "takes ['id', 'rack']"),
        (lambda r: r["hosts"]["dc1-client"].update(id=3), "takes no other keys"),
        (lambda r: r["hosts"]["dc1-mirror"].update(source="dc1"), "another described"),
        (lambda r: r["hosts"]["dc1-etl"].update(service="spark"), "not one of"),
        (lambda r: r["hosts"]["dc1-etl"].update(datacenter="dc3"), "'dc3' is not described"),
        (lambda r: r["hosts"].update(a_very_long_hostname=r["hosts"]["dc1-etl"]), "up to 14"),
        (lambda r: r["datacenters"]["dc2"].update(subnet="10.151.1.0/25"), "overlaps"),
        (lambda r: r["datacenters"]["dc2"].update(subnet="8.8.8.0/24"), "not a private"),
        (lambda r: r["datacenters"]["dc2"].update(mtu=1400), "unknown ['mtu']"),
        (lambda r: r["ports"].update(broker=2181), "must differ"),
        (lambda r: r.pop("wan"), "missing ['wan']"),
        (
            lambda r: [r["hosts"].pop(h) for h in list(r["hosts"]) if h.startswith("dc2-zk")],
            "dc2 has no zookeeper host",
        ),
    ],
)
def test_what_the_loader_refuses(change: Any, message: str) -> None:
    raw = _raw()
    change(raw)
    with pytest.raises(TopologyError, match=re.escape(message)):
        parse(raw)
