"""`python -m gregor.devcluster` (`nox -s cluster`, the README's main job): a ZooKeeper and
brokers on 127.0.0.1, a `demo` topic with a sample produced and read back, until Ctrl-C."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from gregor.devcluster.admin import create_topic, produce_and_fetch_sample
from gregor.devcluster.cluster import LocalCluster
from gregor.devcluster.supervisor import die_with_parent

DEMO_TOPIC = "demo"


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m gregor.devcluster",
        description="A local Gregor cluster: ZooKeeper and brokers on 127.0.0.1 until Ctrl-C.",
    )
    parser.add_argument("--dir", default=".cluster", help="where every process keeps its data")
    parser.add_argument("--brokers", type=int, default=3, help="how many brokers (ids 0..N-1)")
    parser.add_argument("--port", type=int, default=9092, help="the first broker's port")
    parser.add_argument("--zookeeper-port", type=int, default=2181)
    parser.add_argument(
        "--listener",
        action="append",
        default=[],
        metavar="NAME:PROTOCOL",
        help="another listener beside PLAINTEXT, e.g. EXTERNAL:SASL_SSL (its TLS and SASL "
        "settings go in --property)",
    )
    parser.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a server property for every broker, e.g. ssl.keystore.location=/path/broker.pem",
    )
    args = parser.parse_args(argv)
    for items, separator, form in (
        (args.listener, ":", "NAME:PROTOCOL"),
        (args.property, "=", "KEY=VALUE"),
    ):
        for item in items:
            if separator not in item:
                parser.error(f"{item!r} is not {form}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    directory = Path(args.dir).absolute()
    cluster = LocalCluster(
        directory,
        args.brokers,
        ports=[args.port + i for i in range(args.brokers)],
        zookeeper_port=args.zookeeper_port,
        properties=dict(item.split("=", 1) for item in args.property),
        listeners=dict(item.upper().split(":", 1) for item in args.listener),
    )
    # SIGTERM (nox's second step after Ctrl-C, or a plain `kill`) stops the cluster as
    # Ctrl-C does, so no ZooKeeper or broker outlives this process.
    signal.signal(signal.SIGTERM, _interrupt)
    # Ctrl-C stops it even when started where SIGINT is ignored (a background job of a
    # script, `nohup ... &`), which Python would otherwise keep ignoring.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    die_with_parent(signal.SIGTERM)  # and so does the end of whatever started this process
    print(f"starting ZooKeeper and {args.brokers} brokers under {directory} ...", flush=True)
    try:
        cluster.start()  # stops what it started if it fails or is interrupted
    except KeyboardInterrupt:
        print("\nstopped", flush=True)
        return 0
    try:
        create_topic(cluster, DEMO_TOPIC, 3, min(3, len(cluster.brokers)))
        for offset, value in produce_and_fetch_sample(cluster, DEMO_TOPIC):
            print(f"  {DEMO_TOPIC}-0 @ {offset}: {value.decode()}")
        print()
        print(f"bootstrap servers: {cluster.bootstrap_servers}")
        for name in cluster.brokers[0].protocols:
            if name != "PLAINTEXT":
                print(f"  {name}: {cluster.bootstrap_servers_of(name)}")
        print(f"zookeeper:         {cluster.zookeeper_connect}")
        print(f"logs:              {directory}/broker-*/broker.log")
        print("running; press Ctrl-C to stop", flush=True)
        while all(b.is_running() for b in cluster.brokers):
            time.sleep(0.5)
        print("a broker exited; stopping the cluster", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\nstopping ...", flush=True)
        return 0
    finally:
        cluster.stop()
        print("stopped", flush=True)
