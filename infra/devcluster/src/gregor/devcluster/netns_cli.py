"""`python -m gregor.devcluster.netns_cli up|down|status` (`nox -s topology`, as root): the
two-datacenter topology of `infra/topology.toml` as network namespaces. `up` runs it until
Ctrl-C or SIGTERM, as `nox -s cluster` runs the local cluster (its processes die with it,
also when it is killed outright); `status` and `down` work from any other shell, `down` also
after an `up` that crashed and left its namespaces."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from gregor.devcluster.netns import NetnsTopology, teardown
from gregor.devcluster.supervisor import die_with_parent
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
    parser.add_argument(
        "--etl",
        action="store_true",
        help="up: also run gregor-etl on the ETL host (Spark: a JVM of about 1 GB)",
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
        return run(topology, services=not args.network_only, etl=args.etl)
    return show(topology)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def run(topology: NetnsTopology, services: bool, etl: bool = False) -> int:
    """Up until Ctrl-C, SIGTERM, the end of whatever started this process, or a service
    that exits; then down."""
    signal.signal(signal.SIGTERM, _interrupt)
    die_with_parent(signal.SIGTERM)
    started = time.monotonic()
    hosts = len(topology.topology.hosts)
    print(f"bringing up {hosts} hosts under {topology.directory} ...", flush=True)
    try:
        # Takes down what it brought up if it fails or is interrupted.
        topology.up(services, mirrors=True, etl=etl)
    except KeyboardInterrupt:
        print("\nstopped", flush=True)
        return 0
    except RuntimeError as exc:  # a service that did not start, or a mirror not copying
        print(f"error: {exc}\nstopped", file=sys.stderr, flush=True)
        return 1
    try:
        print(f"up in {time.monotonic() - started:.1f}s")
        show(topology)
        print("running; press Ctrl-C to stop", flush=True)
        while all(process.is_running() for process in topology.processes.values()):
            time.sleep(0.5)
        print("a service exited; stopping the topology", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\nstopping ...", flush=True)
        return 0
    finally:
        topology.down()
        print("stopped", flush=True)


def show(topology: NetnsTopology) -> int:
    """A line per host; 1 if a host is missing or a service does not answer."""
    healthy = True
    for row in topology.status():
        host = row.host
        serving = {None: "", True: "serving", False: "NOT SERVING"}[row.serving]
        if host.service == "mirror" and row.serving is not None:
            serving = "copying" if row.serving else "NOT COPYING"
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
    for host in topology.topology.hosts.values():
        if host.service == "etl":
            where = topology.directory / host.name
            print(f"{host.name}: gregor-etl (with --etl) loads {host.datacenter}'s topics into "
                  f"{where / 'warehouse'}, its log {where / 'etl.log'}")  # fmt: skip
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
