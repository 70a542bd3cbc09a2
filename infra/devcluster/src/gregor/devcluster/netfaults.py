"""Network faults in a running namespace topology, as iptables rules inside its namespaces:
a host cut off from everyone, two groups of hosts that cannot reach each other (a datacenter
split in two), the WAN cut, a one-way partition, and heal.

Packets are dropped, never rejected: a partition looks like one, connection attempts time
out. Faults add up until `heal` removes them all. Each namespace's whole rule set is written
at once (`iptables-restore`), so a fault takes one command per namespace it touches; the
rules live in the topology's own namespaces and vanish with them.
"""

from __future__ import annotations

from collections.abc import Iterable

from gregor.devcluster.namespaces import run_in
from gregor.devcluster.netns import NetnsTopology


class NetworkFaults:
    def __init__(self, topology: NetnsTopology) -> None:
        self.topology = topology
        self._rules: dict[str, list[str]] = {}  # namespace -> rules of the filter table

    def isolate(self, host: str) -> None:
        """`host` neither sends to nor hears from any other host (its loopback still works)."""
        self._add(host, ["-A INPUT ! -i lo -j DROP", "-A OUTPUT ! -o lo -j DROP"])

    def partition(self, side: Iterable[str], other: Iterable[str]) -> None:
        """No packet passes between a host of `side` and a host of `other`, either way; each
        side still reaches everyone else."""
        others = [self._address(h) for h in other]
        for host in side:
            rules = [f"-A INPUT -s {a} -j DROP" for a in others]
            self._add(host, rules + [f"-A OUTPUT -d {a} -j DROP" for a in others])

    def split_datacenter(self, datacenter: str, side: Iterable[str]) -> None:
        """Split the datacenter's LAN in two: `side` and the rest of its hosts."""
        side = set(side)
        hosts = {h.name for h in self.topology.topology.hosts_of(datacenter)}
        if not side <= hosts:
            raise ValueError(f"{sorted(side - hosts)} are not hosts of {datacenter}")
        self.partition(sorted(side), sorted(hosts - side))

    def cut_wan(self) -> None:
        """Neither datacenter reaches the other; each still works inside."""
        for datacenter in self.topology.topology.datacenters:
            gateway = self.topology.gateway(datacenter)
            self._add_rules(gateway, ["-A FORWARD -i wan -j DROP", "-A FORWARD -o wan -j DROP"])

    def one_way(self, source: Iterable[str], destination: Iterable[str]) -> None:
        """Packets from `source` hosts never reach `destination` hosts; the other way works
        (so a TCP connection either way cannot be made: its replies are lost)."""
        sources = [self._address(h) for h in source]
        for host in destination:
            self._add(host, [f"-A INPUT -s {a} -j DROP" for a in sources])

    def heal(self) -> None:
        """Remove every fault."""
        faulty, self._rules = list(self._rules), {}
        for namespace in faulty:
            self._apply(namespace)

    def _address(self, host: str) -> str:
        try:
            return str(self.topology.topology.hosts[host].address)
        except KeyError:
            raise ValueError(f"{host!r} is not a host of the topology") from None

    def _add(self, host: str, rules: list[str]) -> None:
        self._address(host)  # a known host
        self._add_rules(self.topology.namespace(host), rules)

    def _add_rules(self, namespace: str, rules: list[str]) -> None:
        self._rules.setdefault(namespace, []).extend(rules)
        self._apply(namespace)

    def _apply(self, namespace: str) -> None:
        table = ["*filter", ":INPUT ACCEPT [0:0]", ":FORWARD ACCEPT [0:0]", ":OUTPUT ACCEPT [0:0]"]
        table += [*self._rules.get(namespace, []), "COMMIT"]
        run_in(namespace, ["iptables-restore"], input="\n".join(table) + "\n")
