"""The `gregor` command: its subcommands, and how every failure becomes one line and a
non-zero exit status (1: the operation failed; 2: a bad argument)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from gregor.client import ConfigError
from gregor.protocol.errors import KafkaError, RequestTimedOutError, UnsupportedVersionError
from gregor.tools import (
    __version__,
    acls,
    configs,
    delete_records,
    dumplog,
    elect,
    groups,
    perf,
    quotas,
    reassign,
    topics,
)
from gregor.tools.common import Parser, ToolError, one_line

SUBCOMMANDS = (
    topics,
    groups,
    configs,
    quotas,
    acls,
    perf,
    dumplog,
    delete_records,
    elect,
    reassign,
)


def build_parser() -> Parser:
    parser = Parser(
        prog="gregor",
        description="Operate a Kafka-protocol cluster (Gregor or Apache Kafka).",
    )
    parser.add_argument("--version", action="version", version=f"gregor-tools {__version__}")
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=Parser
    )
    for module in SUBCOMMANDS:
        module.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        status: int = args.run(args)
    except UnsupportedVersionError as exc:
        return _fail(f"not supported by this cluster: {exc}")
    except RequestTimedOutError as exc:
        servers = getattr(args, "bootstrap_server", None)
        return _fail(f"{exc} (is the cluster at {servers} reachable?)" if servers else str(exc))
    except (ToolError, ConfigError, KafkaError) as exc:
        return _fail(str(exc))
    except OSError as exc:
        return _fail(f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else ""))
    except KeyboardInterrupt:
        return 130
    return status


def _fail(message: str) -> int:
    print(f"gregor: error: {one_line(message)}", file=sys.stderr)
    return 1
