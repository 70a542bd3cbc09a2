"""`python -m gregor.devcluster.netns_cli up|down|status` (`nox -s topology`, as root): the
two-datacenter topology of `infra/topology.toml` as network namespaces. `up` returns once
every ZooKeeper and broker serves and leaves them running; `down` stops and removes it all,
also after a harness that crashed."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from gregor.devcluster.netns import NetnsTopology, teardown
from gregor.devcluster.topology import TopologyError, load


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="nox -s topology --",
        description="Gregor's two-datacenter topology as Linux network namespaces (root).",
    )
    parser.add_argument("command", choices=["up", "down", "status"])
    parser.add_argument("--dir", default=".topology", help="each host's config, data and logs")
    parser.add_argument("--description", default="infra/topology.toml", help="the deployment")
    parser.add_argument(
        "--run-id", help="names the namespaces gregor-<run id>-<host> (default: the folder's)"
    )
    parser.add_argument(
        "--network-only", action="store_true", help="up: the hosts and links, no services"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    directory = Path(args.dir).absolute()
    if args.command == "down":
        removed = teardown(directory, f"gregor-{args.run_id}-" if args.run_id else None)
        print(f"removed {len(removed)} namespaces and their processes")
        return 0
    try:
        topology = NetnsTopology(load(Path(args.description)), directory, args.run_id)
    except (TopologyError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.command == "up":
        started = time.monotonic()
        print(f"bringing up {len(topology.topology.hosts)} hosts under {directory} ...")
        topology.up(services=not args.network_only)
        print(f"up in {time.monotonic() - started:.1f}s")
    return show(topology)


def show(topology: NetnsTopology) -> int:
    """A line per host; 1 if a host is missing or a service does not answer."""
    healthy = True
    for row in topology.status():
        host = row.host
        serving = {None: "", True: "serving", False: "NOT SERVING"}[row.serving]
        pids = ",".join(map(str, row.pids)) or "-"
        print(
            f"{host.name:<13} {host.service:<10} {host.address!s:<13} "
            f"{row.namespace if row.exists else 'MISSING':<30} pids {pids:<8} {serving}"
        )
        healthy &= row.exists and row.serving is not False
    for name in topology.topology.datacenters:
        client = topology.namespace(f"{name}-client")
        print(f"{name}: bootstrap {topology.bootstrap_servers(name)}")
        print(f"    e.g. ip netns exec {client} kcat -b {name}-broker1:9092 -L")
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
