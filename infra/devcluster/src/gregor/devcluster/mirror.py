"""A topology's `gregor-mirror` host as a process: `gregor-mirror mm2.properties --clusters
<its datacenter>`, copying every topic of its `source` datacenter into its own (MirrorMaker
2's names: remote topics `<source>.<topic>`, checkpoints, heartbeats)."""

from __future__ import annotations

import sys
from pathlib import Path

from gregor.devcluster.supervisor import Supervised
from gregor.devcluster.topology import Host, Topology
from gregor.storage.checkpoints import format_properties


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


class MirrorProcess(Supervised):
    """A mirror host's gregor-mirror, with its config and log in `directory`."""

    def __init__(
        self, topology: Topology, host: Host, directory: Path, namespace: str | None = None
    ) -> None:
        super().__init__(f"mirror {host.name}", directory / "mirror.log", namespace)
        self.properties = mirror_properties(topology, host)
        self.config_path = directory / "mm2.properties"
        self.datacenter = host.datacenter

    def launch(self) -> None:
        """Start the process (it has no readiness to wait for: it copies once it runs)."""
        if self.is_running():
            return
        self.config_path.parent.mkdir(parents=True, exist_ok=True)
        header = "written by devcluster from infra/topology.toml"
        self.config_path.write_text(format_properties(self.properties, header))
        argv = [*mirror_command(), str(self.config_path), "--clusters", self.datacenter]
        self.spawn(self.command(argv))

    def wait_ready(self, timeout: float = 0.0) -> None:
        self.check_alive()
