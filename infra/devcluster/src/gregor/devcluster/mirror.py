"""A topology's `gregor-mirror` host as a process: `gregor-mirror mm2.properties --clusters
<its datacenter>`, copying every topic of its `source` datacenter into its own (MirrorMaker
2's names: remote topics `<source>.<topic>`, checkpoints, heartbeats).

A mirror is ready once it copies, shown as MM2's users check a replication path: the
heartbeats emitted into its source (by the mirror writing into that datacenter) arrive in
its own datacenter as `<source>.heartbeats`. That record has been fetched from the source,
its remote topic created and the record delivered into the target, and its offset syncs
follow. With no mirror writing into the source, it is ready once its own heartbeats are
written into its datacenter.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

from gregor.devcluster.supervisor import Supervised, wait_until
from gregor.devcluster.topology import Host, Topology
from gregor.devcluster.wire import end_offsets
from gregor.storage.checkpoints import format_properties

HEARTBEATS = "heartbeats"  # MM2's heartbeats topic, in each cluster a flow writes into


def mirror_command() -> list[str]:
    """`gregor-mirror` from the running interpreter's environment (else `python -m`)."""
    script = Path(sys.executable).parent / "gregor-mirror"
    return [str(script)] if script.exists() else [sys.executable, "-m", "gregor.mirror"]


def mirror_properties(topology: Topology, host: Host) -> dict[str, str]:
    """The mm2.properties of a mirror host: every topic of its source into its datacenter."""
    assert host.source is not None
    source, target = host.source, host.datacenter
    return {
        "clusters": f"{source}, {target}",
        f"{source}.bootstrap.servers": topology.bootstrap_servers(source),
        f"{target}.bootstrap.servers": topology.bootstrap_servers(target),
        f"{source}->{target}.enabled": "true",
        f"{source}->{target}.topics": ".*",
        # New topics and groups, and consumers' progress, seen within seconds (MM2's
        # defaults, 10 min and 1 min, suit a deployment that changes slowly).
        "refresh.topics.interval.seconds": "5",
        "refresh.groups.interval.seconds": "5",
        "emit.checkpoints.interval.seconds": "5",
    }


def not_copying(topology: Topology, host: Host) -> str | None:
    """Why the mirror of `host` is not ready yet (see above), or None once it is. Asks the
    brokers at their addresses, from wherever it is called (a host of the topology)."""
    assert host.source is not None
    source, target = host.source, host.datacenter
    writes_into_source = any(
        h.service == "mirror" and h.datacenter == source for h in topology.hosts.values()
    )
    needed = [(source, HEARTBEATS), (target, f"{source}.{HEARTBEATS}")]
    for datacenter, topic in needed if writes_into_source else [(target, HEARTBEATS)]:
        brokers = {
            h.id: (str(h.address), topology.ports.broker)
            for h in topology.hosts_of(datacenter, "broker")
            if h.id is not None
        }
        try:
            ends = end_offsets(brokers, topic)
        except ConnectionError:
            return f"no broker of {datacenter} answers"
        if not ends or not any(ends.values()):
            state = "does not exist" if ends is None else "is empty"
            return f"{datacenter}'s topic {topic} {state}"
    return None


class MirrorProcess(Supervised):
    """A mirror host's gregor-mirror, with its config and log in `directory` (`settings`:
    mm2.properties of a run's own over the host's, `exactly.once.support` say)."""

    def __init__(
        self,
        topology: Topology,
        host: Host,
        directory: Path,
        namespace: str | None = None,
        settings: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(f"mirror {host.name}", directory / "mirror.log", namespace)
        self.topology = topology
        self.host = host
        self.properties = {**mirror_properties(topology, host), **(settings or {})}
        self.config_path = directory / "mm2.properties"
        self.datacenter = host.datacenter

    def launch(self) -> None:
        """Start the process without waiting for it (see `wait_ready`)."""
        if self.is_running():
            return
        self.config_path.parent.mkdir(parents=True, exist_ok=True)
        header = "written by devcluster from infra/topology.toml"
        self.config_path.write_text(format_properties(self.properties, header))
        argv = [*mirror_command(), str(self.config_path), "--clusters", self.datacenter]
        self.spawn(self.command(argv))

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Wait until the mirror copies; raise naming what is missing, with its log's tail,
        if it does not in time or exits."""
        missing = ["not asked yet"]

        def ready() -> bool:
            self.check_alive()
            missing[0] = self.probe(not_copying, self.topology, self.host) or ""
            return not missing[0]

        try:
            wait_until(ready, timeout, f"{self.name} to copy", interval=0.5)
        except TimeoutError:
            raise RuntimeError(
                f"{self.name} ({self.host.source}->{self.datacenter}) is not copying after "
                f"{timeout:.0f}s: {missing[0]}; its log ends with:\n{self.log_tail()}"
            ) from None
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}; its log ends with:\n{self.log_tail()}") from exc
