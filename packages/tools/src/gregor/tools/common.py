"""What every subcommand shares: the connection flags, client properties, output (rich tables
or JSON), and the one-line errors."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

from rich import box
from rich.console import Console
from rich.table import Table

from gregor.client import AdminClient, TopicPartition

Run = Callable[[argparse.Namespace], int]


class ToolError(Exception):
    """A failure to report as one line (exit status 1)."""


class Parser(argparse.ArgumentParser):
    """argparse, with a bad argument reported as one line (exit status 2), like any error."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def add_output(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON for scripts")


def add_connection(parser: argparse.ArgumentParser) -> None:
    """The flags of every subcommand that talks to a cluster, as Kafka's tools name them."""
    parser.add_argument(
        "--bootstrap-server", required=True, metavar="HOST:PORT[,...]", help="brokers to ask"
    )
    parser.add_argument(
        "--command-config",
        type=Path,
        metavar="FILE",
        help="client properties (Java names), e.g. security.protocol and sasl.*",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="how long to retry before giving up (default.api.timeout.ms; default 30)",
    )
    add_output(parser)


def read_properties(path: Path) -> dict[str, str]:
    """A Java .properties file: `key=value` or `key: value` lines, `#`/`!` comments, and
    backslash-continued lines."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ToolError(f"cannot read {path}: {exc.strerror}") from None
    out: dict[str, str] = {}
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\"):
            pending = line[:-1]
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if cut < 0:
            raise ToolError(f"{path}: not a key=value line: {line!r}")
        out[line[:cut].strip()] = line[cut + 1 :].strip()
    return out


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except OSError as exc:
        raise ToolError(f"cannot read {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise ToolError(f"{path} is not JSON: {exc}") from None


def json_partitions(path: Path, *fields: str) -> list[dict[str, Any]]:
    """The `partitions` of a Kafka tool's JSON file ({"version": 1, "partitions": [...]}),
    each checked for `topic`, `partition` and these fields."""
    document = read_json(path)
    partitions = document.get("partitions") if isinstance(document, dict) else None
    if not isinstance(partitions, list):
        raise ToolError(f'{path}: expected {{"partitions": [...]}}')
    for entry in partitions:
        missing = [f for f in ("topic", "partition", *fields) if f not in entry]
        if missing:
            raise ToolError(f"{path}: a partition without {', '.join(missing)}: {entry}")
    return partitions


def client_config(args: argparse.Namespace, **extra: str) -> dict[str, str]:
    """bootstrap.servers, then the --command-config file's properties, then `extra`."""
    config = {"bootstrap.servers": args.bootstrap_server}
    if args.command_config is not None:
        config.update(read_properties(args.command_config))
    config.update(extra)
    return config


@contextmanager
def admin(args: argparse.Namespace) -> Iterator[AdminClient]:
    timeout = str(int(args.timeout * 1000))
    config = client_config(args)
    config.setdefault("default.api.timeout.ms", timeout)
    client = AdminClient(config)
    try:
        yield client
    finally:
        client.close()


def key_values(items: Sequence[str] | None, what: str) -> dict[str, str]:
    """`k=v` arguments (each may hold several, comma-separated; `[a,b]` keeps a list's
    commas, as kafka-configs reads them)."""
    out: dict[str, str] = {}
    for item in items or ():
        for part in split_commas(item):
            key, sep, value = part.partition("=")
            if not sep or not key.strip():
                raise ToolError(f"{what}: expected key=value, got {part!r}")
            value = value.strip()
            if value.startswith("[") and value.endswith("]"):
                value = value[1:-1]
            out[key.strip()] = value
    return out


def split_commas(text: str) -> list[str]:
    """Split on commas outside square brackets."""
    parts: list[str] = []
    depth, start = 0, 0
    for i, char in enumerate(text):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p for p in (p.strip() for p in parts) if p]


def names(items: Sequence[str] | None) -> list[str]:
    """Repeated and comma-separated names, in order, once each."""
    return list(dict.fromkeys(n for item in items or () for n in split_commas(item)))


def topic_partitions(spec: str) -> tuple[str, list[int] | None]:
    """`topic` or `topic:0,1,2` (kafka-consumer-groups' --topic)."""
    topic, sep, partitions = spec.partition(":")
    if not sep:
        return topic, None
    try:
        return topic, [int(p) for p in partitions.split(",") if p.strip()]
    except ValueError:
        raise ToolError(f"--topic {spec!r}: partitions must be numbers") from None


def as_tp(text: str) -> TopicPartition:
    """`topic-3` or `topic:3`."""
    for sep in (":", "-"):
        topic, found, partition = text.rpartition(sep)
        if found and topic and partition.isdigit():
            return TopicPartition(topic, int(partition))
    raise ToolError(f"{text!r} is not a partition (topic-N or topic:N)")


class Output:
    """Human tables (rich) on stdout, or one JSON document with --json."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.json = bool(getattr(args, "json", False))
        # Not a terminal (a pipe, a file): wide enough that no cell is folded.
        self.console = Console(width=None if sys.stdout.isatty() else 4000, highlight=False)

    def emit(self, document: Any) -> None:
        print(json.dumps(document, indent=2, sort_keys=False))

    def table(
        self, columns: Sequence[str], rows: Sequence[Sequence[Any]], title: str | None = None
    ) -> None:
        table = Table(*columns, box=box.SIMPLE_HEAD, title=title, title_justify="left")
        for row in rows:
            table.add_row(*(cell_text(c) for c in row))
        self.console.print(table)

    def done(self, text: str, document: Any) -> None:
        """What a change did: a sentence, or its JSON document."""
        if self.json:
            self.emit(document)
        else:
            self.line(text)

    def line(self, text: str) -> None:
        print(text)  # as written: rich would expand the tabs Kafka's tools print


def cell_text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def one_line(text: str) -> str:
    return " ".join(str(text).split())


def by_topic(offsets: Mapping[TopicPartition, Any]) -> dict[str, dict[int, Any]]:
    out: dict[str, dict[int, Any]] = {}
    for tp, value in sorted(offsets.items()):
        out.setdefault(tp.topic, {})[tp.partition] = value
    return out
