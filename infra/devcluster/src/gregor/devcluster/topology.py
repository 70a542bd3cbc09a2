"""The deployment's one description (`infra/topology.toml`): datacenters, their hosts and
the service each runs. Loaded and validated here, then brought up as network namespaces
(`gregor.devcluster.netns`); nothing else describes the hosts again."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network
from pathlib import Path
from typing import Any, Literal, cast

SERVICES = ("zookeeper", "broker", "mirror", "etl", "client")
Service = Literal["zookeeper", "broker", "mirror", "etl", "client"]
# A host's name is its hostname and the name of its link on the datacenter's bridge:
# a network interface's name has at most 15 characters.
_NAME = re.compile(r"^[a-z][a-z0-9-]{0,14}$")
_DEFAULT_PORTS = {"zookeeper": 2181, "zookeeper_peer": 2888, "zookeeper_election": 3888}


class TopologyError(ValueError):
    """The description is not a deployment we can bring up; the message says where."""


@dataclass(frozen=True)
class Ports:
    zookeeper: int
    zookeeper_peer: int
    zookeeper_election: int
    broker: int


@dataclass(frozen=True)
class Datacenter:
    name: str
    subnet: IPv4Network

    @property
    def gateway(self) -> IPv4Address:
        """The datacenter's router: its bridge's address, every host's default route."""
        return self.subnet.network_address + 1


@dataclass(frozen=True)
class Host:
    name: str
    datacenter: str
    address: IPv4Address
    service: Service
    id: int | None = None  # ZooKeeper's myid, the broker's broker.id
    rack: str | None = None  # broker.rack
    source: str | None = None  # the datacenter a mirror reads from


@dataclass(frozen=True)
class Topology:
    ports: Ports
    wan: IPv4Network
    datacenters: Mapping[str, Datacenter]
    hosts: Mapping[str, Host]

    def hosts_of(self, datacenter: str, service: Service | None = None) -> list[Host]:
        return [
            h
            for h in self.hosts.values()
            if h.datacenter == datacenter and (service is None or h.service == service)
        ]

    def wan_address(self, datacenter: str) -> IPv4Address:
        """The datacenter gateway's end of the WAN link (in the datacenters' order)."""
        return self.wan.network_address + 1 + list(self.datacenters).index(datacenter)

    def zookeeper_connect(self, datacenter: str) -> str:
        """The datacenter's brokers' `zookeeper.connect`: its whole ensemble, by hostname."""
        port = self.ports.zookeeper
        return ",".join(f"{h.name}:{port}" for h in self.hosts_of(datacenter, "zookeeper"))

    def bootstrap_servers(self, datacenter: str) -> str:
        port = self.ports.broker
        return ",".join(f"{h.name}:{port}" for h in self.hosts_of(datacenter, "broker"))


def load(path: Path) -> Topology:
    """Read and validate a description; TopologyError names what is wrong."""
    try:
        raw = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise TopologyError(f"{path}: {exc}") from exc
    try:
        return parse(raw)
    except TopologyError as exc:
        raise TopologyError(f"{path}: {exc}") from exc


def parse(raw: Mapping[str, Any]) -> Topology:
    _keys("the description", raw, required={"ports", "wan", "datacenters", "hosts"})
    ports = _ports(_table(raw, "ports"))
    wan = _network("wan", _keys("[wan]", _table(raw, "wan"), required={"subnet"})["subnet"])
    if wan.num_addresses < 4:
        raise TopologyError(f"[wan] subnet {wan} has no room for two gateways")
    datacenters: dict[str, Datacenter] = {}
    for name, table in _table(raw, "datacenters").items():
        where = f"[datacenters.{name}]"
        _check_name(where, name)
        subnet = _network(where, _keys(where, _table_value(where, table), {"subnet"})["subnet"])
        for other in [wan, *(dc.subnet for dc in datacenters.values())]:
            if subnet.overlaps(other):
                raise TopologyError(f"{where} subnet {subnet} overlaps {other}")
        datacenters[name] = Datacenter(name, subnet)
    if len(datacenters) != 2:
        raise TopologyError(f"two datacenters are needed (one WAN link), not {len(datacenters)}")
    hosts = {name: _host(name, table, datacenters) for name, table in _table(raw, "hosts").items()}
    topology = Topology(ports, wan, datacenters, hosts)
    _check_hosts(topology)
    return topology


def _ports(table: Mapping[str, Any]) -> Ports:
    _keys("[ports]", table, required={"broker"}, optional=set(_DEFAULT_PORTS))
    values = {**_DEFAULT_PORTS, **table}
    for key, value in values.items():
        if not isinstance(value, int) or not 0 < value < 65536:
            raise TopologyError(f"[ports] {key} = {value!r} is not a TCP port")
    if len(set(values.values())) != len(values):
        raise TopologyError(f"[ports] must differ: {values}")
    return Ports(**values)


def _host(name: str, table: Any, datacenters: Mapping[str, Datacenter]) -> Host:
    where = f"[hosts.{name}]"
    _check_name(where, name)
    table = _keys(
        where,
        _table_value(where, table),
        required={"datacenter", "address", "service"},
        optional={"id", "rack", "source"},
    )
    service = table["service"]
    if service not in SERVICES:
        raise TopologyError(f"{where} service {service!r} is not one of {', '.join(SERVICES)}")
    needed = {"zookeeper": {"id"}, "broker": {"id", "rack"}, "mirror": {"source"}}.get(service)
    given = set(table) - {"datacenter", "address", "service"}
    if given != (needed or set()):
        raise TopologyError(
            f"{where} a {service} host takes {sorted(needed or ()) or 'no other keys'}, "
            f"not {sorted(given)}"
        )
    datacenter = datacenters.get(table["datacenter"])
    if datacenter is None:
        raise TopologyError(f"{where} datacenter {table['datacenter']!r} is not described")
    try:
        address = IPv4Address(table["address"])
    except ValueError as exc:
        raise TopologyError(f"{where} address: {exc}") from exc
    usable = set(datacenter.subnet.hosts()) - {datacenter.gateway}
    if address not in usable:
        raise TopologyError(
            f"{where} address {address} is not a host address of {datacenter.name}'s "
            f"{datacenter.subnet} (its gateway is {datacenter.gateway})"
        )
    host_id = table.get("id")
    if host_id is not None and (not isinstance(host_id, int) or not 0 < host_id < 256):
        raise TopologyError(f"{where} id {host_id!r} must be an integer from 1 to 255")
    source = table.get("source")
    if source is not None and (source not in datacenters or source == datacenter.name):
        raise TopologyError(f"{where} source {source!r} must be another described datacenter")
    return Host(
        name, datacenter.name, address, cast(Service, service), host_id, table.get("rack"), source
    )


def _check_hosts(topology: Topology) -> None:
    addresses = [h.address for h in topology.hosts.values()]
    if len(set(addresses)) != len(addresses):
        raise TopologyError("two hosts share an address")
    for dc in topology.datacenters:
        services: tuple[Service, ...] = ("zookeeper", "broker")
        for service in services:
            hosts = topology.hosts_of(dc, service)
            if not hosts:
                raise TopologyError(f"{dc} has no {service} host")
            ids = [h.id for h in hosts]
            if len(set(ids)) != len(ids):
                raise TopologyError(f"{dc}'s {service} hosts share an id: {ids}")
        if f"{dc}-gw" in topology.hosts:
            raise TopologyError(f"{dc}-gw is the name of {dc}'s gateway, not a host's")


def _table(raw: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    return _table_value(f"[{key}]", raw[key])


def _table_value(where: str, value: Any) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise TopologyError(f"{where} must be a table")
    return value


def _keys(
    where: str,
    table: Mapping[str, Any],
    required: Collection[str],
    optional: Collection[str] = (),
) -> Mapping[str, Any]:
    missing = set(required) - set(table)
    unknown = set(table) - set(required) - set(optional)
    if missing or unknown:
        problems = [f"missing {sorted(missing)}"] if missing else []
        problems += [f"unknown {sorted(unknown)}"] if unknown else []
        raise TopologyError(f"{where}: {', '.join(problems)}")
    return table


def _network(where: str, value: Any) -> IPv4Network:
    try:
        network = IPv4Network(value)
    except ValueError as exc:
        raise TopologyError(f"{where} subnet: {exc}") from exc
    if not network.is_private:
        raise TopologyError(f"{where} subnet {network} is not a private range")
    return network


def _check_name(where: str, name: str) -> None:
    if not _NAME.match(name):
        raise TopologyError(
            f"{where}: a name is a lowercase letter, then up to 14 letters, digits or '-'"
        )
