"""`gregor-mirror mm2.properties [--clusters B ...]`: run the flows that write into the
clusters named (all of them by default), so one process per datacenter runs near its
target, as MirrorMaker 2's dedicated mode does."""

from __future__ import annotations

import argparse
import logging
import sys

import trio

from gregor.client.logs import log_json
from gregor.mirror.config import MirrorConfigError, load
from gregor.mirror.runner import Mirror


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gregor-mirror", description=__doc__)
    parser.add_argument("config", help="an mm2.properties file (MirrorMaker 2's names)")
    parser.add_argument(
        "--clusters", nargs="+", metavar="ALIAS", help="run only the flows into these clusters"
    )
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        config = load(args.config)
        mirror = Mirror(config, set(args.clusters) if args.clusters else None)
    except MirrorConfigError as exc:
        print(f"gregor-mirror: {exc}", file=sys.stderr)
        return 2
    if config.log_format == "json":
        log_json()
    try:
        trio.run(mirror.run_until_signalled)
    except MirrorConfigError as exc:  # found once running (a listener that cannot bind)
        print(f"gregor-mirror: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
