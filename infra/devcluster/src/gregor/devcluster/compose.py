"""The deployment as a docker-compose project, generated from its description
(`infra/topology.toml`): `infra/compose/docker-compose.yml` and each host's config file
under `infra/compose/config/<host>/`, made by the same code that configures the namespace
topology's processes (`zookeeper_for`, `broker_for`), so both say the same.

`nox -s compose` (`python -m gregor.devcluster.compose`) rewrites them; a test fails when
the committed files differ from what the description generates, or break the Compose
specification's schema.
Each datacenter is a network of its own with the description's subnet and addresses; the
mirrors also join the other datacenter's network, their only way across (Compose has no
router between networks, which the namespace topology's gateways are).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gregor.devcluster.etl import etl_arguments
from gregor.devcluster.mirror import mirror_properties
from gregor.devcluster.netns import broker_for, zookeeper_for
from gregor.devcluster.topology import Host, Service, Topology, load
from gregor.storage.checkpoints import format_properties

DATA = Path("/var/lib/gregor")  # each container's volume
CONFIG = Path("/etc/gregor")  # where its config file is mounted
CONFIG_FILES = {"zookeeper": "zoo.cfg", "broker": "server.properties", "mirror": "mm2.properties"}
# The Prometheus endpoints: each broker's and mirror's (metrics.prometheus.listener), and
# the ETL host's gregor-etl's (--metrics-listener).
METRICS_PORT = 9404
MIRROR_METRICS_PORT = 9108
ETL_METRICS_PORT = 9109
SCRAPED: dict[Service, int] = {
    "broker": METRICS_PORT,
    "mirror": MIRROR_METRICS_PORT,
    "etl": ETL_METRICS_PORT,
}
# A service started after those of its datacenter.
_NEEDS: dict[str, Service] = {"broker": "zookeeper", "etl": "broker"}
HEADER = "# Generated from infra/topology.toml by `nox -s compose`: edit that, not this.\n"


def config_file(topology: Topology, host: Host) -> str | None:
    """The content of a host's config file (None: the host has none)."""
    if host.service == "zookeeper":
        server = zookeeper_for(topology, host, DATA, "0.0.0.0")
        # The container cannot be given its myid as a file: its data volume starts empty.
        return "\n".join(["quorumListenOnAllIPs=true", *server.settings()]) + "\n"
    if host.service == "broker":
        broker = broker_for(topology, host, DATA, "0.0.0.0")
        properties = broker.properties()
        properties["metrics.prometheus.listener"] = f"http://0.0.0.0:{METRICS_PORT}"
        return format_properties(properties, "generated from infra/topology.toml")
    if host.service == "mirror":
        properties = mirror_properties(topology, host)
        properties["metrics.prometheus.listener"] = f"http://0.0.0.0:{MIRROR_METRICS_PORT}"
        return format_properties(properties, "generated from infra/topology.toml")
    return None


def _command(topology: Topology, host: Host) -> list[str] | None:
    config = str(CONFIG / CONFIG_FILES.get(host.service, ""))
    if host.service == "broker":
        return ["gregor-broker", config]
    if host.service == "mirror":
        return ["gregor-mirror", config, "--clusters", host.datacenter]
    if host.service == "etl":
        listener = f"http://0.0.0.0:{ETL_METRICS_PORT}"
        warehouse = DATA / "warehouse"
        return [
            "gregor-etl",
            *etl_arguments(topology, host, warehouse),
            "--metrics-listener",
            listener,
        ]
    return None  # the image's own: ZooKeeper's start script, an idle client


def compose(topology: Topology) -> dict[str, Any]:
    """The docker-compose project, as the YAML file's data."""
    services: dict[str, Any] = {}
    configs: dict[str, Any] = {}
    volumes: dict[str, Any] = {}
    for host in topology.hosts.values():
        service: dict[str, Any] = {
            "build": {"context": "../..", "dockerfile": f"infra/compose/{host.service}.Dockerfile"},
            "image": f"gregor-{host.service}",
            "hostname": host.name,
            "networks": {host.datacenter: {"ipv4_address": str(host.address)}},
        }
        if host.source is not None:
            service["networks"][host.source] = {}
        if host.service == "zookeeper" and host.id is not None:
            service["environment"] = {"ZOO_MY_ID": str(host.id)}
        if host.service in ("zookeeper", "broker", "etl"):
            volumes[host.name] = {}
            service["volumes"] = [f"{host.name}:{DATA}"]
        if host.service in CONFIG_FILES:
            configs[host.name] = {"file": f"./config/{host.name}/{CONFIG_FILES[host.service]}"}
            target = str(CONFIG / CONFIG_FILES[host.service])
            service["configs"] = [{"source": host.name, "target": target}]
        needs = _NEEDS.get(host.service)
        if needs is not None:  # started after them
            service["depends_on"] = [h.name for h in topology.hosts_of(host.datacenter, needs)]
        command = _command(topology, host)
        if command is not None:
            service["command"] = command
        services[host.name] = service
    networks = {
        name: {"ipam": {"config": [{"subnet": str(dc.subnet), "gateway": str(dc.gateway)}]}}
        for name, dc in topology.datacenters.items()
    }
    return {
        "services": services,
        "networks": networks,
        "volumes": volumes,
        "configs": configs,
    }


def to_yaml(value: Any, indent: int = 0) -> str:
    """YAML for the compose file's data: maps, lists and scalars, every string quoted (a
    JSON string is a YAML one), so no value is read as another type."""
    pad = "  " * indent
    if isinstance(value, dict):
        if not value:
            return "{}"
        lines = []
        for key, item in value.items():
            nested = isinstance(item, dict | list) and bool(item)
            text = to_yaml(item, indent + 1)
            lines.append(f"{pad}{key}:\n{text}" if nested else f"{pad}{key}: {text}")
        return "\n".join(lines)
    if isinstance(value, list):
        if not value:
            return "[]"
        items = []
        for item in value:
            text = to_yaml(item, indent + 1)
            items.append(f"{pad}- {text.lstrip()}" if isinstance(item, dict) else f"{pad}- {text}")
        return "\n".join(items)
    return json.dumps(value)


def prometheus(topology: Topology) -> dict[str, Any]:
    """A Prometheus scrape config for every broker, mirror and ETL host, labelled with its
    datacenter (for infra/grafana's dashboards). The ETL host runs gregor-etl as a
    service (--every), serving its metrics while it runs."""
    return {
        "global": {"scrape_interval": "15s"},
        "scrape_configs": [
            {
                "job_name": f"gregor-{service}",
                "static_configs": [
                    {
                        "targets": [f"{h.name}:{port}" for h in hosts],
                        "labels": {"datacenter": name},
                    }
                    for name in topology.datacenters
                    if (hosts := topology.hosts_of(name, service))
                ],
            }
            for service, port in SCRAPED.items()
        ],
    }


def generate(topology: Topology) -> dict[str, str]:
    """Every generated file, by its path under infra/compose."""
    files = {
        "docker-compose.yml": HEADER + to_yaml(compose(topology)) + "\n",
        "prometheus.yml": HEADER + to_yaml(prometheus(topology)) + "\n",
    }
    for host in topology.hosts.values():
        content = config_file(topology, host)
        if content is not None:
            files[f"config/{host.name}/{CONFIG_FILES[host.service]}"] = content
    return files


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gregor.devcluster.compose")
    parser.add_argument("--description", default="infra/topology.toml")
    parser.add_argument("--out", default="infra/compose")
    args = parser.parse_args(argv)
    out = Path(args.out)
    for path, content in generate(load(Path(args.description))).items():
        (out / path).parent.mkdir(parents=True, exist_ok=True)
        (out / path).write_text(content)
        print(out / path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
